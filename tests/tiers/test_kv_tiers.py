"""KV tiers (llmservingsim/kv_tiers.py, docs/kv-tiers.md): write-through stores after each
step, loads of a prefix hit in the CPU tier charged at bytes / bandwidth + latency while the
request waits, vLLM's LRU eviction when the tier is full, and the retention "offload"."""
import sys
from pathlib import Path

from hypothesis import given, settings, strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from engine_helpers import create_scheduler  # noqa: E402
from hooks import NONE, RELEASE, EVICT, Hooks, RetentionDecision  # noqa: E402
from llmservingsim.cluster import Cluster  # noqa: E402
from llmservingsim.events import EventLoop  # noqa: E402
from llmservingsim.instance import Instance  # noqa: E402
from llmservingsim.kv_tiers import TierSpec, TierStore, attach_tiers, check_tier_invariants  # noqa: E402
from llmservingsim.request import CallSpec  # noqa: E402
from llmservingsim.step_timer import StepTiming  # noqa: E402
from llmservingsim.tokens import TokenStream  # noqa: E402

NS_PER_TOKEN = 100          # the fake timer: a step takes 100 ns per scheduled token
BLOCK_BYTES = 1000          # bytes of one block on one GPU
LAT = 500                   # ns per transfer
GBS = 1.0                   # 1 GB/s = 1 byte/ns: a block moves in 1000 ns


class TokenTimer:
    def time(self, out):
        t = NS_PER_TOKEN * out.num_tokens
        return StepTiming(total_ns=t, compute_ns=t, comm_ns=0, overhead_ns=0)


class ByOwner:
    """Retention hook: ``decisions[owner]`` at completion (default release), NONE on arrival."""

    def __init__(self, decisions):
        self.decisions = decisions

    def on_complete(self, call, now_ns, kv_utilization):
        return self.decisions.get(call.owner, RELEASE)

    def on_arrival(self, call, now_ns):
        return NONE


def make(capacity_blocks, decisions=None, num_blocks=8, lower=None):
    loop = EventLoop()
    hooks = Hooks(retention=ByOwner(decisions or {}))
    cluster = Cluster(loop, hooks)
    sched = create_scheduler(num_blocks=num_blocks, clock=lambda: loop.now, hooks=hooks)
    inst = Instance(0, loop, sched, TokenTimer(), hooks, False, cluster.finished)
    cluster.add_instance(inst)
    chain = [TierStore(TierSpec("cpu", capacity_blocks, GBS, GBS, LAT), lower)]
    if lower is not None:
        chain.append(lower)
    tiers = attach_tiers(inst, chain, BLOCK_BYTES, 1, hooks)
    return cluster, inst, tiers


def call(owner, ids, prompt, output=1, call_index=0):
    return CallSpec(owner=owner, call_index=call_index, prompt_tokens=prompt, output_tokens=output,
                    tool_duration_ns=0, tool_name=None,
                    tokens=TokenStream(uid=9000 + owner, block_size=16, ids=ids))


A_IDS = list(range(64)) + [1000] + list(range(2000, 2031))     # A's prompt, its output, A2's rest
B_IDS = list(range(5000, 5081))


def run_a_b_a2(cluster, inst):
    """A (owner 0, 64 tokens) at 0, B (owner 1, 80 other tokens) at 20000, A2 (owner 0,
    A's context + 31 tokens = 96) at 40000; one output token each; 7 usable GPU blocks."""
    cluster.submit(0, call(0, A_IDS, 64), request_id=0)
    cluster.schedule(20_000, lambda: cluster.submit(0, call(1, B_IDS, 80), request_id=1))
    cluster.schedule(40_000, lambda: cluster.submit(0, call(0, A_IDS, 96, call_index=1), request_id=2))
    cluster.run()
    return {f.info.request_id: f for f in cluster.finished_calls}


