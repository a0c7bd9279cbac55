"""Pipeline parallelism as vLLM V1 runs it (llmservingsim/pipeline.py): the batch queue of
``step_with_batch_queue`` (size pp), requests in flight skipped by the scheduler, and the
stage-by-stage timing of batches in flight, with hand-derived numbers.

Re-expressed from vLLM's tests: tests/v1/core/test_scheduler.py (PP: a request whose token
is in flight is not scheduled again; the next batch takes the other requests) and
tests/v1/engine/test_engine_core.py ``test_engine_core_concurrent_batches`` (with a batch
queue of 2 a second batch is launched before the first returns, and outputs come back in
launch order)."""
from __future__ import annotations

from types import SimpleNamespace

from hooks import Hooks
from llmservingsim.events import EventLoop
from llmservingsim.overhead_model import Framework
from llmservingsim.pipeline import PipelineClock, PipelineInstance
from llmservingsim.perf_model import batch_shape
from llmservingsim.execution_graph import StageComm

from engine_helpers import assert_engine_empty, create_scheduler, make_request


class FakePerf:
    """A stage's layers take 60 µs whatever the batch; embedding 4 µs (stage 0); the
    once-per-step ops 10 µs in all, so final norm + lm_head + sampler are 6 µs (last stage)."""
    bundle = SimpleNamespace(dense={"embedding": lambda tokens: 4.0})

    def once_us(self, shape):
        return 10.0

    def compute_us(self, shape):
        return 70.0                        # one stage's layers (60) + the once-per-step ops (10)


class FakeComm:
    """Each stage's TP all-reduces 5 µs; the activations stage 0 -> 1 take 2 µs, across nodes."""

    def stage_comm(self, tokens):
        return StageComm((5000, 5000), (2000,), (True,))


def timer(framework_us=1.0):
    return SimpleNamespace(perf=FakePerf(), comm=FakeComm(), framework=Framework(step_us=framework_us))


def test_two_batches_in_flight_exact_stage_times():
    # stage 0: 60 + 4 µs compute + 5 µs all-reduce + 1 µs framework overhead = 70,000 ns
    # stage 1: 60 + 6 µs compute + 5 µs all-reduce                          = 71,000 ns
    # batch A at t=0: stage 0 [0, 70000]; send [70000, 72000]; stage 1 [72000, 143000]
    # batch B at t=0: stage 0 waits for the send of A: [72000, 142000]; stage 1 is busy with A
    #   until 143000 (the recv is posted then): send [143000, 145000]; stage 1 [145000, 216000]
    clock = PipelineClock(timer(), 2)
    shape = batch_shape([], [100])
    a = clock.launch(shape, 0)
    b = clock.launch(shape, 0)
    assert (a.start_ns, a.done_ns, a.latency_ns) == (0, 143000, 143000)
    assert (b.start_ns, b.done_ns) == (72000, 216000)
    # one batch after the other on one stage would take 2 x 143,000 = 286,000 ns; two in flight 216,000
    # per-GPU means: compute (64000 + 66000) / 2, comm (10000 + 2 x 2000) / 2, overhead 1000 / 2
    assert (a.compute_ns, a.comm_ns, a.overhead_ns, a.total_ns) == (65000, 7000, 500, 72500)
    assert (a.allreduce_ns, a.sendrecv_ns, a.inter_node_ns) == (10000, 2000, 2000)


def test_equal_per_token_compute_per_stage():
    clock = PipelineClock(timer(), 2)
    c = clock.stage_compute_us(batch_shape([], [100]))
    assert c == [64.0, 66.0]            # 60 each + embedding on the first + head/sampler on the last


def pp_instance(scheduler, framework_us=1.0):
    loop = EventLoop()
    done = []
    inst = PipelineInstance(0, loop, scheduler, timer(framework_us), Hooks(), False,
                            lambda req, now: done.append((req.request_id, now)), pp=2)
    inst.kv.clock = lambda: loop.now
    return loop, inst, done


def test_batch_queue_launches_a_second_batch_before_the_first_returns():
    # budget 16 tokens: request 0's 16-token prompt fills batch A, request 1's batch B.
    sched = create_scheduler(max_num_batched_tokens=16)
    loop, inst, done = pp_instance(sched)
    r0, r1 = make_request(0, num_tokens=16, max_tokens=2), make_request(1, num_tokens=16, max_tokens=2)
    inst.scheduler.add_request(r0)
    inst.submit(r1)                         # the engine is idle: it fills its queue at once
    assert [len(out.scheduled) for out, _ in inst.queue] == [1, 1]
    assert [out.scheduled[0].req.request_id for out, _ in inst.queue] == [0, 1]
    # batch A: [0, 143000]; batch B: stage 0 [72000, 142000], stage 1 [145000, 216000]
    # (test_two_batches_in_flight_exact_stage_times)
    loop.run()
    assert r0.first_token_ns == 143000 and r1.first_token_ns == 216000
    # at 143000 batch A returns: request 0 (first token out) is the only one not in flight, so
    # batch C = {r0 decode} launches at 143000: stage 0 free since 145000 (B's send) -> [145000,
    # 215000]; send waits for stage 1 (B until 216000) -> [216000, 218000]; stage 1 [218000, 289000]
    # -> r0 finishes (2 tokens) at 289000. At 216000 batch B returns, D = {r1}: stage 0 free at
    # 218000 -> [218000, 288000]; send at max(288000, 289000) -> [289000, 291000]; stage 1
    # [291000, 362000] -> r1 finishes at 362000.
    assert done == [(0, 289000), (1, 362000)]
    assert inst.num_steps == 4


def test_a_request_in_flight_is_not_scheduled_again():
    # One request: while its decode is in flight the scheduler has nothing else, so the queue's
    # second slot holds an empty batch (vLLM appends it too), done at once after the first.
    sched = create_scheduler()
    loop, inst, done = pp_instance(sched)
    r = make_request(0, num_tokens=16, max_tokens=3)
    inst.submit(r)
    assert [bool(out) for out, _ in inst.queue] == [True, False]
    loop.run()
    # each token runs the whole pipeline alone (the next batch is scheduled when the result is
    # back): 143,000 ns per token, the last of 3 at 429,000
    assert done == [(0, 3 * 143000)]
    assert inst.num_steps == 3
