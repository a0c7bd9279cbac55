"""Scheduler scenarios ported from vLLM 0.19 tests/v1/core/test_scheduler.py and
test_async_scheduler.py, with vLLM's expected numbers.

Our scheduler always works like vLLM's AsyncScheduler (an output token is a placeholder at
schedule time). "Sync" tests call schedule() then update_from_output() each step; "async"
tests schedule step N+1 before applying step N, as vLLM's async tests and the Instance do.
"""
import pytest

from engine_helpers import (assert_engine_empty, block_ids, create_requests, create_scheduler,
                            make_request, num_scheduled, run_steps, scheduled_ids, step)
from llmservingsim.request import RequestStatus


@pytest.mark.parametrize("enable_caching", [False, True])
def test_schedule(enable_caching):
    sched = create_scheduler(enable_caching=enable_caching)
    reqs = create_requests(10)
    for r in reqs:
        sched.add_request(r)
    out = sched.schedule()
    assert num_scheduled(out) == {i: 10 for i in range(10)}
    assert all(sr.samples for sr in out.scheduled) and out.preempted == []
    assert out.num_tokens == 100
    assert len(sched.waiting) == 0
    assert sched.running == reqs                      # running order = arrival order
    assert all(r.status == RequestStatus.RUNNING for r in reqs)


@pytest.mark.parametrize("enable_caching", [False, True])
def test_schedule_concurrent_partial_requests(enable_caching):
    """Budget 1024, threshold 400: 400/400/224, 400/400/224, 1/1/352."""
    sched = create_scheduler(max_num_batched_tokens=1024, long_prefill_token_threshold=400,
                             enable_caching=enable_caching)
    reqs = create_requests(3, num_tokens=800)
    for r in reqs:
        sched.add_request(r)
    out = sched.schedule()
    assert num_scheduled(out) == {0: 400, 1: 400, 2: 224}
    assert not any(sr.samples for sr in out.scheduled)      # all still prefilling
    assert sched.update_from_output(out, 1) == []
    out = sched.schedule()
    assert len(sched.running) == 3
    assert num_scheduled(out) == {0: 400, 1: 400, 2: 224}
    assert [sr.samples for sr in out.scheduled] == [True, True, False]
    sched.update_from_output(out, 2)
    out = sched.schedule()
    assert len(sched.running) == 3
    assert num_scheduled(out) == {0: 1, 1: 1, 2: 800 - 224 - 224}
    sched.update_from_output(out, 3)
    done = run_steps(sched)
    assert sorted(r.request_id for r in done) == [0, 1, 2]
    assert_engine_empty(sched)


@pytest.mark.parametrize("chunked", [True, False])
def test_schedule_order(chunked):
    """Long requests are not skipped for short ones when chunked prefill is off."""
    sched = create_scheduler(max_num_batched_tokens=1024, max_num_seqs=3,
                             enable_chunked_prefill=chunked)
    reqs = create_requests(2, num_tokens=800) + create_requests(2, num_tokens=10, starting_idx=2)
    for r in reqs:
        sched.add_request(r)
    out = sched.schedule()
    if chunked:
        assert num_scheduled(out) == {0: 800, 1: 224}
    else:
        assert num_scheduled(out) == {0: 800}
        assert [r.request_id for r in sched.waiting] == [1, 2, 3]


def test_preempt_during_execution():
    """10 usable blocks. req1 is admitted while req0's step is in flight; req0's next
    decode crosses a block boundary and preempts req1 (the tail), whose in-flight token
    still arrives."""
    sched = create_scheduler(max_num_batched_tokens=100, num_blocks=11, enable_caching=False)
    req0 = make_request(0, [0] * 79)
    req1 = make_request(1, [1] * 80, arrival_ns=1)
    sched.add_request(req0)
    out0 = sched.schedule()
    assert num_scheduled(out0) == {0: 79} and len(block_ids(sched.kv, req0)) == 5
    sched.add_request(req1)
    out1 = sched.schedule()                           # req0 still in flight
    assert num_scheduled(out1) == {0: 1, 1: 80}
    assert len(block_ids(sched.kv, req1)) == 5 and sched.kv.num_free_blocks == 0
    sched.update_from_output(out0, 1)
    out2 = sched.schedule()                           # req0 needs a 6th block
    assert out2.preempted == [req1] and num_scheduled(out2) == {0: 1}
    assert sched.running == [req0] and req1.status == RequestStatus.PREEMPTED
    assert list(sched.waiting) == [req1] and sched.kv.get_blocks(1) == []
    assert req1.num_computed_tokens == 0 and req1.num_preemptions == 1
    sched.update_from_output(out1, 2)
    assert req1.num_output_tokens == 1 and req1.num_tokens == 81
    done = run_steps(sched, async_mode=True, inflight=[out2])
    assert [r.request_id for r in done] == [0, 1]
    assert req0.num_output_tokens == 16 and req1.num_output_tokens == 16
    assert_engine_empty(sched)


