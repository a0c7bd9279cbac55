"""BlockPool and FreeBlockQueue (vLLM test_kv_cache_utils.py FreeKVCacheBlockQueue tests,
test_prefix_caching.py test_maybe_evict_cached_block / test_hash_block_correct_reuse)."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmservingsim.block_pool import BlockPool, FreeBlockQueue, KVBlock


def ids(queue: FreeBlockQueue) -> list[int]:
    return queue.block_ids()


def test_free_queue_initialization():
    blocks = [KVBlock(i) for i in range(4)]
    q = FreeBlockQueue(blocks)
    assert q.num_free == 4
    assert ids(q) == [0, 1, 2, 3]
    assert len(q.runs) == 1 and all(b.free_run is q.runs[0] for b in blocks)   # one batch, one run


def test_free_queue_operations():
    blocks = [KVBlock(i) for i in range(5)]
    q = FreeBlockQueue(blocks)
    assert q.popleft() is blocks[0]
    assert q.num_free == 4 and ids(q) == [1, 2, 3, 4]
    assert blocks[0].block_id not in ids(q)          # it may still name its old run
    q.remove(blocks[2])                             # from the middle
    assert ids(q) == [1, 3, 4] and q.num_free == 3
    q.append(blocks[0])
    assert ids(q) == [1, 3, 4, 0]
    q.appendleft(blocks[2])
    assert ids(q) == [2, 1, 3, 4, 0] and q.num_free == 5
    q.remove(blocks[0])                             # the tail
    q.remove(blocks[2])                             # the head
    assert ids(q) == [1, 3, 4]
    for expect in (1, 3, 4):
        assert q.popleft().block_id == expect
    assert q.num_free == 0 and ids(q) == []
    with pytest.raises(RuntimeError):
        q.popleft()
    q.append(blocks[4])
    assert ids(q) == [4] and q.num_free == 1


def test_pool_null_block_and_initial_order():
    pool = BlockPool(11)
    assert pool.null_block.block_id == 0 and pool.null_block.ref_cnt == 1
    assert pool.num_usable == 10 and pool.num_free == 10
    assert pool.free_queue.block_ids() == list(range(1, 11))
    assert pool.usage() == 0.0
    with pytest.raises(ValueError):
        BlockPool(1)
    pool.check_invariants()


def test_pool_get_new_free_touch():
    pool = BlockPool(6)
    got = pool.get_new_blocks(3)
    assert [b.block_id for b in got] == [1, 2, 3]
    assert all(b.ref_cnt == 1 for b in got)
    assert pool.num_free == 2 and pool.usage() == pytest.approx(0.6)
    with pytest.raises(RuntimeError):
        pool.get_new_blocks(3)
    pool.touch([got[0]])                           # a second holder
    assert got[0].ref_cnt == 2
    pool.free_blocks(reversed(got))                # vLLM frees a request tail first
    assert got[0].ref_cnt == 1
    assert pool.free_queue.block_ids() == [4, 5, 3, 2]
    pool.touch([got[1]])                           # a hit on a free block leaves the queue
    assert got[1].ref_cnt == 1 and pool.free_queue.block_ids() == [4, 5, 3]
    pool.check_invariants()


def test_cached_block_evicted_when_reused():
    """Reusing a free cached block drops its hash (test_hash_block_correct_reuse)."""
    pool = BlockPool(2)
    (b,) = pool.get_new_blocks(1)
    pool.cache_block(b, 1234)
    assert pool.get_cached_block(1234) is b
    pool.free_blocks([b])
    assert pool.get_cached_block(1234) is b        # free but still hittable
    (again,) = pool.get_new_blocks(1)
    assert again is b and b.block_hash is None and pool.get_cached_block(1234) is None
    pool.check_invariants()


def test_free_with_drop_content_goes_to_head():
    pool = BlockPool(5)
    a, b = pool.get_new_blocks(2)
    pool.cache_block(a, 1)
    pool.free_blocks([b, a], drop_content=True)
    # a had content: dropped and put first (nothing worth keeping); b had none: tail.
    assert pool.free_queue.block_ids() == [1, 3, 4, 2]
    assert a.block_hash is None and pool.get_cached_block(1) is None
    pool.check_invariants()


def test_cache_block_respects_disabled_caching():
    pool = BlockPool(3, enable_caching=False)
    (b,) = pool.get_new_blocks(1)
    pool.cache_block(b, 7)
    assert b.block_hash is None and pool.get_cached_block(7) is None


def test_duplicate_hash_first_kept_and_evicting_other_copy_keeps_map():
    """Two blocks with the same content: the map serves one; evicting the copy that is not
    in the map leaves the map entry alone (test_maybe_evict_cached_block, first half)."""
    pool = BlockPool(5)
    b1, b2, b3 = pool.get_new_blocks(3)
    pool.cache_block(b1, 10)
    pool.cache_block(b2, 20)
    pool.cache_block(b3, 20)
    assert pool.get_cached_block(20) is b2
    pool.free_blocks([b3, b1, b2])
    pool.get_new_blocks(2)                         # pops 4 then b3 (a copy)
    assert b3.block_hash is None
    assert pool.get_cached_block(20) is b2 and pool.get_cached_block(10) is b1
    pool.check_invariants()


def test_maybe_evict_cached_block_keeps_duplicate_hittable():
    pool = BlockPool(5)
    b1, b2, b3 = pool.get_new_blocks(3)
    pool.cache_block(b1, 10)
    pool.cache_block(b2, 20)
    pool.cache_block(b3, 20)
    pool.free_blocks([b2, b1, b3])                 # queue: 4, b2, b1, b3
    pool.get_new_blocks(2)                         # evicts b2, the mapped copy of hash 20
    assert pool.get_cached_block(20) is b3         # vLLM: block3 is still cached
    pool.check_invariants()


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["popleft", "popleft_n", "append", "appendleft", "extend",
                                           "extendleft", "remove"]),
                          st.lists(st.integers(0, 7), min_size=1, max_size=4)), max_size=80),
       st.integers(0, 4))
def test_free_queue_matches_a_list_model(ops, slack):
    """Any sequence of queue operations, single or batched, keeps the runs equal to a plain
    list, also when blocks cycle often enough for the runs to be compacted."""
    blocks = [KVBlock(i) for i in range(8)]
    q = FreeBlockQueue(blocks)
    q.compact_slack = slack
    model = list(range(8))
    for op, picks in ops:
        i = picks[0]
        if op == "popleft":
            if model:
                assert q.popleft().block_id == model.pop(0)
        elif op == "popleft_n":
            n = min(len(picks), len(model))
            got = [b.block_id for b in q.popleft_n(n)]
            assert got == model[:n]
            del model[:n]
        elif op == "remove":
            if i in model:
                q.remove(blocks[i])
                model.remove(i)
        elif op in ("extend", "extendleft"):
            batch = [j for j in dict.fromkeys(picks) if j not in model]
            getattr(q, op)([blocks[j] for j in batch])
            model = model + batch if op == "extend" else batch + model
        elif i not in model:                       # only free blocks may be (re)inserted
            getattr(q, op)(blocks[i])
            if op == "append":
                model.append(i)
            else:
                model.insert(0, i)
        assert q.block_ids() == model and q.num_free == len(model)
        assert q._places <= 2 * len(blocks) + slack     # empty places stay O(blocks)
        for run in q.runs:                              # the no-empty-place test is exact
            assert run.live == sum(b.free_run is run for b in run.blocks[run.pos:])


def test_exclusive_entry_pins_lazily_and_a_second_holder_writes_it():
    """A request's blocks, referenced by it alone, are taken over by an entry without a write
    per block; a hit on one of them by another request (or a shared block anywhere) makes
    the counts explicit, with the same values as an eager pin."""
    pool = BlockPool(8)
    a = pool.get_new_blocks(3)                      # blocks 1, 2, 3: one reference each
    assert pool.num_multi == 0
    pool.pin(a)
    assert pool.lazy_pins == {id(a): a} and [b.entry_refs for b in a] == [0, 0, 0]
    assert [pool.entry_refs_of(b) for b in a] == [1, 1, 1] and pool.entry_only == 3
    pool.check_invariants()
    pool.touch(a[:2])                               # another request hits two of them
    assert pool.lazy_pins == {} and [b.entry_refs for b in a] == [1, 1, 1]
    assert [b.ref_cnt for b in a] == [2, 2, 1] and pool.entry_only == 1 and pool.num_multi == 2
    b = pool.get_new_blocks(1)                      # shared blocks exist: pinned eagerly
    pool.pin(b)
    assert pool.lazy_pins == {} and b[0].entry_refs == 1 and pool.entry_only == 2
    pool.unpin(a)                                   # not lazy any more: the per-block release
    assert [x.ref_cnt for x in a] == [1, 1, 0] and pool.num_multi == 0 and pool.entry_only == 1
    assert pool.free_queue.block_ids()[-1] == 3
    pool.check_invariants()


def test_lazy_entry_release_frees_tail_first_as_one_run():
    pool = BlockPool(8)
    a = pool.get_new_blocks(3)
    pool.pin(a)
    before = pool.free_epoch
    pool.unpin(a)
    assert pool.free_queue.block_ids() == [4, 5, 6, 7, 3, 2, 1] and pool.free_epoch == before + 1
    assert pool.entry_only == 0 and pool.lazy_pins == {} and [b.ref_cnt for b in a] == [0, 0, 0]
    assert len(pool.free_queue.runs[-1].blocks) == 3
    pool.check_invariants()


def test_hits_on_a_free_runs_tail():
    """A context freed tail first is one run; the next call's hits from its first block are
    that run's tail, reversed (``BlockPool._free_tail``): touched without a look at each
    block, the run loses those places, and ``hit_counts`` counts them all evictable. With an
    empty place among them (another hit), or a block after them that is not the run's next,
    they are not such a tail and are touched block by block."""
    pool = BlockPool(10)
    a = pool.get_new_blocks(5)                      # blocks 1 .. 5
    pool.free_blocks(reversed(a))                   # one run: 5, 4, 3, 2, 1
    run = a[0].free_run
    assert pool.hit_counts(a[:3]) == (3, 0)
    pool.touch(a[:3])
    assert [b.ref_cnt for b in a] == [1, 1, 1, 0, 0]
    assert pool.free_queue.block_ids() == [6, 7, 8, 9, 5, 4] and pool.num_free == 6
    assert run.blocks == [a[4], a[3]] and run.live == 2         # the places are gone
    pool.check_invariants()
    pool.touch(a[3:])                               # the rest, whole: the run leaves the queue
    assert pool.free_queue.block_ids() == [6, 7, 8, 9] and run not in pool.free_queue.runs
    pool.free_blocks(reversed(a))                   # one run again: 5, 4, 3, 2, 1
    b = pool.get_new_blocks(4)                      # 6 .. 9
    pool.free_blocks(reversed(b))                   # a run behind it: 9, 8, 7, 6
    pool.touch(a[:5])                               # a whole run, not the last one
    assert pool.free_queue.block_ids() == [9, 8, 7, 6]
    assert [x.block_id for x in pool.get_new_blocks(1)] == [9]
    pool.check_invariants()


def test_hits_not_a_free_runs_tail():
    pool = BlockPool(10)
    a = pool.get_new_blocks(5)
    pool.free_blocks(reversed(a))                   # 6, 7, 8, 9, then the run 5, 4, 3, 2, 1
    pool.touch([a[1]])                              # 2's place empties
    assert pool.hit_counts(a[:3]) == (2, 0)
    pool.touch(a[:3])
    assert [b.ref_cnt for b in a] == [1, 2, 1, 0, 0]
    assert pool.free_queue.block_ids() == [6, 7, 8, 9, 5, 4]
    pool.check_invariants()
    pool.free_blocks(reversed(a[:3]))               # 3 and 1 free: the run 3, 1
    (c,) = pool.get_new_blocks(1)                   # 6
    pool.free_blocks([c])                           # the run 6
    hits = [a[0], c]                                # 1 is the run's last, 6 is not before it
    assert pool.hit_counts(hits) == (2, 0)
    pool.touch(hits)
    assert pool.free_queue.block_ids() == [7, 8, 9, 5, 4, 3]
    pool.check_invariants()
