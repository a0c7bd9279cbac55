"""Instance and Cluster step loop with a fixed-duration fake timer: sync vs async arrival
timing (vLLM core.py: a request arriving during step N is first scheduled in step N+2 under
async scheduling), completion records, admission errors, and liveness."""
import pytest

from engine_helpers import create_scheduler
from hooks import Hooks, RetentionDecision
from llmservingsim.cluster import Cluster
from llmservingsim.errors import StuckError
from llmservingsim.events import EventLoop
from llmservingsim.instance import Instance
from llmservingsim.request import CallSpec
from llmservingsim.step_timer import StepTiming
from llmservingsim.tokens import TokenStream

STEP = 1_000


class FixedTimer:
    """Every step takes STEP ns (no performance model)."""

    def time(self, out):
        return StepTiming(total_ns=STEP, compute_ns=STEP, comm_ns=0, overhead_ns=0)


def make_cluster(async_scheduling, hooks=None, **sched_kw):
    loop = EventLoop()
    cluster = Cluster(loop, hooks)
    sched = create_scheduler(**sched_kw)
    cluster.add_instance(Instance(0, loop, sched, FixedTimer(), cluster.hooks, async_scheduling,
                                      cluster.finished))
    return cluster


def call(owner, prompt, output, uid=None, ids=None):
    stream = TokenStream(uid=uid if uid is not None else 5000 + owner, block_size=16, ids=ids)
    return CallSpec(owner=owner, call_index=0, prompt_tokens=prompt, output_tokens=output,
                    tool_duration_ns=0, tool_name=None, tokens=stream)


@pytest.mark.parametrize("async_scheduling, b_first_scheduled", [(False, 1 * STEP), (True, 2 * STEP)])
def test_arrival_during_a_step(async_scheduling, b_first_scheduled):
    cluster = make_cluster(async_scheduling)
    cluster.submit(0, call(0, 20, 4), request_id=0)           # idle engine: scheduled at once
    cluster.schedule(STEP // 2, lambda: cluster.submit(0, call(1, 20, 4), request_id=1))
    cluster.run()
    done = {fc.info.request_id: fc for fc in cluster.finished_calls}
    assert done[0].first_scheduled_ns == 0 and done[0].first_token_ns == STEP
    assert done[1].first_scheduled_ns == b_first_scheduled
    assert done[1].first_token_ns == b_first_scheduled + STEP
    # 4 outputs: one per step, the last one when the 4th step ends.
    assert done[0].last_token_ns == 4 * STEP
    assert done[1].last_token_ns == b_first_scheduled + 4 * STEP
    assert cluster.instances[0].num_steps == (6 if async_scheduling else 5)
    assert cluster.requests == {}
    kv = cluster.instances[0].kv
    assert kv.num_free_blocks == kv.pool.num_usable


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_queued_is_when_the_engine_loop_ingests_the_request(async_scheduling):
    """vLLM's queued_ts: an idle engine ingests at the release; a busy one at the end of the
    step in flight (its loop reads the input queue between steps)."""
    cluster = make_cluster(async_scheduling)
    cluster.submit(0, call(0, 20, 4), request_id=0)
    cluster.schedule(STEP // 2, lambda: cluster.submit(0, call(1, 20, 4), request_id=1))
    cluster.schedule(10 * STEP + 7, lambda: cluster.submit(0, call(2, 20, 2), request_id=2))   # idle again
    cluster.run()
    done = {fc.info.request_id: fc for fc in cluster.finished_calls}
    assert done[0].queued_ns == 0
    assert done[1].queued_ns == STEP              # released at 500 ns, step 0 ends at 1000
    assert done[2].queued_ns == 10 * STEP + 7


def test_finished_call_records_cache_hits_and_preemptions():
    cluster = make_cluster(False)
    ids = list(range(100))
    cluster.submit(0, call(0, 64, 2, ids=ids), request_id=0)
    cluster.run()
    cluster.submit(0, call(1, 80, 2, ids=ids), request_id=1)  # shares 64 tokens
    cluster.run()
    fc = {f.info.request_id: f for f in cluster.finished_calls}
    assert fc[0].num_cached_tokens == 0 and fc[1].num_cached_tokens == 64
    assert fc[1].num_preemptions == 0
    kv = cluster.instances[0].kv
    assert (kv.prefix_stats.queries, kv.prefix_stats.hits) == (144, 64)


def test_call_larger_than_pool_is_rejected():
    cluster = make_cluster(False, num_blocks=5)                # 4 blocks = 64 tokens
    with pytest.raises(StuckError, match="can never run"):
        cluster.submit(0, call(0, 60, 5), request_id=0)
    cluster.submit(0, call(1, 60, 4), request_id=1)            # exactly fits
    cluster.run()


class ByRequestId:
    def __init__(self, table):
        self.table = table

    def priority(self, info, now_ns):
        return self.table[info.request_id]


def test_step_that_only_preempts_does_not_stall_the_instance():
    hooks = Hooks(priority=ByRequestId({0: 5, 1: 0}))
    cluster = make_cluster(False, hooks=hooks, num_blocks=4, policy="priority",
                           enable_caching=False)               # 3 usable blocks
    cluster.submit(0, call(0, 28, 10), request_id=0)           # 2 blocks, 3rd at 33 tokens
    cluster.schedule(STEP // 2, lambda: cluster.submit(0, call(1, 1, 12), request_id=1))
    cluster.run()
    assert sorted(f.info.request_id for f in cluster.finished_calls) == [0, 1]


class ProtectAll:
    def on_complete(self, info, now_ns, kv_utilization):
        return RetentionDecision("protect", 10**12, 1.0)

    def on_arrival(self, info, now_ns):
        return RetentionDecision("none")


def test_own_entry_does_not_deadlock_the_next_call():
    cluster = make_cluster(False, hooks=Hooks(retention=ProtectAll()), num_blocks=8)   # 7 usable
    ids = list(range(200))
    cluster.submit(0, call(5, 30, 10, ids=ids), request_id=0)  # entry: 3 blocks (2 hashed)
    cluster.loop.run(until_ns=10**12 - 1)                      # the entry's deadline has not come
    assert len(cluster.instances[0].kv.entries[5].blocks) == 3
    cluster.submit(0, call(5, 111, 1, ids=ids), request_id=1)  # 112 tokens = the whole pool
    cluster.run()
    assert [f.info.request_id for f in cluster.finished_calls] == [0, 1]


def test_protected_entry_expires_at_its_deadline_into_the_lru_queue():
    """After d the KV is ordinary cache: free (not used), content still hittable."""
    class ProtectOneSecond(ProtectAll):
        def on_complete(self, info, now_ns, kv_utilization):
            return RetentionDecision("protect", now_ns + 10**9, None)
    cluster = make_cluster(False, hooks=Hooks(retention=ProtectOneSecond()), num_blocks=20)
    ids = list(range(200))
    cluster.submit(0, call(5, 40, 10, ids=ids), request_id=0)
    while not cluster.finished_calls:                         # run until the call finishes
        cluster.loop.step()
    kv = cluster.instances[0].kv
    done_at = cluster.finished_calls[0].info.completion_ns
    assert 5 in kv.entries and kv.num_free_blocks == 19 - 4
    cluster.run()                                             # the expiry event at done + 1 s
    assert cluster.loop.now == done_at + 10**9
    assert 5 not in kv.entries and kv.num_free_blocks == 19
    from llmservingsim.request import Request
    probe = Request(9, call(6, 49, 1, ids=ids), cluster.loop.now)
    assert kv.get_computed_blocks(probe)[1] == 48             # content kept (3 full blocks)
