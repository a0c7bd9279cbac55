"""KVCacheManager prefix caching, ported from vLLM 0.19 tests/v1/core/test_prefix_caching.py
(11 blocks = 10 usable, block size 16) with the same expected block ids and queue orders."""
import pytest

from engine_helpers import (BLOCK, assert_engine_empty, block_ids, create_kv, create_scheduler,
                            free_order, make_request, num_scheduled, run_steps)

COMMON = [i for i in range(3) for _ in range(16)]       # 3 full blocks: 0*16, 1*16, 2*16


def allocate(kv, req, num_new=None):
    """The scheduler's admission path: prefix lookup, then allocate the rest."""
    hits, num_hit = kv.get_computed_blocks(req)
    if num_new is None:
        num_new = req.num_tokens - num_hit
    ok = kv.allocate_slots(req, num_new, hits, num_hit)
    return ok, hits, num_hit


def test_prefill():
    kv = create_kv(num_blocks=11)
    req0 = make_request(0, COMMON + [3] * 7)             # 55 tokens
    ok, hits, num_hit = allocate(kv, req0)
    assert ok and hits == [] and num_hit == 0
    assert block_ids(kv, req0) == [1, 2, 3, 4]
    blocks = kv.pool.blocks
    hashes = req0.stream.block_hashes(3)
    for i, bid in enumerate((1, 2, 3)):                  # full blocks are published at once
        assert blocks[bid].block_hash == hashes[i] and blocks[bid].ref_cnt == 1
    assert blocks[4].block_hash is None and blocks[4].ref_cnt == 1

    # Hit in the common prefix while its blocks are still in use.
    req1 = make_request(1, COMMON + [3] * 5)             # 53 tokens
    ok, hits, num_hit = allocate(kv, req1)
    assert ok and [b.block_id for b in hits] == [1, 2, 3] and num_hit == 48
    assert block_ids(kv, req1) == [1, 2, 3, 5]
    assert all(b.ref_cnt == 2 for b in hits)
    assert kv.num_free_blocks == 5
    kv.check_invariants()

    kv.free(req0)
    kv.free(req1)
    assert kv.num_free_blocks == 10
    # unallocated (6..10), req0's tail (4), req1's tail (5), the common prefix reversed.
    assert free_order(kv) == [6, 7, 8, 9, 10, 4, 5, 3, 2, 1]

    # Hit in the common prefix when its blocks are free (evictable hits leave the queue).
    req2 = make_request(2, COMMON + [3] * 6)
    ok, hits, num_hit = allocate(kv, req2)
    assert ok and [b.block_id for b in hits] == [1, 2, 3] and num_hit == 48
    assert block_ids(kv, req2) == [1, 2, 3, 6]
    assert kv.num_free_blocks == 6
    assert all(kv.pool.blocks[b].ref_cnt == 0 for b in free_order(kv))
    kv.free(req2)

    # Cache miss and eviction: the block id order is the eviction order.
    req3 = make_request(3, [99] * (16 * 10))
    ok, hits, _ = allocate(kv, req3)
    assert ok and hits == []
    assert block_ids(kv, req3) == [7, 8, 9, 10, 4, 5, 6, 3, 2, 1]
    assert kv.num_free_blocks == 0 and free_order(kv) == []
    kv.check_invariants()
    kv.free(req3)
    kv.check_invariants()


def test_decode():
    kv = create_kv(num_blocks=11)
    ids = COMMON + [3] * 7 + [8] * 4 + [7] * 19           # prompt 55, then 23 outputs
    req0 = make_request(0, ids, num_tokens=55)
    ok, _, _ = allocate(kv, req0)
    assert ok and block_ids(kv, req0) == [1, 2, 3, 4]

    # Append slots without allocating a new block.
    req0.num_computed_tokens = 55
    req0.num_tokens += 4
    assert kv.allocate_slots(req0, 4)
    assert block_ids(kv, req0) == [1, 2, 3, 4]
    assert kv.get_blocks(0)[-1].block_hash is None

    # 9 tokens fill block 4, 10 more need a new block; only the full one gets a hash.
    req0.num_computed_tokens = 59
    req0.num_tokens += 19
    free_before = kv.num_free_blocks
    assert kv.allocate_slots(req0, 19)
    assert len(kv.get_blocks(0)) == 5 and kv.num_free_blocks == free_before - 1
    assert kv.get_blocks(0)[-2].block_hash == req0.stream.block_hashes(4)[3]
    assert kv.get_blocks(0)[-1].block_hash is None
    kv.check_invariants()