def test_offloaded_blocks_reload_at_bandwidth_plus_latency_and_skip_recompute():
    cluster, inst, tiers = make(100, {0: RetentionDecision("offload", 10 ** 9)})
    done = run_a_b_a2(cluster, inst)
    cpu = tiers.stores[0]
    # A: one 64-token step, 0 -> 6400; its 4 full blocks are stored after the step:
    # d2h 6400 + 500 + 4 x 1000 = 10900. B (80 tokens) runs 20000 -> 28000 and takes 5 of
    # the 7 usable GPU blocks from the LRU front: the 3 never-used ones, then A's freed
    # blocks tail first (A's blocks 3 and 2), so A's blocks 0 and 1 stay cached on the GPU;
    # B's 5 blocks are stored 28000 -> 28000 + 500 + 5000 = 33500.
    assert done[0].first_token_ns == 6400 and done[1].first_token_ns == 28000
    # A2 at 40000: GPU hit 2 blocks (0, 1), CPU-tier hit 2 blocks (2, 3; A's block 4 was never
    # full), among the lookup's 96 // 16 = 6 blocks. Its load: h2d 40000 + 500 +
    # 2 x 1000 = 42500, during which it is not scheduled; then it computes only the 32
    # tokens after the 64 cached ones: 32 x 100 = 3200 ns -> first token at 45700.
    # (Recomputing blocks 2-3 instead would take 64 x 100 = 6400 ns: first token 46400.)
    assert done[2].first_scheduled_ns == 42500
    assert done[2].first_token_ns == 45700
    assert done[2].num_cached_tokens == 64
    st = tiers.calls[2]
    assert st.tokens == {"cpu": 32} and st.load_ns == 2500
    h2d, d2h = tiers.h2d["cpu"], tiers.d2h["cpu"]
    assert (h2d.bytes, h2d.busy_ns, h2d.transfers) == (2000, 2500, 1)
    # d2h: A's 4, B's 5, then A2's blocks 4-5 after its step (45700 + 500 + 2000): 11 blocks,
    # busy 4500 + 5500 + 2500.
    assert (d2h.bytes, d2h.busy_ns, d2h.transfers) == (11_000, 12_500, 3)
    assert cpu.stats.hit_blocks == 2 and cpu.stats.stored_blocks == 11 and len(cpu) == 11
    assert cpu.pins == {}           # A2's admission consumed A's offload pin
    check_tier_invariants([tiers])
    inst.kv.check_invariants()


def test_without_the_tier_the_same_run_recomputes():
    """Control for the test above: cache-lru without tiers recomputes A's blocks 2-3."""
    loop = EventLoop()
    cluster = Cluster(loop, Hooks())
    sched = create_scheduler(num_blocks=8, clock=lambda: loop.now)
    cluster.add_instance(Instance(0, loop, sched, TokenTimer(), cluster.hooks, False, cluster.finished))
    done = run_a_b_a2(cluster, cluster.instances[0])
    assert done[2].first_scheduled_ns == 40_000
    assert done[2].first_token_ns == 40_000 + 64 * NS_PER_TOKEN      # 46400
    assert done[2].num_cached_tokens == 32


def test_a_full_tier_evicts_least_recently_used_blocks_tail_first():
    """vLLM's LRUOffloadingManager: a store without room evicts ready, unreferenced blocks
    from the LRU front; a store touches the request's blocks in reverse (move_to_end from
    the tail), so a request's tail is older than its head. Capacity 6 blocks."""
    cluster, inst, tiers = make(6)
    done = run_a_b_a2(cluster, inst)
    cpu = tiers.stores[0]
    ah = TokenStream(uid=9000, block_size=16, ids=A_IDS).block_hashes(6)
    bh = TokenStream(uid=9001, block_size=16, ids=B_IDS).block_hashes(5)
    # A stores A0..A3 -> LRU order [A3, A2, A1, A0]. B's 5 blocks need 4 + 5 - 6 = 3 places:
    # A3, A2, A1 go -> [A0, B4, B3, B2, B1, B0]. A2 (released A: no pin) finds A2's block 2
    # in no tier: only its 2 GPU hits, no load, 64 tokens recomputed -> 40000 + 6400.
    assert 2 not in tiers.calls and done[2].first_token_ns == 46_400
    # A2's step stores its blocks 0..5: A1..A5 are new (A0 is there), 6 + 5 - 6 = 5 places:
    # the front A0, B4, B3, B2, B1 go; the touch puts A's head last.
    assert list(cpu.blocks) == [bh[0], ah[5], ah[4], ah[3], ah[2], ah[1]]
    assert (cpu.stats.stored_blocks, cpu.stats.evicted_blocks) == (4 + 5 + 5, 3 + 5)
    check_tier_invariants([tiers])


