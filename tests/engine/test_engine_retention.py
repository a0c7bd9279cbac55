"""Retention entries, our KVCacheManager extension (paper §3.4): protect / release / evict
decisions at completion, reclamation under pressure in eviction-key order (expired first,
then lower value, then earlier deadline, then creation order), never the caller's own
program, and the hooks that observe or order entries."""
import pytest

from engine_helpers import (assert_engine_empty, block_ids, create_kv, create_scheduler, free_order,
                            make_request, num_scheduled, run_steps, step)
from hooks import EVICT, RELEASE, Hooks, RetentionDecision


class Clock:
    def __init__(self, now=0):
        self.now = now

    def __call__(self):
        return self.now


def protect(deadline_ns, value=None):
    return RetentionDecision("protect", deadline_ns, value)


def admit(kv, req):
    """The scheduler's admission path (gate, then allocation) for a whole prompt."""
    hits, num_hit = kv.get_computed_blocks(req)
    if not kv.can_fit_full_sequence(req, hits):
        return False
    ok = kv.allocate_slots(req, req.num_tokens - num_hit, hits, num_hit)
    if ok:
        req.num_computed_tokens = req.num_tokens
    return ok


def finished_call(kv, rid, owner, ids, decision, now=0):
    """A call of ``owner`` whose whole prompt was computed, finished with ``decision``."""
    req = make_request(rid, ids, owner=owner)
    assert admit(kv, req)
    kv.finish(req, decision, now)
    kv.check_invariants()
    return req


def test_protect_keeps_blocks_referenced_and_not_free():
    kv = create_kv(num_blocks=11)
    req = make_request(0, list(range(40)), owner=7)
    assert admit(kv, req)
    held = list(kv.get_blocks(0))
    kv.finish(req, protect(1_000, 2.5), now_ns=10)
    entry = kv.entries[7]
    assert entry.blocks == held and [b.block_id for b in held] == [1, 2, 3]
    assert (entry.owner, entry.num_tokens, entry.created_ns, entry.deadline_ns, entry.value) == \
        (7, 40, 10, 1_000, 2.5)
    assert all(b.ref_cnt == 1 for b in held)
    assert kv.num_free_blocks == 7 and kv.usage() == pytest.approx(0.3)
    assert 0 not in kv.req_blocks
    kv.check_invariants()
    # Its content is still hittable by the owner's next call.
    nxt = make_request(1, list(range(40)) + [99] * 10, owner=7)
    assert kv.get_computed_blocks(nxt)[1] == 32


def test_protect_with_past_deadline_is_a_release():
    kv = create_kv(num_blocks=11)
    finished_call(kv, 0, 7, list(range(40)), protect(5, 1.0), now=5)
    assert kv.entries == {} and kv.num_free_blocks == 10


def test_release_keeps_content_hittable():
    kv = create_kv(num_blocks=11)
    finished_call(kv, 0, 7, list(range(40)), RELEASE)
    assert kv.num_free_blocks == 10 and kv.entries == {}
    assert free_order(kv) == [4, 5, 6, 7, 8, 9, 10, 3, 2, 1]      # LRU tail, prefix last
    again = make_request(1, list(range(40)), owner=8)
    assert kv.get_computed_blocks(again)[1] == 32
    kv.finish(make_request(2, [1], owner=9), None, 0)               # None = release, no blocks
    kv.check_invariants()


def test_evict_drops_content():
    kv = create_kv(num_blocks=11)
    finished_call(kv, 0, 7, list(range(40)), EVICT)
    assert kv.num_free_blocks == 10 and kv.entries == {}
    assert kv.pool.cached == {}
    assert free_order(kv)[:2] == [1, 2]                             # reused first
    again = make_request(1, list(range(40)), owner=8)
    assert kv.get_computed_blocks(again) == ([], 0)
    kv.check_invariants()


def test_release_entry_and_evict_entry():
    kv = create_kv(num_blocks=11)
    finished_call(kv, 0, 1, list(range(40)), protect(100))
    finished_call(kv, 1, 2, list(range(100, 140)), protect(100))
    assert kv.num_free_blocks == 4
    assert kv.release_entry(1) and not kv.release_entry(1)
    assert kv.get_computed_blocks(make_request(5, list(range(40))))[1] == 32
    assert kv.release_entry(2, drop_content=True)
    assert kv.get_computed_blocks(make_request(6, list(range(100, 140))))[1] == 0
    assert kv.num_free_blocks == 10 and kv.entries == {}
    kv.check_invariants()


def three_entries(clock):
    """Owners 1, 2, 3 each retain 2 blocks (20-token calls); 4 of 10 blocks stay free."""
    kv = create_kv(num_blocks=11, clock=clock)
    finished_call(kv, 0, 1, [1] * 20, protect(100, 9.0))     # expired at t=500
    finished_call(kv, 1, 2, [2] * 20, protect(1_000, 1.0))
    finished_call(kv, 2, 3, [3] * 20, protect(2_000, 0.5))
    assert kv.num_free_blocks == 4
    return kv