def test_evict():
    kv = create_kv(num_blocks=11)
    last = 5 * 16 + 7
    req0 = make_request(0, list(range(last)))
    ok, _, _ = allocate(kv, req0)
    assert ok and len(kv.get_blocks(0)) == 6             # 5 full + 1 partial
    req1 = make_request(1, list(range(last, last + 3 * 16)))
    ok, _, _ = allocate(kv, req1)
    assert ok and len(kv.get_blocks(1)) == 3
    assert kv.num_free_blocks == 1
    kv.free(req0)
    kv.free(req1)
    assert kv.num_free_blocks == 10
    assert free_order(kv) == [10, 6, 5, 4, 3, 2, 1, 9, 8, 7]

    # Touch the first 2 blocks: the new block is the queue head (10).
    req2 = make_request(2, list(range(2 * 16 + 3)))
    ok, hits, num_hit = allocate(kv, req2)
    assert ok and [b.block_id for b in hits] == [1, 2] and num_hit == 32
    assert block_ids(kv, req2) == [1, 2, 10]
    assert kv.num_free_blocks == 7
    kv.check_invariants()


def test_hash_block_correct_reuse():
    kv = create_kv(num_blocks=2)                          # one usable block
    req = make_request(0, list(range(16)))
    ok, _, _ = allocate(kv, req)
    assert ok and len(kv.get_blocks(0)) == 1
    kv.free(req)
    req = make_request(1, list(range(15)))
    ok, _, _ = allocate(kv, req)
    assert ok and kv.get_blocks(1)[0].block_hash is None
    kv.check_invariants()


def test_computed_blocks_not_evicted():
    """The hit block is not the one evicted when another free block exists."""
    kv = create_kv(num_blocks=3)
    req0 = make_request(0, list(range(16)))
    assert allocate(kv, req0)[0] and block_ids(kv, req0) == [1]
    req1 = make_request(1, list(range(16, 32)))
    assert allocate(kv, req1)[0] and block_ids(kv, req1) == [2]
    kv.free(req0)
    kv.free(req1)
    req2 = make_request(2, list(range(48)))
    hits, num_hit = kv.get_computed_blocks(req2)
    assert [b.block_id for b in hits] == [1] and num_hit == 16
    assert kv.allocate_slots(req2, 16, hits, num_hit)
    assert block_ids(kv, req2) == [1, 2]
    kv.check_invariants()


def test_prefill_not_enough_free_blocks_with_computed_blocks():
    """A failed allocation leaves reference counts and the free queue untouched."""
    kv = create_kv(num_blocks=11)
    req0 = make_request(0, COMMON)
    assert allocate(kv, req0)[0]
    part0 = list(kv.get_blocks(0))
    req1 = make_request(1, COMMON * 2)
    hits, num_hit = kv.get_computed_blocks(req1)
    assert hits == part0 and num_hit == 48
    assert kv.allocate_slots(req1, 48, hits, num_hit)
    part1 = list(kv.get_blocks(1))
    kv.free(req1)
    req2 = make_request(2, [7] * 32)
    hits, num_hit = kv.get_computed_blocks(req2)
    assert hits == [] and num_hit == 0
    assert kv.allocate_slots(req2, 32)
    assert kv.num_free_blocks == 5

    req3 = make_request(3, COMMON * 3)
    hits, num_hit = kv.get_computed_blocks(req3)
    assert hits == part1 and num_hit == 96
    queue_before = free_order(kv)
    assert not kv.allocate_slots(req3, 48, hits, num_hit)    # 3 new + 3 evictable hits > 5
    assert {b.ref_cnt for b in part1[:3]} == {1}
    assert {b.ref_cnt for b in part1[3:]} == {0}
    assert free_order(kv) == queue_before and kv.get_blocks(3) == []
    assert 3 not in kv.req_blocks
    kv.check_invariants()