def test_a_tier_full_of_loads_in_flight_skips_the_store():
    """prepare_store returns None when nothing can be evicted (every block is read by a
    load or not yet stored): the store is skipped and retried after the next step."""
    store = TierStore(TierSpec("cpu", 2, GBS, GBS, LAT))
    assert store.prepare_store([1, 2], ready_ns=100, now_ns=0) == [1, 2]
    assert store.prepare_store([3], ready_ns=200, now_ns=50) is None    # 1, 2 still in flight
    assert store.stats.failed_stores == 1 and list(store.blocks) == [1, 2]
    store.blocks[1].ref += 1                                            # a load reads 1
    assert store.prepare_store([3], ready_ns=200, now_ns=150) == [3]    # 2 (ready, idle) goes
    assert list(store.blocks) == [1, 3] and store.stats.evicted_blocks == 1


def test_cpu_evictions_demote_to_cxl():
    cxl = TierStore(TierSpec("cxl", 10, 0.5, 0.5, 2000))
    cpu = TierStore(TierSpec("cpu", 2, GBS, GBS, LAT), lower=cxl)
    cpu.prepare_store([1, 2], 0, 0)
    cpu.prepare_store([3], 0, 0)
    assert list(cpu.blocks) == [2, 3] and list(cxl.blocks) == [1]



def test_a_whole_prompt_tier_hit_loads_every_block_and_recomputes_the_last_token():
    """vLLM's offloading connector looks up all of a prompt's full blocks: a 64-token prompt
    whose 4 blocks are in the CPU tier loads all 4 and, on landing, counts 63 tokens computed
    (``_update_waiting_for_remote_kv`` recomputes the last token to sample the next)."""
    cluster, inst, tiers = make(100)
    # A (64 tokens) at 0: one step 0 -> 6400, its 4 blocks stored by 10900. B (111 tokens, 7
    # blocks) at 20000 takes all 7 usable GPU blocks: A's are gone from the GPU.
    cluster.submit(0, call(0, A_IDS, 64), request_id=0)
    b = CallSpec(owner=1, call_index=0, prompt_tokens=111, output_tokens=1, tool_duration_ns=0, tool_name=None,
                 tokens=TokenStream(uid=9001, block_size=16, ids=list(range(5000, 5111))))
    cluster.schedule(20_000, lambda: cluster.submit(0, b, request_id=1))
    cluster.schedule(40_000, lambda: cluster.submit(0, call(0, A_IDS, 64, call_index=1), request_id=2))
    cluster.run()
    done = {f.info.request_id: f for f in cluster.finished_calls}
    # A again at 40000: no GPU hit, CPU hit of all 4 blocks (64 // 16): h2d 40000 + 500 + 4 x
    # 1000 = 44500; then 1 token (the last, recomputed): 100 ns -> first token at 44600.
    # (Capped at (64 - 1) // 16 = 3 blocks it would load 3 and compute 16 tokens: 45100.)
    assert done[2].first_scheduled_ns == 44_500
    assert done[2].first_token_ns == 44_600
    assert tiers.calls[2].tokens == {"cpu": 64}
    assert done[2].num_cached_tokens == 63      # vLLM: the computed tokens when it is scheduled
    assert tiers.stores[0].stats.hit_blocks == 4
    check_tier_invariants([tiers])
    inst.kv.check_invariants()