def test_schedule_concurrent_batches():
    """With max_num_seqs=2 a second request is scheduled while the first is in flight."""
    sched = create_scheduler(max_num_batched_tokens=1024, max_num_seqs=2)
    req0, req1 = create_requests(2, num_tokens=512)
    sched.add_request(req0)
    out0 = sched.schedule()
    assert num_scheduled(out0) == {0: 512}
    sched.add_request(req1)
    out1 = sched.schedule()
    assert num_scheduled(out1)[1] == 512
    assert num_scheduled(out1) == {0: 1, 1: 512}      # async: req0's decode rides along
    sched.update_from_output(out0, 1)
    out2 = sched.schedule()
    assert num_scheduled(out2)[0] == 1
    sched.update_from_output(out1, 2)
    run_steps(sched, async_mode=True, inflight=[out2])
    assert_engine_empty(sched)


@pytest.mark.parametrize("async_mode", [True, False])
@pytest.mark.parametrize("max_tokens", [1, 2, 3, 5])
def test_stop_by_max_tokens(max_tokens, async_mode):
    """max_tokens stops are anticipated: scheduled tokens = prompt + max_tokens - 1."""
    sched = create_scheduler()
    req0, req1 = create_requests(2, max_tokens=max_tokens)
    total = {"tokens": 0, "samples": 0}

    def count(out):
        assert out.num_tokens == sum(sr.num_new for sr in out.scheduled)
        total["tokens"] += out.num_tokens
        total["samples"] += sum(sr.samples for sr in out.scheduled)

    done = run_steps(sched, async_mode=async_mode, on_schedule=count,
                     arrivals={0: [req0], 1: [req1]})
    assert {r.request_id for r in done} == {0, 1}
    assert req0.num_output_tokens == max_tokens and req1.num_output_tokens == max_tokens
    assert total["tokens"] == 2 * (10 + max_tokens - 1)
    assert total["samples"] == 2 * max_tokens         # no wasted decode slot
    assert req0.status == RequestStatus.FINISHED
    assert_engine_empty(sched)


def test_first_token_and_finish_times_come_from_updates():
    sched = create_scheduler()
    (req,) = create_requests(1, max_tokens=3)
    sched.add_request(req)
    for now in (100, 200, 300):
        out = sched.schedule()
        done = sched.update_from_output(out, now)
    assert done == [req]
    assert (req.first_token_ns, req.last_token_ns, req.finished_ns) == (100, 300, 300)
    sched.kv.free(req)
    assert_engine_empty(sched)


# ---- the three behaviours a naive simulator gets wrong (semantics doc, top) ----------------
def test_admission_needs_whole_sequence_and_blocks_head_of_line():
    """scheduler_reserve_full_isl: the head's whole prompt must fit in free blocks, though
    only the first chunk is allocated; a smaller request behind it is not admitted."""
    sched = create_scheduler(max_num_batched_tokens=64, num_blocks=11, enable_caching=False)
    big = make_request(0, [0] * 100, max_tokens=4)            # 7 blocks
    sched.add_request(big)
    out = sched.schedule()
    assert num_scheduled(out) == {0: 64}
    assert len(block_ids(sched.kv, big)) == 4                 # only the chunk's blocks
    sched.update_from_output(out, 1)
    head = make_request(1, [1] * 80, arrival_ns=1)            # 5 blocks; 6 free
    small = make_request(2, [2] * 16, arrival_ns=2)
    sched.add_request(head)
    sched.add_request(small)
    out = sched.schedule()                                     # big takes 36: 3 blocks left
    assert num_scheduled(out) == {0: 36}
    assert sched.kv.num_free_blocks == 3
    # head needs 5 > 3 free: admission stops (small would fit but is behind it).
    assert [r.request_id for r in sched.waiting] == [1, 2]
    sched.update_from_output(out, 2)
    done = run_steps(sched)
    assert [r.request_id for r in done] == [0, 1, 2]
    assert_engine_empty(sched)