def test_evictable_cached_blocks_not_double_allocated():
    """Evictable hits count toward the capacity check (test_single_type_kv_cache_manager)."""
    kv = create_kv(num_blocks=3)                          # 2 usable
    a = make_request(0, [5] * 16)
    assert allocate(kv, a)[0]
    kv.free(a)                                            # block 1 cached, evictable
    assert free_order(kv) == [2, 1]
    # 33 tokens: hit on block 1 (evictable) + 2 new blocks = 3 > 2 free -> must fail.
    b = make_request(1, [5] * 16 + [6] * 17)
    hits, num_hit = kv.get_computed_blocks(b)
    assert [h.block_id for h in hits] == [1]
    assert not kv.can_fit_full_sequence(b, hits)
    assert not kv.allocate_slots(b, 17, hits, num_hit)
    assert kv.pool.blocks[1].ref_cnt == 0 and free_order(kv) == [2, 1]
    # 32 tokens: hit + 1 new = 2 blocks: fits, and the new block is not the hit block.
    c = make_request(2, [5] * 16 + [6] * 16)
    hits, num_hit = kv.get_computed_blocks(c)
    assert kv.can_fit_full_sequence(c, hits)
    assert kv.allocate_slots(c, 16, hits, num_hit)
    assert block_ids(kv, c) == [1, 2]
    kv.check_invariants()


def test_cache_hit_is_at_most_num_tokens_minus_one():
    """The last token is always recomputed: a fully cached 32-token prompt hits 16."""
    kv = create_kv(num_blocks=11)
    a = make_request(0, list(range(32)))
    assert allocate(kv, a)[0]
    kv.free(a)
    b = make_request(1, list(range(32)))
    assert kv.get_computed_blocks(b)[1] == 16
    c = make_request(2, list(range(33)))
    assert kv.get_computed_blocks(c)[1] == 32


def test_caching_disabled_never_hits():
    kv = create_kv(num_blocks=11, enable_caching=False)
    a = make_request(0, list(range(40)))
    assert allocate(kv, a)[0]
    assert all(b.block_hash is None for b in kv.get_blocks(0))
    b = make_request(1, list(range(40)))
    assert kv.get_computed_blocks(b) == ([], 0)


# ---- scheduler-level (vLLM test_async_scheduler.py) -----------------------------------------
def test_prefix_caching_for_prefill_dedup():
    """Blocks are published at schedule time: the 2nd identical prompt of the same step hits."""
    sched = create_scheduler(max_num_batched_tokens=1000)
    reqs = [make_request(i, [0] * 100, max_tokens=3, arrival_ns=i) for i in range(5)]
    sched.add_request(reqs[0])
    sched.add_request(reqs[1])
    first = sched.schedule()
    assert num_scheduled(first) == {0: 100, 1: 4}
    assert reqs[0].num_cached_tokens == 0
    assert reqs[1].num_cached_tokens >= 96 and reqs[1].num_cached_tokens == 96
    # The remaining requests arrive one per step while the first two decode (async).
    pending = sched.schedule()
    assert sched.update_from_output(first, 1) == []
    finished = run_steps(sched, async_mode=True, inflight=[pending],
                         arrivals={k: [reqs[k + 2]] for k in range(3)})
    assert sorted(r.request_id for r in finished) == [0, 1, 2, 3, 4]
    for r in reqs[1:]:
        assert r.num_cached_tokens >= 96
        assert r.num_output_tokens == 3
    assert_engine_empty(sched)


def test_prefix_caching_for_multi_turn():
    """Turn 2 = turn-1 prompt + outputs (300 tokens): hits 288 = (300 - 1) // 16 * 16."""
    sched = create_scheduler(max_num_batched_tokens=1000)
    full = [[1000 * (i + 1) + t for t in range(300)] for i in range(5)]    # prompt 100 + 200 outputs
    turn1 = [make_request(i, full[i], num_tokens=100, max_tokens=200, arrival_ns=i) for i in range(5)]
    for r in turn1:
        sched.add_request(r)
    done = run_steps(sched, async_mode=True)
    assert len(done) == 5 and all(r.num_output_tokens == 200 for r in turn1)
    # The final sampled token never had KV computed: 299 tokens -> 18 full blocks.
    turn2 = [make_request(10 + i, full[i], max_tokens=200, arrival_ns=10 + i) for i in range(5)]
    for r in turn2:
        sched.add_request(r)
    out = sched.schedule()
    for r in turn2:
        assert r.num_cached_tokens == 288
    assert num_scheduled(out) == {10 + i: 12 for i in range(5)}
    sched.update_from_output(out, 10**6)
    run_steps(sched, async_mode=True)
    assert_engine_empty(sched)


