"""KV blocks are created on first use (issue 12: `instances: 100000` built every instance's
whole pool, ~35k block objects each, before simulating anything). A lazily filled free queue
must behave exactly like one holding every block from the start."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from llmservingsim.block_pool import BlockPool, FreeBlockQueue, KVBlock


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 12), ops=st.lists(st.tuples(st.sampled_from(["pop", "append", "appendleft", "remove"]),
                                                  st.integers(0, 1000)), max_size=60))
def test_lazy_free_queue_matches_an_eager_one(n, ops):
    eager_blocks = [KVBlock(i) for i in range(n)]
    eager = FreeBlockQueue(eager_blocks)
    made: dict[int, KVBlock] = {}

    def make(lo, hi):
        assert lo == len(made) and hi > lo          # created once, in id order
        for i in range(lo, hi):
            made[i] = KVBlock(i)
        return [made[i] for i in range(lo, hi)]

    lazy = FreeBlockQueue.fresh(n, make)
    held: list[int] = []          # ids taken out of both queues
    for op, pick in ops:
        if op == "pop":
            if eager.num_free == 0:
                continue
            a, b = eager.popleft(), lazy.popleft()
            assert a.block_id == b.block_id
            held.append(a.block_id)
        elif op in ("append", "appendleft") and held:
            i = held.pop(pick % len(held))
            getattr(eager, op)(eager_blocks[i])
            getattr(lazy, op)(made[i])
        elif op == "remove":
            free_made = [i for i in eager.block_ids() if i in made]   # a cache hit is a real block
            if not free_made:
                continue
            i = free_made[pick % len(free_made)]
            eager.remove(eager_blocks[i])
            lazy.remove(made[i])
            held.append(i)
        assert lazy.block_ids() == eager.block_ids() and lazy.num_free == eager.num_free
    assert len(made) <= n


def test_an_unused_pool_creates_no_blocks_and_checks_still_see_all():
    pool = BlockPool(1_000_000)
    assert len(pool._blocks) == 1 and pool.num_free == 999_999       # only the null block
    got = pool.get_new_blocks(3)
    assert [b.block_id for b in got] == [1, 2, 3] and len(pool._blocks) == 4
    pool.free_blocks(reversed(got))
    small = BlockPool(8)
    small.free_blocks(reversed(small.get_new_blocks(2)))
    assert small.free_queue.block_ids() == [3, 4, 5, 6, 7, 2, 1]
    small.check_invariants()                       # creates the rest; same answers
    assert len(small.blocks) == 8 and small.get_new_blocks(5)[0].block_id == 3