def test_running_prefill_chunk_starves_later_decodes():
    """Running requests are served in list order: an earlier prefill chunk may use the
    whole budget, leaving a later running request unscheduled that step."""
    sched = create_scheduler(max_num_batched_tokens=32)
    first = make_request(0, [0] * 8, max_tokens=3)
    second = make_request(1, [1] * 100, max_tokens=2, arrival_ns=1)
    third = make_request(2, [2] * 8, max_tokens=3, arrival_ns=2)
    for r in (first, second, third):
        sched.add_request(r)
    out, _ = step(sched, 1)
    assert num_scheduled(out) == {0: 8, 1: 24}             # third not admitted: budget gone
    out, _ = step(sched, 2)
    assert num_scheduled(out) == {0: 1, 1: 31}
    out, done = step(sched, 3)
    assert num_scheduled(out) == {0: 1, 1: 31} and done == [first]
    out, _ = step(sched, 4)
    assert num_scheduled(out) == {1: 14, 2: 8}
    run_steps(sched)
    assert_engine_empty(sched)


def test_earlier_prefill_takes_whole_budget_from_running_decode():
    sched = create_scheduler(max_num_batched_tokens=32)
    long = make_request(0, [0] * 100, max_tokens=2)
    short = make_request(1, [1] * 8, max_tokens=8, arrival_ns=1)
    sched.add_request(long)
    sched.add_request(short)
    for now in (1, 2, 3):
        out, _ = step(sched, now)
        assert num_scheduled(out) == {0: 32}                # short is never reached
    out, _ = step(sched, 4)
    assert num_scheduled(out) == {0: 4, 1: 8}
    out, _ = step(sched, 5)
    assert num_scheduled(out) == {0: 1, 1: 1}
    run_steps(sched)
    assert_engine_empty(sched)


def test_no_admission_in_a_step_that_preempted_and_fcfs_victim_is_tail():
    """FCFS preempts the tail of running (most recently admitted), puts it at the FRONT of
    waiting, and admits nobody in that step."""
    sched = create_scheduler(num_blocks=7, enable_caching=False)      # 6 usable
    a = make_request(0, [0] * 32, max_tokens=20)                      # 2 blocks, grows
    b = make_request(1, [1] * 32, max_tokens=20, arrival_ns=1)
    c = make_request(2, [2] * 30, max_tokens=20, arrival_ns=2)
    for r in (a, b, c):
        sched.add_request(r)
    out = sched.schedule()
    assert scheduled_ids(out) == [0, 1, 2] and sched.kv.num_free_blocks == 0
    late = make_request(3, [3] * 4, max_tokens=1, arrival_ns=3)
    sched.add_request(late)
    sched.update_from_output(out, 1)
    out = sched.schedule()                     # a needs a 3rd block -> c (tail) preempted
    assert out.preempted == [c]
    assert scheduled_ids(out) == [0, 1]        # b's 33rd token: after c's blocks came back
    assert [r.request_id for r in sched.waiting] == [2, 3]      # c at the front; late waits
    assert sched.running == [a, b]
    sched.update_from_output(out, 2)
    done = run_steps(sched)
    assert sorted(r.request_id for r in done) == [0, 1, 2, 3]
    assert c.num_preemptions >= 1 and sched.num_preemptions == a.num_preemptions + b.num_preemptions + c.num_preemptions
    assert_engine_empty(sched)


def test_request_preempting_itself_ends_the_running_loop():
    """FCFS: when the request needing a block is itself the tail, it preempts itself and
    the running loop stops."""
    sched = create_scheduler(num_blocks=5, enable_caching=False)      # 4 usable
    a = make_request(0, [0] * 16, max_tokens=40)
    b = make_request(1, [1] * 31, max_tokens=20, arrival_ns=1)
    sched.add_request(a)
    sched.add_request(b)
    out, _ = step(sched, 1)
    assert scheduled_ids(out) == [0, 1]
    out, _ = step(sched, 2)            # a: 17 tokens -> 2nd block (the last free one); b: 32
    assert scheduled_ids(out) == [0, 1] and sched.kv.num_free_blocks == 0
    out, _ = step(sched, 3)            # b: 33 tokens needs a 3rd block; b is the tail
    assert out.preempted == [b] and scheduled_ids(out) == [0]
    assert list(sched.waiting) == [b] and b.num_tokens == 33
    run_steps(sched)
    assert b.num_output_tokens == 20
    assert_engine_empty(sched)


def test_max_num_seqs_caps_running():
    sched = create_scheduler(max_num_seqs=3)
    reqs = create_requests(5, max_tokens=2)
    for r in reqs:
        sched.add_request(r)
    out = sched.schedule()
    assert scheduled_ids(out) == [0, 1, 2] and len(sched.waiting) == 2
    sched.update_from_output(out, 1)
    out = sched.schedule()
    assert scheduled_ids(out) == [0, 1, 2]
    assert [r.request_id for r in sched.update_from_output(out, 2)] == [0, 1, 2]
    for r in reqs[:3]:
        sched.kv.free(r)
    out = sched.schedule()
    assert scheduled_ids(out) == [3, 4]