def test_offload_without_tiers_is_a_release():
    from engine_helpers import create_kv, make_request
    kv = create_kv(num_blocks=11)
    req = make_request(0, list(range(40)), owner=3)
    hits, n = kv.get_computed_blocks(req)
    assert kv.allocate_slots(req, 40, hits, n)
    req.num_computed_tokens = 40
    assert kv.finish(req, RetentionDecision("offload", 10 ** 9), 0) is None
    assert kv.entries == {} and kv.num_free_blocks == 10
    kv.check_invariants()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 5), st.integers(1, 20),
                          st.sampled_from(["offload", "release", "evict", "protect"]),
                          st.integers(0, 30_000)), min_size=1, max_size=12),
       st.integers(2, 12), st.booleans())
def test_tier_accounting_balances_and_nothing_leaks(calls, capacity, with_cxl):
    """Random programs sharing prefixes, random retention decisions, a small GPU pool and a
    small tier: at the end no load holds a tier block, no pin survives its deadline, every
    store holds at most its capacity, stored - evicted = resident per store, and every GPU
    block is free."""
    decisions = {}
    lower = TierStore(TierSpec("cxl", 4, 0.5, 0.5, 1000)) if with_cxl else None
    loop_cluster = make(capacity, decisions, num_blocks=24, lower=lower)
    cluster, inst, tiers = loop_cluster
    t = 0
    for k, (owner, blocks, out, kind, gap) in enumerate(calls):
        dl = 10 ** 12
        decisions[owner] = {"offload": RetentionDecision("offload", dl), "release": RELEASE,
                            "evict": EVICT, "protect": RetentionDecision("protect", 50_000)}[kind]
        ids = [owner * 100_000 + i for i in range(blocks * 16 + out + 1)]
        spec = call(owner, ids, blocks * 16, output=out, call_index=k)
        t += gap
        cluster.schedule(t, lambda spec=spec, k=k: cluster.submit(0, spec, request_id=k))
    cluster.run()
    assert tiers.loading == {}
    check_tier_invariants([tiers])
    for s in tiers.stores:
        assert len(s) <= s.capacity
        assert s.stats.stored_blocks - s.stats.evicted_blocks == len(s)
        assert all(slot.ref == 0 for slot in s.blocks.values())
    inst.kv.check_invariants()


def _make_room_by_rescan(store, need, now_ns):
    """The reference: release pins in eviction-key order, listing the evictable blocks
    again after each, until ``need`` are evictable; then evict the first ``need``."""
    ev = lambda: [h for h, s in store.blocks.items() if not s.ref and not s.pins and s.ready_ns <= now_ns]
    victims = ev()[:need]
    if len(victims) < need:
        if len(victims) + sum(1 for s in store.blocks.values()
                              if s.pins and not s.ref and s.ready_ns <= now_ns) < need:
            return False
        for pin in store._pin_order(now_ns):
            store.unpin(pin.owner, pin.seq)
            store.stats.reclaimed_pins += 1
            victims = ev()[:need]
            if len(victims) >= need:
                break
        if len(victims) < need:
            return False
    store._evict(victims, now_ns)
    return True


@settings(max_examples=200, deadline=None)
@given(slots=st.lists(st.tuples(st.integers(0, 1), st.integers(0, 2)), min_size=1, max_size=24),
       pins=st.lists(st.tuples(st.lists(st.integers(0, 23), max_size=8), st.integers(0, 3)), max_size=5),
       need=st.integers(1, 24))
def test_make_room_counts_released_pins_as_the_rescan_does(slots, pins, need):
    """_make_room keeps the evictable count from each released pin's blocks instead of
    rescanning the tier after every release: same victims, same pins released, same result."""
    from llmservingsim.kv_tiers import TierPin

    def build():
        store = TierStore(TierSpec("cpu", 64, GBS, GBS, LAT))
        for h, (ref, ready) in enumerate(slots):
            store.prepare_store([h], ready, 0)
            store.blocks[h].ref = ref
        for owner, (hashes, value) in enumerate(pins):
            store.pin(TierPin(owner, 0, sorted(set(hashes)), owner, 10 ** 9, float(value), owner))
        return store

    a, b = build(), build()
    assert a._make_room(need, 1) == _make_room_by_rescan(b, need, 1)
    assert list(a.blocks) == list(b.blocks) and a.pins.keys() == b.pins.keys()
    assert a.stats == b.stats
