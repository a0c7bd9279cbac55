"""Priority policy, ported from vLLM 0.19 tests/v1/core/test_scheduler.py
(test_priority_scheduling_*): lower value first, ties by arrival then id; priority decides
admission order and the preemption victim, never preempts to admit a waiting request."""
import pytest

from engine_helpers import (assert_engine_empty, create_requests, create_scheduler, make_request,
                            num_scheduled, run_steps, scheduled_ids, step)
from llmservingsim.request import RequestStatus


def prio_scheduler(**kw):
    return create_scheduler(policy="priority", **kw)


def admit_order(priorities, arrivals, **kw):
    sched = prio_scheduler(**kw)
    for r in create_requests(len(priorities), priorities=priorities, arrival_ns=arrivals):
        sched.add_request(r)
    return sched, sched.schedule()


def test_priority_scheduling_basic_ordering():
    _, out = admit_order([2, 0, 1], [1, 2, 3])
    assert scheduled_ids(out) == [1, 2, 0]


def test_priority_scheduling_arrival_time_tiebreaker():
    _, out = admit_order([1, 1, 1], [3, 1, 2])
    assert scheduled_ids(out) == [1, 2, 0]


def test_priority_scheduling_mixed_priority_and_arrival():
    _, out = admit_order([2, 1, 1, 0], [1, 3, 2, 4])
    assert scheduled_ids(out) == [3, 2, 1, 0]


def test_priority_scheduling_fcfs_fallback():
    _, out = admit_order([1, 1, 1, 1], [1, 2, 3, 4])
    assert scheduled_ids(out) == [0, 1, 2, 3]


def test_request_id_breaks_full_ties():
    _, out = admit_order([0, 0, 0], [5, 5, 5])
    assert scheduled_ids(out) == [0, 1, 2]


def test_priority_scheduling_with_limited_slots():
    sched, out = admit_order([3, 1, 2, 0], [1, 2, 3, 4], max_num_seqs=2)
    assert scheduled_ids(out) == [3, 1]
    waiting = list(sched.waiting)
    assert [r.priority for r in waiting] == [2, 3]
    assert [r.request_id for r in waiting] == [2, 0]


def test_priority_scheduling_heap_property():
    """One slot: requests run strictly in priority order."""
    priorities = [5, 1, 8, 3, 2, 7, 4, 6]
    sched = prio_scheduler(max_num_seqs=1)
    reqs = create_requests(len(priorities), priorities=priorities, max_tokens=1)
    for r in reqs:
        sched.add_request(r)
    order = []
    now = 0
    while sched.waiting:
        now += 1
        out, done = step(sched, now)
        assert len(out.scheduled) == 1 and done == [out.scheduled[0].req]
        order.append(out.scheduled[0].req.priority)
    assert order == sorted(priorities)
    assert_engine_empty(sched)


def test_fcfs_policy_ignores_priority():
    sched = create_scheduler(policy="fcfs")
    for r in create_requests(3, priorities=[2, 0, 1], arrival_ns=[1, 2, 3]):
        sched.add_request(r)
    assert scheduled_ids(sched.schedule()) == [0, 1, 2]


def test_priority_scheduling_no_preemption_when_space_available():
    sched = prio_scheduler(max_num_seqs=3)
    low = create_requests(2, priorities=[5, 5], arrival_ns=[1, 2])
    for r in low:
        sched.add_request(r)
    step(sched, 1)
    high = make_request(2, [2] * 10, priority=0, arrival_ns=3)
    sched.add_request(high)
    out, _ = step(sched, 2)
    assert out.preempted == []
    assert num_scheduled(out) == {0: 1, 1: 1, 2: 10}
    assert len(sched.running) == 3 and len(sched.waiting) == 0


def test_no_preemption_to_admit_a_higher_priority_waiting_request():
    """Priority affects admission order and victims only: a waiting high-priority request
    does not preempt running low-priority ones."""
    sched = prio_scheduler(max_num_seqs=2)
    low = create_requests(2, priorities=[5, 5], arrival_ns=[1, 2], max_tokens=4)
    for r in low:
        sched.add_request(r)
    step(sched, 1)
    high = make_request(2, [2] * 10, priority=0, arrival_ns=3, max_tokens=2)
    sched.add_request(high)
    out, _ = step(sched, 2)
    assert scheduled_ids(out) == [0, 1] and out.preempted == []
    assert list(sched.waiting) == [high]