def test_reclaim_order_expired_first_then_lower_value():
    clock = Clock(500)
    kv = three_entries(clock)
    big = make_request(10, [10] * 96, owner=10)               # 6 blocks: 2 short
    assert admit(kv, big)
    assert sorted(kv.entries) == [2, 3] and kv.num_reclaimed_entries == 1
    kv.check_invariants()
    more = make_request(11, [11] * 32, owner=11)              # 2 blocks: 2 short
    assert admit(kv, more)
    assert sorted(kv.entries) == [2]                          # value 0.5 before 1.0
    kv.check_invariants()
    last = make_request(12, [12] * 17, owner=12)
    assert admit(kv, last)
    assert kv.entries == {} and kv.num_reclaimed_entries == 3
    kv.free(big), kv.free(more), kv.free(last)
    assert kv.num_free_blocks == 10
    kv.check_invariants()


def test_reclaim_releases_only_as_many_entries_as_needed():
    kv = three_entries(Clock(500))
    one_short = make_request(10, [10] * 80, owner=10)         # 5 blocks, 4 free
    assert admit(kv, one_short)
    assert sorted(kv.entries) == [2, 3]
    assert kv.num_free_blocks == 1                            # 4 + 2 reclaimed - 5
    kv.check_invariants()


def test_reclaim_without_values_uses_deadline_then_creation_order():
    clock = Clock(0)
    kv = create_kv(num_blocks=11, clock=clock)
    finished_call(kv, 0, 1, [1] * 20, protect(3_000))
    finished_call(kv, 1, 2, [2] * 20, protect(2_000))
    finished_call(kv, 2, 3, [3] * 20, protect(2_000))         # same key as 2, created later
    for owner_left, size in (([1, 3], 96), ([1], 32), ([], 32)):    # each 2 blocks short
        req = make_request(10 + len(owner_left), [50 + len(owner_left)] * size, owner=99)
        assert admit(kv, req)
        assert sorted(kv.entries) == owner_left
        kv.check_invariants()


def test_reclaimed_entry_content_stays_hittable():
    """Reclamation releases (LRU, hashes kept); only blocks later reused lose content."""
    kv = three_entries(Clock(500))
    assert admit(kv, make_request(10, [10] * 80, owner=10))   # reclaims owner 1
    assert 1 not in kv.entries
    # Owner 1's prefix block went to the queue tail: still cached.
    assert kv.get_computed_blocks(make_request(11, [1] * 20, owner=1))[1] == 16


def test_own_entry_is_reclaimed_last_when_nothing_else_makes_room():
    """The requester's own entry goes last, but it does go: otherwise its non-hit blocks
    (the old partial block) could block its program's next call forever."""
    kv = create_kv(num_blocks=8)                              # 7 usable
    ctx = list(range(40))
    finished_call(kv, 0, 5, ctx, protect(10**9, 1.0))         # 3 blocks held, 4 free
    nxt = make_request(1, ctx + list(range(500, 560)), owner=5)   # 100 tokens: 7 blocks
    hits, num_hit = kv.get_computed_blocks(nxt)
    assert [b.block_id for b in hits] == [1, 2] and num_hit == 32
    # 5 new blocks > 4 free; releasing its own entry frees 3 blocks but makes the 2 hits
    # evictable: need 5 + 2 = 7 <= 7 free.
    assert kv.can_fit_full_sequence(nxt, hits)
    assert kv.allocate_slots(nxt, 100 - 32, hits, num_hit)
    assert 5 not in kv.entries and kv.num_reclaimed_entries == 1
    assert [b.block_id for b in kv.get_blocks(1)[:2]] == [1, 2]   # its hits were kept
    kv.check_invariants()


def test_own_entry_kept_other_program_entry_reclaimed_and_hits_shared():
    kv = create_kv(num_blocks=9)                              # 8 usable
    ctx = list(range(40))
    finished_call(kv, 0, 5, ctx, protect(10**9, 1.0))         # owner 5: 3 blocks
    finished_call(kv, 1, 6, [6] * 20, protect(10**9, 9.0))    # owner 6: 2 blocks
    assert kv.num_free_blocks == 3
    nxt = make_request(2, ctx + list(range(500, 560)), owner=5)   # 7 blocks, 2 hits
    assert admit(kv, nxt)
    assert sorted(kv.entries) == [5]                          # owner 6 reclaimed despite value
    shared = kv.entries[5].blocks[:2]
    assert all(b.ref_cnt == 2 for b in shared)                # entry + running call
    assert kv.get_blocks(2)[:2] == shared
    kv.check_invariants()
    # The follow-up finishes and is protected again: the new entry supersedes the old; the
    # shared prefix stays held (once), the old partial block is released.
    old_tail = kv.entries[5].blocks[2]
    kv.finish(nxt, protect(10**9, 1.0), now_ns=1)
    assert kv.entries[5].num_tokens == 100 and len(kv.entries[5].blocks) == 7
    assert all(b.ref_cnt == 1 for b in kv.entries[5].blocks)
    assert old_tail.ref_cnt == 0 and kv.num_free_blocks == 1
    kv.check_invariants()