def test_multi_turn_hit_bound_follows_vllm_formula():
    """Follow-up hit = min((prev_len - 1) // 16, (new_len - 1) // 16) * 16 if nothing evicted."""
    for prompt, out_len, extra in ((37, 20, 9), (64, 1, 0), (64, 16, 30), (10, 5, 40)):
        sched = create_scheduler(max_num_batched_tokens=256)
        ids = list(range(prompt + out_len + extra))
        a = make_request(0, ids, num_tokens=prompt, max_tokens=out_len)
        sched.add_request(a)
        run_steps(sched)
        prev_len = prompt + out_len
        new_len = prev_len + extra
        b = make_request(1, ids, num_tokens=new_len, max_tokens=1)
        sched.add_request(b)
        sched.schedule()
        assert b.num_cached_tokens == min((prev_len - 1) // 16, (new_len - 1) // 16) * 16, (prompt, out_len, extra)


def test_duplicate_block_stays_hittable_after_other_copy_evicted():
    sched = create_scheduler(num_blocks=11)
    kv = sched.kv
    a = make_request(0, [7] * 96, max_tokens=1)
    b = make_request(1, [7] * 96, max_tokens=1)
    sched.add_request(a)
    sched.add_request(b)
    out = sched.schedule()
    assert num_scheduled(out) == {0: 96, 1: 16} and block_ids(kv, b) == [1, 2, 3, 4, 5, 7]
    assert sched.update_from_output(out, 1) == [a, b]
    kv.free(a)
    kv.free(b)
    assert free_order(kv) == [8, 9, 10, 6, 7, 5, 4, 3, 2, 1]
    c = make_request(2, [3] * 64, max_tokens=1)           # takes 8, 9, 10 and evicts 6
    sched.add_request(c)
    out = sched.schedule()
    assert block_ids(kv, c) == [8, 9, 10, 6]
    sched.update_from_output(out, 2)
    kv.free(c)
    d = make_request(3, [7] * 96 + [9] * 4, max_tokens=1)
    sched.add_request(d)
    sched.schedule()
    assert d.num_cached_tokens == 96
    kv.check_invariants()


@pytest.mark.parametrize("pure", [True, False])
def test_next_call_reads_the_stream_memo_and_eviction_cuts_it(pure):
    """A program's next call (same token stream) gets its predecessor's published blocks from
    the stream's memo without looking their hashes up; evicting the predecessor's tail (the
    free queue takes it first) cuts the memo back to the surviving prefix, exactly. (A pure
    stream's identities are in its memo's map, a hashed stream's in the prefix dict.)"""
    from llmservingsim.tokens import TokenStream
    kv = create_kv(num_blocks=11)
    # explicit ids for the first block only: a hashed chain with the same block structure
    stream = TokenStream(uid=77, block_size=BLOCK, ids=None if pure else list(range(BLOCK)))
    call0 = make_request(0, num_tokens=5 * 16 + 3, stream=stream)     # 5 full blocks + 3 tokens
    ok, hits, _ = allocate(kv, call0)
    assert ok and hits == [] and block_ids(kv, call0) == [1, 2, 3, 4, 5, 6]
    memo = kv.pool.memo_of(stream)
    assert memo.valid == 5 and [b.block_id for b in memo.blocks] == [1, 2, 3, 4, 5]
    kv.free(call0)
    assert free_order(kv) == [7, 8, 9, 10, 6, 5, 4, 3, 2, 1]

    other = make_request(9, num_tokens=6 * 16)          # 6 fresh blocks: 7..10, then 6 and 5
    allocate(kv, other)
    assert block_ids(kv, other) == [7, 8, 9, 10, 6, 5]
    assert memo.valid == 4 and memo.cuts == 1           # block 5 (place 4) lost its content

    lookups = []
    get = kv.pool._hashed.get
    kv.pool._hashed = type("Counting", (dict,), {"get": lambda self, h: lookups.append(h) or get(h)})(kv.pool._hashed)
    call1 = make_request(1, num_tokens=8 * 16 + 1, stream=stream)
    hits, num_hit = kv.get_computed_blocks(call1)
    assert [b.block_id for b in hits] == [1, 2, 3, 4] and num_hit == 64
    if pure:    # the lookup after the memo reads the map (PrefixMemo.slots): no dict lookup
        assert lookups == []
        assert memo.slots[:6] == hits + [None, None]     # place 4 dropped, place 5 never published
    else:
        assert lookups == stream.block_hashes(8)[4:8]   # only the hashes after the memo
    kv.check_invariants()