def test_resumed_request_recomputes_prompt_and_outputs():
    """After preemption the request is re-admitted with num_tokens = prompt + outputs and a
    fresh prefix lookup (its surviving cached blocks are reused)."""
    sched = create_scheduler(num_blocks=6, max_num_batched_tokens=256)   # 5 usable
    a = make_request(0, list(range(20)), max_tokens=30)                  # 2 blocks, grows to 4
    b = make_request(1, list(range(100, 140)), max_tokens=30, arrival_ns=1)   # 3 blocks
    sched.add_request(a)
    sched.add_request(b)
    seen = []
    done = run_steps(sched, on_schedule=lambda out: seen.append(out))
    assert sorted(r.request_id for r in done) == [0, 1]
    assert b.num_preemptions >= 1
    # Every token of b was computed; the re-admission step scheduled num_tokens - hits.
    resumed = [(out, sr) for out in seen for sr in out.scheduled
               if sr.req is b and sr.ctx_before > 0 and sr.ctx_before % 16 == 0
               and sr.num_new > 1]
    assert resumed, "b was never re-admitted with a prefix hit"
    assert a.num_output_tokens == 30 and b.num_output_tokens == 30
    assert_engine_empty(sched)


def test_decode_inside_its_last_block_allocates_nothing_and_publishes_the_block_it_completes():
    """A running decode whose token fits in its blocks takes the scheduler's inlined path:
    no block is taken, and the step whose token completes block 0 publishes it (at schedule
    time, as allocate_slots does). Prompt 14 tokens, block 16: the prefill step takes one
    block; decodes at 14 and 15 computed tokens fit in it, the one at 15 completes it."""
    sched = create_scheduler(num_blocks=10)
    kv = sched.kv
    req = make_request(0, list(range(40)), num_tokens=14, max_tokens=10)
    sched.add_request(req)
    out, _ = step(sched, 0)
    assert (out.num_decodes, out.prefill_tokens, out.num_sampled) == (0, 14, 1)
    free = kv.num_free_blocks
    assert len(block_ids(kv, req)) == 1 and kv.num_cached_blocks[0] == 0
    out, _ = step(sched, 1)             # decode at 14 -> 15 computed: nothing to publish
    assert [(sr.num_new, sr.ctx_before, sr.samples) for sr in out.scheduled] == [(1, 14, True)]
    assert (out.num_decodes, out.decode_kv_sum, out.decode_kv_max, out.decode_kv_min) == (1, 15, 15, 15)
    assert kv.num_free_blocks == free and kv.num_cached_blocks[0] == 0
    out, _ = step(sched, 2)             # decode at 15 -> 16: completes and publishes block 0
    assert kv.num_free_blocks == free and kv.num_cached_blocks[0] == 1
    assert kv.pool.cached.get(req.stream.block_hashes(1)[0]) is kv.get_blocks(0)[0]
    out, _ = step(sched, 3)             # decode at 16 -> 17: a new block (allocate_slots)
    assert kv.num_free_blocks == free - 1 and len(block_ids(kv, req)) == 2
    assert (out.num_decodes, out.decode_kv_sum, out.num_sampled) == (1, 17, 1)


def test_priority_victim_already_scheduled_is_untallied():
    """Priority policy, 3 usable blocks of 16: A (priority 1) runs first and holds two
    blocks, B (priority 0) is admitted next into the last one. In the next step A's decode
    (inside its last block) is scheduled first; B's decode needs a block, none is free, so
    A, the lowest priority, is preempted although already scheduled: it gives its token
    back and frees its blocks, B takes one, and the batch's tallies count B alone."""
    sched = create_scheduler(num_blocks=4, policy="priority")
    a = make_request(0, num_tokens=16, max_tokens=5, priority=1, arrival_ns=0)
    b = make_request(1, num_tokens=16, max_tokens=5, priority=0, arrival_ns=1)
    sched.add_request(a)
    step(sched, 0)
    sched.add_request(b)
    out, _ = step(sched, 1)
    assert scheduled_ids(out) == [0, 1] and sched.kv.num_free_blocks == 0
    assert (out.num_decodes, out.decode_kv_sum, out.prefill_tokens, out.num_sampled) == (1, 17, 16, 2)
    out, _ = step(sched, 2)
    assert scheduled_ids(out) == [1] and [r.request_id for r in out.preempted] == [0]
    assert (out.num_decodes, out.decode_kv_sum, out.decode_kv_max, out.decode_kv_min) == (1, 17, 17, 17)
    assert (out.prefill_tokens, out.prefill_ctx_sum, out.num_sampled, out.num_tokens) == (0, 0, 1, 1)
    assert a.num_computed_tokens == 0 and a.num_placeholders == 0 and a.status == RequestStatus.PREEMPTED
    assert sched.kv.num_free_blocks == 1