class KeyByBlocks:
    """A victim-protection hook: reclaim the largest entry first."""

    def eviction_key(self, entry, now_ns):
        return (-entry.num_blocks, entry.seq)


class Recorder:
    def __init__(self):
        self.events = []

    def on_residency(self, owner, instance, resident_tokens, protected, now_ns):
        self.events.append((owner, instance, resident_tokens, protected, now_ns))


def test_victim_protection_hook_orders_reclamation():
    clock = Clock(0)
    kv = create_kv(num_blocks=11, clock=clock, hooks=Hooks(victim_protection=KeyByBlocks()))
    finished_call(kv, 0, 1, [1] * 20, protect(100, 0.0))      # 2 blocks, expired later
    finished_call(kv, 1, 2, [2] * 40, protect(10**9, 9.0))    # 3 blocks
    clock.now = 500
    assert admit(kv, make_request(5, [5] * 96, owner=9))      # 6 blocks, 5 free: 1 short
    assert sorted(kv.entries) == [1]                          # the hook's key, not eq. 5
    kv.check_invariants()


def test_residency_hook_reports_creation_and_reclamation():
    clock = Clock(0)
    rec = Recorder()
    kv = create_kv(num_blocks=6, clock=clock, hooks=Hooks(residency=rec))
    finished_call(kv, 0, 1, [1] * 40, protect(100, 1.0), now=7)
    assert rec.events == [(1, 0, 40, True, 7)]
    clock.now = 50
    assert admit(kv, make_request(1, [2] * 40, owner=2))      # 3 blocks, 2 free
    assert rec.events[-1] == (1, 0, 0, False, 50)
    kv.check_invariants()


def test_scheduler_admission_reclaims_entries():
    """Through the scheduler: the admission gate counts reclaimable entry blocks."""
    clock = Clock(0)
    sched = create_scheduler(num_blocks=11, clock=clock)
    kv = sched.kv
    a = make_request(0, [1] * 60, owner=1, max_tokens=4)
    sched.add_request(a)
    run_steps(sched, release=False)
    kv.finish(a, protect(10**9, 1.0), now_ns=10)
    assert len(kv.entries[1].blocks) == 4 and kv.num_free_blocks == 6
    b = make_request(1, [2] * 150, owner=2, max_tokens=2)      # 10 blocks
    sched.add_request(b)
    out, _ = step(sched, 20)
    assert num_scheduled(out) == {1: 150} and kv.entries == {}
    run_steps(sched)
    assert_engine_empty(sched)


def test_own_entry_released_when_the_call_needs_its_room():
    """Its own program's entry is reclaimed (last) when the call cannot fit otherwise."""
    sched = create_scheduler(num_blocks=11)
    kv = sched.kv
    finished_call(kv, 100, 1, [1] * 60, protect(10**9, 1.0))  # 4 blocks
    b = make_request(1, [2] * 150, owner=1, max_tokens=2)      # 10 blocks, own program
    sched.add_request(b)
    out, _ = step(sched, 1)
    assert num_scheduled(out) == {1: 150} and 1 not in kv.entries
    run_steps(sched)
    assert_engine_empty(sched)


def test_failed_admission_does_not_destroy_entries():
    kv = create_kv(num_blocks=6)                              # 5 usable
    finished_call(kv, 0, 1, list(range(32)), protect(10**9, 1.0))   # blocks 1, 2
    other = make_request(1, [9] * 32, owner=2)
    assert admit(kv, other)                                   # blocks 3, 4: one free
    b = make_request(2, list(range(64)), owner=3)             # 4 blocks; hits 1, 2
    hits, num_hit = kv.get_computed_blocks(b)
    assert [h.block_id for h in hits] == [1, 2]
    # Releasing owner 1 frees 2 blocks (3 free) but b then needs 2 new + 2 evictable hits.
    assert not kv.can_fit_full_sequence(b, hits)
    assert not kv.allocate_slots(b, 32, hits, num_hit)
    assert 1 in kv.entries
    kv.check_invariants()


def test_gate_counts_blocks_shared_by_two_entries():
    sched = create_scheduler(num_blocks=11)                    # 10 usable
    kv = sched.kv
    ctx = list(range(200))
    finished_call(kv, 0, 1, ctx[:40], protect(10**9, 1.0))    # blocks 1, 2, 3
    finished_call(kv, 1, 2, ctx[:64], protect(10**9, 1.0))    # hits 1, 2; adds 4, 5
    assert kv.pool.blocks[1].ref_cnt == 2 and kv.num_free_blocks == 5
    big = make_request(2, [7] * 144, owner=3, max_tokens=1)   # 9 blocks; 10 after releases
    sched.add_request(big)
    out = sched.schedule()
    assert num_scheduled(out) == {2: 144}
    assert kv.entries == {}
    kv.check_invariants()