@pytest.mark.parametrize("enable_caching", [False, True])
def test_priority_scheduling_preemption_and_resumption_when_out_of_kv(enable_caching):
    """4 usable blocks. low (30 tokens) runs; high (32 tokens) fills the pool; when high
    needs a 3rd block the low one, already scheduled this step, is preempted (its tokens
    go back to the budget); after high finishes low resumes with all 32 tokens."""
    sched = prio_scheduler(max_num_seqs=2, max_num_batched_tokens=200, num_blocks=5,
                           enable_caching=enable_caching)
    kv = sched.kv
    low = make_request(0, [0] * 30, priority=1, arrival_ns=0)
    sched.add_request(low)
    out, _ = step(sched, 1)                                   # 1st schedule
    assert num_scheduled(out) == {0: 30}
    assert len(sched.waiting) == 0 and len(sched.running) == 1

    high = make_request(1, [1] * 32, priority=0, arrival_ns=1, max_tokens=2)
    sched.add_request(high)
    out = sched.schedule()                                    # 2nd schedule
    assert kv.num_free_blocks == 0
    assert num_scheduled(out) == {0: 1, 1: 32}                # 1 running + 1 new
    assert len(sched.waiting) == 0 and len(sched.running) == 2
    sched.update_from_output(out, 2)

    out = sched.schedule()                                    # 3rd: low needs 32, high 33
    assert out.preempted == [low]
    assert num_scheduled(out) == {1: 1} and out.num_tokens == 1
    assert low.status == RequestStatus.PREEMPTED and low.num_computed_tokens == 0
    assert len(sched.waiting) == 1 and len(sched.running) == 1
    assert low.num_placeholders == 0                          # its unscheduled token is undone
    done = sched.update_from_output(out, 3)
    assert done == [high]                                     # stands in for finish_requests
    kv.free(high)

    out = sched.schedule()                                    # 4th: low resumes
    assert low.num_tokens == 32                               # 30 prompt + 2 decoded
    assert len(sched.waiting) == 0 and len(sched.running) == 1
    assert num_scheduled(out) == {0: 16 if enable_caching else 32}
    assert out.scheduled[0].samples
    sched.update_from_output(out, 4)
    run_steps(sched)
    assert low.num_output_tokens == 16 and low.num_preemptions == 1
    assert_engine_empty(sched)


def _three_way(policy):
    """a (p0) and c (p1) stay within one block; b (p5, admitted between them) crosses
    into a 3rd block at step 7 with no free block."""
    sched = create_scheduler(num_blocks=5, policy=policy, enable_caching=False)
    a = make_request(0, [0], max_tokens=12, priority=0, arrival_ns=0)
    b = make_request(1, [1] * 28, max_tokens=10, priority=5, arrival_ns=1)
    c = make_request(2, [2], max_tokens=12, priority=1, arrival_ns=2)
    outs = []
    for t in range(1, 8):
        if t == 1:
            sched.add_request(a)
        if t == 2:
            sched.add_request(b)
        if t == 3:
            sched.add_request(c)
        outs.append(step(sched, t)[0])
    assert sched.kv.num_free_blocks in (0, 2)
    return sched, (a, b, c), outs


def test_priority_victim_is_lowest_priority_not_tail():
    sched, (a, b, c), outs = _three_way("priority")
    assert [scheduled_ids(o) for o in outs[2:6]] == [[0, 1, 2]] * 4
    # Step 7: b itself needs the block and is the worst request: it preempts itself and
    # the running loop ends (0.19 ``break``), so c is not scheduled this step.
    assert outs[6].preempted == [b] and scheduled_ids(outs[6]) == [0]
    assert sched.running == [a, c]
    run_steps(sched)
    assert_engine_empty(sched)


def test_fcfs_victim_is_tail():
    sched, (a, b, c), outs = _three_way("fcfs")
    assert outs[6].preempted == [c] and scheduled_ids(outs[6]) == [0, 1]
    assert sched.running == [a, b]
    run_steps(sched)
    assert_engine_empty(sched)


def test_priority_victim_scheduled_earlier_in_step_returns_its_budget():
    """Running order [b (p5), a (p0), c (p1)]: when a needs a block, b (already scheduled
    this step) is unscheduled and preempted; FCFS would preempt the tail c."""
    for policy, victim, sched_ids in (("priority", 1, [0, 2]), ("fcfs", 2, [1, 0])):
        sched = create_scheduler(num_blocks=7, policy=policy, enable_caching=False)  # 6 usable
        b = make_request(1, [1] * 16, max_tokens=8, priority=5, arrival_ns=0)
        a = make_request(0, [0] * 32, max_tokens=8, priority=0, arrival_ns=1)
        c = make_request(2, [2] * 32, max_tokens=8, priority=1, arrival_ns=2)
        sched.add_request(b)
        step(sched, 1)                                     # b: 17 tokens
        sched.add_request(a)
        sched.add_request(c)
        out, _ = step(sched, 2)                            # b 2 blocks, a 2, c 2: full
        assert sched.kv.num_free_blocks == 0
        assert [r.request_id for r in sched.running] == ([1, 0, 2])
        out, _ = step(sched, 3)                            # a and c need a 3rd block
        assert [r.request_id for r in out.preempted] == [victim], policy
        assert sorted(scheduled_ids(out)) == sorted(sched_ids), policy
        assert all(sr.req.request_id != victim for sr in out.scheduled)
        assert out.num_tokens == len(out.scheduled)
        run_steps(sched)
        assert_engine_empty(sched)


def test_preempted_request_reenters_waiting_by_priority():
    """In priority mode a preempted request is re-queued by its (priority, arrival) key,
    not at the front."""
    sched = prio_scheduler(num_blocks=5, enable_caching=False)
    a = make_request(0, [0] * 32, max_tokens=8, priority=0, arrival_ns=0)
    b = make_request(1, [1] * 32, max_tokens=8, priority=5, arrival_ns=1)
    sched.add_request(a)
    sched.add_request(b)
    step(sched, 1)
    mid = make_request(2, [2] * 4, max_tokens=1, priority=3, arrival_ns=2)
    sched.add_request(mid)
    out, _ = step(sched, 2)                                # a needs a 3rd block: b preempted
    assert out.preempted == [b]
    assert [r.request_id for r in sched.waiting] == [2, 1]
    run_steps(sched)
    assert_engine_empty(sched)
