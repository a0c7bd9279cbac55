"""Pipeline parallelism as vLLM V1 runs it (pp > 1; docs/clusters.md).

Engine loop (vllm/v1/engine/core.py ``step_with_batch_queue``; queue size
``max_concurrent_batches`` = pp, async scheduling off: vLLM 0.19 disables it with pp > 1):
while the batch queue holds fewer than pp batches and the scheduler has requests, schedule a
batch and launch it without waiting; a batch with nothing scheduled (every running request is
in flight) still takes its queue slot and finishes at once. Then wait for the OLDEST batch,
apply its output, and loop. A request whose sampled token is in flight is skipped by the
scheduler (``Scheduler.skip_in_flight``: vLLM's ``num_new_tokens == 0``), so a request is in
at most one in-flight batch that samples; the next prefill chunk of a request may follow its
previous chunk in the next batch (vLLM does the same).

Timing of batch b through stages s = 0..pp-1 (``PipelineClock.launch``), in integer ns:
    start(0, b)   = max(launch_b, free_0)          free_s: when stage s is next idle
    end(s, b)     = start(s, b) + d_s(b)           d_s = compute of its layers (+ embedding on
                                                   stage 0, + final norm, lm_head and sampler on
                                                   the last) + its TP all-reduces (+ the step's
                                                   framework overhead on stage 0)
    xfer(s, b)    = max(end(s, b), free_{s+1})     NCCL send/recv is a rendezvous: the receiver
                                                   posts recv when it finished batch b-1
    start(s+1, b) = xfer(s, b) + c_s               c_s: activations over the link s -> s+1
    free_s        = start(s+1, b) (the sender's stream holds the send), free_last = end(last, b)
The result of b is ready at end(pp-1, b). A stage is busy for its d_s and for the transfers
it takes part in; ``busy_ns`` (power, busy fraction) is the mean over the instance's stages.
Fast-forward is off for pp > 1 (its exactness argument is for one batch in flight).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .errors import StuckError
from .instance import Instance
from .perf_model import BatchShape
from .step_timer import shape_of


@dataclass(slots=True)
class PipelineTiming:
    """One batch. ``total_ns``/``compute_ns``/``comm_ns``/``overhead_ns`` are means over the
    instance's stages (what each GPU spent on it: they add up to busy time, like a step's);
    the rest are the batch's own: TP all-reduce and PP send/recv time summed over stages, the
    part of the latter that crossed nodes, and its latency from launch to result."""
    total_ns: int
    compute_ns: int
    comm_ns: int
    overhead_ns: int
    allreduce_ns: int = 0
    sendrecv_ns: int = 0
    inter_node_ns: int = 0
    latency_ns: int = 0
    start_ns: int = 0
    done_ns: int = 0


class PipelineClock:
    """When each stage is next free; ``launch`` places a batch on the stages (module docstring)."""

    def __init__(self, timer, pp: int):
        self.timer = timer
        self.perf = timer.perf
        self.comm = timer.comm
        self.pp = pp
        self.free = [0] * pp

    def stage_compute_us(self, shape: BatchShape) -> list:
        """Per-stage compute (µs): the layers' share on every stage, the embedding on the
        first, final norm + lm_head + sampler on the last."""
        perf = self.perf
        once = perf.once_us(shape)
        layers = perf.compute_us(shape) - once
        emb = perf.bundle.dense["embedding"](shape.num_tokens) if "embedding" in perf.bundle.dense else 0.0
        out = [layers] * self.pp
        out[0] += emb
        out[-1] += once - emb
        return out

    def launch(self, shape: BatchShape, now: int) -> PipelineTiming:
        pp, free = self.pp, self.free
        comp_us = self.stage_compute_us(shape)
        total_us = sum(comp_us)
        fw = self.timer.framework
        overhead = round(fw.us(shape.num_prefills, shape.prefill_tokens, shape.num_tokens, total_us) * 1000.0)
        if self.comm is not None:
            sc = self.comm.stage_comm(shape.num_tokens)
            allreduce, sends, inter = sc.allreduce_ns, sc.send_ns, sc.inter_node
        else:
            allreduce, sends, inter = (0,) * pp, (0,) * (pp - 1), (False,) * (pp - 1)
        comp = [round(u * 1000.0) for u in comp_us]
        start = max(now, free[0])
        t = start
        busy = 0
        for s in range(pp):
            d = comp[s] + allreduce[s] + (overhead if s == 0 else 0)
            end = t + d
            busy += d
            if s + 1 < pp:
                x = max(end, free[s + 1])
                t = x + sends[s]
                free[s] = t
                busy += 2 * sends[s]
            else:
                free[s] = end
                done = end
        compute, comm = sum(comp), sum(allreduce) + 2 * sum(sends)
        c, m, o = compute // pp, comm // pp, overhead // pp
        return PipelineTiming(max(c + m + o, 1), c, m, o, sum(allreduce), sum(sends),
                              sum(x for x, crosses in zip(sends, inter) if crosses), done - now, start, done)


class PipelineInstance(Instance):
    """An Instance whose engine keeps up to pp batches in flight (module docstring). The
    arrival path, finishing and retention are Instance's; only the step loop differs."""

    def __init__(self, *args, pp: int, **kw):
        kw["fast_forward"] = False
        super().__init__(*args, **kw)
        self.async_scheduling = False
        self.pp = pp
        self.clock = PipelineClock(self.timer, pp)
        self.queue: deque = deque()             # (SchedulerOutput, PipelineTiming | None), oldest first
        self.scheduler.skip_in_flight = True
        self.on_batch = None                    # optional (instance, step, timing) observer (trace)
        self._accounted_ns = 0

    def _start(self, now: int) -> None:
        queue, sched = self.queue, self.scheduler
        while len(queue) < self.pp and sched.has_work():
            out = sched.schedule()
            if out:
                self._launch(out, now)
            else:
                if not queue and not sched.running and sched.waiting and not out.preempted:
                    head = sched.waiting.peek()
                    raise StuckError(
                        f"instance {self.index} cannot admit request {head.request_id} (program {head.owner}, "
                        f"call {head.call_index}, {head.num_tokens} tokens) with nothing running at "
                        f"t={now / 1e9:.3f} s: {self.kv.num_free_blocks} free KV blocks")
                queue.append((out, None))       # an empty batch takes its slot, done at once
        if queue:
            self.current = queue[0][0]
            head = queue[0][1]
            self.step_end_ns = max(now, head.done_ns) if head is not None else now
            self.loop.schedule(self.step_end_ns, self._end_step)
        else:
            self.current = None

    def _launch(self, out, now: int) -> None:
        for sr in out.scheduled:
            if sr.req.first_scheduled_ns is None:
                sr.req.first_scheduled_ns = now
        timing = self.clock.launch(shape_of(out), now)
        self.last_step_ns = timing.latency_ns
        self.busy_ns += timing.total_ns
        self.num_steps += 1
        if self._on_step is not None:
            # metrics take steps in time order, one after another: a batch's busy share is
            # accounted from its stage-0 start or the end of the previous batch's share
            at = max(timing.start_ns, self._accounted_ns)
            self._accounted_ns = at + timing.total_ns
            self._on_step(self, out, at, timing)
        if self.on_batch is not None:
            self.on_batch(self, self.num_steps - 1, timing)
        self.queue.append((out, timing))

    def _end_step(self) -> None:
        now = self.loop.now
        out, _ = self.queue.popleft()
        self.current = None
        for req in self.scheduler.update_from_output(out, now):
            self._finish(req, now)
        if self.queue or self.scheduler.has_work():
            self._start(now)
