"""BlockPool's batched paths and PrefixMemo against a plain per-block reference pool.

The reference keeps the free queue as one list, drops content one block at a time and looks
every hash up; the pool must agree with it after every operation: the same free-queue
(eviction) order, reference counts, entry references, contents, primaries and copies, the
same ``entry_only`` total, and the same hits for every prefix lookup (which the pool serves
from the stream's memo)."""
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from llmservingsim import block_pool
from llmservingsim.block_pool import BlockPool

N = 12      # blocks, the null block included


class RefPool:
    def __init__(self, n: int):
        self.ref = [0] * n
        self.entry = [0] * n
        self.hash = [None] * n
        self.free = list(range(1, n))
        self.ref[0] = 1
        self.cached: dict = {}
        self.copies: dict = {}

    def drop(self, b: int) -> None:
        h, self.hash[b] = self.hash[b], None
        if self.cached[h] == b:
            others = self.copies.get(h)
            if others:
                self.cached[h] = others.pop(0)
            else:
                del self.cached[h]
        else:
            self.copies[h].remove(b)
        if h in self.copies and not self.copies[h]:
            del self.copies[h]

    def get_new(self, n: int) -> list:
        out, self.free = self.free[:n], self.free[n:]
        for b in out:
            if self.hash[b] is not None:
                self.drop(b)
            self.ref[b] = 1
        return out

    def touch(self, blocks: list) -> None:
        for b in blocks:
            if self.ref[b] == 0:
                self.free.remove(b)
            self.ref[b] += 1

    def pin(self, blocks: list) -> None:
        for b in blocks:
            self.entry[b] += 1

    def free_blocks(self, ordered: list, drop_content: bool, pinned: bool) -> None:
        for b in ordered:
            self.ref[b] -= 1
            if pinned:
                self.entry[b] -= 1
            if self.ref[b] == 0:
                if drop_content and self.hash[b] is not None:
                    self.drop(b)
                    self.free.insert(0, b)
                else:
                    self.free.append(b)

    def publish(self, blocks: list, hashes: list) -> None:
        for b, h in zip(blocks, hashes):
            if self.hash[b] is None:
                self.hash[b] = h
                if h in self.cached:
                    self.copies.setdefault(h, []).append(b)
                else:
                    self.cached[h] = b

    def look_up(self, hashes: list) -> list:
        out = []
        for h in hashes:
            if h not in self.cached:
                break
            out.append(self.cached[h])
        return out

    def entry_only(self) -> int:
        return sum(1 for b in range(1, len(self.ref)) if 0 < self.entry[b] == self.ref[b])


class Stream:
    """A token stream stand-in: a fixed hash chain (hashes may repeat, streams may share)."""

    def __init__(self, hashes: list):
        self.hashes = hashes
        self.memos = None

    def block_hashes(self, n: int) -> list:
        return self.hashes


def same_state(pool: BlockPool, ref: RefPool) -> None:
    pool.check_invariants()
    blocks = pool.blocks
    assert pool.free_queue.block_ids() == ref.free
    assert [b.ref_cnt for b in blocks] == ref.ref
    assert [pool.entry_refs_of(b) for b in blocks] == ref.entry
    assert [b.block_hash for b in blocks] == ref.hash
    assert {h: b.block_id for h, b in pool.cached.items()} == ref.cached
    assert {h: [b.block_id for b in bs] for h, bs in pool.copies.items()} == ref.copies
    assert pool.entry_only == ref.entry_only()


chains = st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=8), min_size=1, max_size=4)
ops = st.lists(st.tuples(st.sampled_from(["admit", "free", "drop", "retain", "release"]),
                         st.integers(0, 100), st.integers(0, 8)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(chains, ops, st.sampled_from([block_pool.BULK, 0, 2]))
def test_pool_matches_per_block_reference(chain_list, script, bulk):
    """Requests of a few streams (hash chains that repeat and share hashes) are admitted
    with their cached prefix, allocate and publish blocks, are freed (optionally dropping
    content) or retained as entries and later released. ``bulk``: takes of more blocks go
    through the run path (``BlockPool._take_runs``)."""
    with mock.patch.object(block_pool, "BULK", bulk):
        run_against_reference(chain_list, script)


def admission(pool: BlockPool, streams: list, pick: int, size: int) -> tuple:
    """An admission of the script's stream ``pick`` looking up its first ``size`` hashes:
    ``(stream, memo, n, hits, new)``, ``new`` the blocks to take (negative: they do not fit)."""
    s = streams[pick % len(streams)]
    n = min(size, len(s.hashes))
    memo = pool.memo_of(s)
    k = min(memo.valid, n)
    hits = memo.blocks[:k] + (pool.look_up(memo, s.hashes, n) if k < n else [])
    new = min(len(s.hashes) - len(hits), pool.num_free - sum(b.ref_cnt == 0 for b in hits))
    return s, memo, n, hits, new


def run_against_reference(chain_list, script):
    pool, ref = BlockPool(N), RefPool(N)
    streams = [Stream(c) for c in chain_list]
    held: list = []         # (stream, blocks) of admitted requests
    entries: list = []      # blocks retained by entries
    for op, pick, size in script:
        if op == "admit":
            s, memo, n, hits, new = admission(pool, streams, pick, size)
            expect = ref.look_up(s.hashes[:n])
            assert [b.block_id for b in hits] == expect
            if hits:        # the counts an admission check reads (a free run's tail: no pass)
                assert pool.hit_counts(hits) == (sum(ref.ref[b] == 0 for b in expect), sum(
                    0 < ref.ref[b] == ref.entry[b] for b in expect))
            if new < 0:
                continue
            pool.touch(hits)
            ref.touch(expect)
            got = pool.get_new_blocks(new)
            assert [b.block_id for b in got] == ref.get_new(new)
            blocks = hits + got
            publish = min(len(blocks), pick % (len(blocks) + 1))
            if publish > len(hits):
                pool.cache_blocks(got[:publish - len(hits)], s.hashes[len(hits):publish], memo, len(hits))
                ref.publish([b.block_id for b in got[:publish - len(hits)]], s.hashes[len(hits):publish])
            held.append(blocks)
        elif op in ("free", "drop", "retain") and held:
            blocks = held.pop(pick % len(held))
            if op == "retain":
                pool.pin(blocks)
                ref.pin([b.block_id for b in blocks])
                entries.append(blocks)
            else:
                pool.free_blocks(reversed(blocks), drop_content=op == "drop")
                ref.free_blocks([b.block_id for b in reversed(blocks)], op == "drop", False)
        elif op == "release" and entries:
            blocks = entries.pop(pick % len(entries))
            drop = size % 2 == 1
            pool.unpin(blocks, drop_content=drop)
            ref.free_blocks([b.block_id for b in reversed(blocks)], drop, True)
        same_state(pool, ref)


def pool_state(pool: BlockPool, streams: list) -> tuple:
    """Everything a publication can change, memos included, by block id."""
    ids = lambda bs: [b.block_id for b in bs]
    memos = [(s.memos[pool].valid, ids(s.memos[pool].blocks)) if s.memos else None for s in streams]
    return ([(b.block_hash, b.memo_pos if b.memo is not None else None) for b in pool.blocks],
            {h: b.block_id for h, b in pool.cached.items()},
            {h: ids(bs) for h, bs in pool.copies.items()}, memos)


@settings(max_examples=300, deadline=None)
@given(chains, ops)
def test_cache_next_block_is_cache_blocks_of_one(chain_list, script):
    """``cache_next_block(b, h, memo, pos)`` leaves the pool exactly as ``cache_blocks([b],
    [h], memo, pos)`` does: the same contents, primaries, copies and memos, whether the
    block is new or published already, its hash cached already or not, and the memo's
    listed prefix ending at ``pos`` or not (blocks are published one at a time from any
    position of a request's blocks, in a random order, on two pools fed the same script)."""
    pools = BlockPool(N), BlockPool(N)
    streams = [[Stream(c) for c in chain_list] for _ in pools]
    held: list = [[], []]
    for op, pick, size in script:
        for k, pool in enumerate(pools):
            if op == "admit":
                s = streams[k][pick % len(chain_list)]
                new = min(size, len(s.hashes), pool.num_free)
                blocks = pool.get_new_blocks(new)
                memo = pool.memo_of(s)
                for j in sorted(range(new), key=lambda j: (j * pick) % (new + 1)):
                    if k == 0:
                        pool.cache_blocks([blocks[j]], [s.hashes[j]], memo, j)
                    else:
                        pool.cache_next_block(blocks[j], s.hashes[j], memo, j)
                held[k].append(blocks)
            elif held[k]:
                blocks = held[k].pop(pick % len(held[k]))
                pool.free_blocks(reversed(blocks), drop_content=op == "drop")
        assert pool_state(pools[0], streams[0]) == pool_state(pools[1], streams[1])
        pools[1].check_invariants()


def test_taking_one_block_skips_a_hit_at_the_front():
    """A cache hit on the front free block leaves an empty place there: the next block
    taken is the one behind it, then the rest in order (the one-block take's check)."""
    pool = BlockPool(4)                         # the null block and three
    a, b, c = pool.get_new_blocks(3)
    pool.cache_blocks([a], [7])
    pool.free_blocks([a, b, c])                 # one run: a, b, c
    pool.touch([pool.get_cached_block(7)])      # a is hit: its place empties
    assert [x.block_id for x in pool.get_new_blocks(1)] == [b.block_id]
    pool.check_invariants()
    assert [x.block_id for x in pool.get_new_blocks(1)] == [c.block_id]
    assert pool.num_free == 0 and not pool.free_queue.runs
    pool.check_invariants()


def apply_op(pool: BlockPool, streams: list, held: list, entries: list, op: str, pick: int,
             size: int) -> None:
    """One step of the admit / free / drop / retain / release script on ``pool`` alone."""
    if op == "admit":
        s, memo, _, hits, new = admission(pool, streams, pick, size)
        if new < 0:
            return
        pool.touch(hits)
        got = pool.get_new_blocks(new)
        blocks = hits + got
        # all of them usually (a prefill's publication), else some
        publish = len(blocks) if size > 2 else pick % (len(blocks) + 1)
        if publish > len(hits):
            # the memo's listed prefix may end before the hits (a repeated hash) or at them
            pool.cache_blocks(got[:publish - len(hits)], s.hashes[len(hits):publish], memo, len(hits))
        held.append(blocks)
    elif op in ("free", "drop", "retain") and held:
        blocks = held.pop(pick % len(held))
        if op == "retain":
            pool.pin(blocks)
            entries.append(blocks)
        else:
            pool.free_blocks(reversed(blocks), drop_content=op == "drop")
    elif op == "release" and entries:
        pool.unpin(entries.pop(pick % len(entries)), drop_content=size % 2 == 1)


def stamps(pool: BlockPool, streams: list) -> tuple:
    """The version stamps: the pool's drop epoch and each memo's cut count."""
    return pool.drop_epoch, [s.memos[pool].cuts if s.memos else None for s in streams]


long_chains = st.lists(st.lists(st.integers(0, 60), min_size=4, max_size=14), min_size=2, max_size=4)
long_ops = st.lists(st.tuples(st.sampled_from(["admit", "admit", "free", "free", "drop", "retain", "release"]),
                              st.integers(0, 100), st.integers(0, 8)), min_size=10, max_size=60)


@settings(max_examples=400, deadline=None)
@given(st.one_of(chains, long_chains), long_ops, st.integers(4, 16))
def test_run_takes_leave_the_per_block_state(chain_list, script, n):
    """Two pools of ``n`` blocks run the same script, one taking every batch block by
    block, one taking every batch through the run path (``_take_runs``, whose memo runs
    start wherever a taken block is listed): after each step they hold the same blocks in
    the same places (free-queue order, counts, contents, primaries, copies, every memo's
    valid prefix and list) and the same version stamps (``drop_epoch``, each memo's
    ``cuts``)."""
    pools = BlockPool(n), BlockPool(n)
    streams = [[Stream(c) for c in chain_list] for _ in pools]
    held: list = [[], []]
    entries: list = [[], []]
    for op, pick, size in script:
        for k, bulk in enumerate((10 ** 9, 0)):
            with mock.patch.object(block_pool, "BULK", bulk):
                apply_op(pools[k], streams[k], held[k], entries[k], op, pick, size)
        a, b = pools
        assert pool_state(a, streams[0]) == pool_state(b, streams[1])
        assert a.free_queue.block_ids() == b.free_queue.block_ids()
        assert [x.ref_cnt for x in a.blocks] == [x.ref_cnt for x in b.blocks]
        assert stamps(a, streams[0]) == stamps(b, streams[1])
        b.check_invariants()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=80), st.data())
def test_reversed_match_is_the_longest_reversed_run(listed, data):
    """``_reversed_match(out, i, listed, p)`` is the largest k with ``out[i + j] is
    listed[p - j]`` for j < k (out[i] is listed[p]; runs of any length, chunk edges
    included)."""
    objs = [object() for _ in range(6)]
    listed = [objs[x] for x in listed]
    p = data.draw(st.integers(0, len(listed) - 1))
    k = data.draw(st.integers(1, p + 1))
    tail = [objs[x] for x in data.draw(st.lists(st.integers(0, 5), max_size=40))]
    head = [objs[x] for x in data.draw(st.lists(st.integers(0, 5), max_size=5))]
    out = head + listed[p - k + 1:p + 1][::-1] + tail
    i = len(head)
    expect = 0
    while (expect < len(out) - i and expect <= p and out[i + expect] is listed[p - expect]):
        expect += 1
    assert block_pool._reversed_match(out, i, listed, p) == expect


def test_a_large_take_drops_memo_tails_as_runs():
    """A take of more than ``BULK`` blocks meeting freed contexts' listed blocks tail first
    (the usual recompute) matches each context as one run: one ``_reversed_match`` per
    context, each memo cut once to the first place taken (``cuts`` counting each place, as
    block by block), and their hashes unpublished."""
    k = block_pool.BULK + 8
    pool = BlockPool(2 * k + 11)
    a, b = Stream([1000 + j for j in range(k + 10)]), Stream([5000 + j for j in range(k)])
    memo_a, memo_b = pool.memo_of(a), pool.memo_of(b)
    blocks_a = pool.get_new_blocks(k + 10)
    blocks_b = pool.get_new_blocks(k)
    pool.cache_blocks(blocks_a, a.hashes, memo_a, 0)
    pool.cache_blocks(blocks_b, b.hashes, memo_b, 0)
    assert memo_a.valid == k + 10 and memo_b.valid == k
    pool.free_blocks(reversed(blocks_b))        # the tail first
    pool.free_blocks(reversed(blocks_a))
    calls = []
    real = block_pool._reversed_match

    def counting(*args):
        calls.append(real(*args))
        return calls[-1]

    with mock.patch.object(block_pool, "_reversed_match", counting):
        got = pool.get_new_blocks(2 * k)
    assert calls == [k, k]
    assert got == blocks_b[::-1] + blocks_a[:9:-1]
    assert memo_b.valid == 0 and memo_b.cuts == k
    assert memo_a.valid == 10 and memo_a.cuts == k
    assert sorted(pool.cached) == a.hashes[:10]
    assert all(x.ref_cnt == 1 and x.block_hash is None for x in got)
    pool.check_invariants()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["alloc", "free", "hit", "take", "retain"]),
                          st.integers(0, 100), st.integers(0, 11)), max_size=40))
def test_hits_on_freed_contexts_match_reference(script):
    """Contexts are taken, freed tail first (one run each) or retained and released, and
    later hit from their first block (a program's next call: its hits are the freed run's
    tail, reversed: ``BlockPool._free_tail``'s case, whole or in part, after takes from the
    front or other hits emptied some of its places, or not), from their second block, or
    with another context's first block after them; the pool agrees with the
    per-block reference after every step, and ``hit_counts`` with its counts."""
    pool, ref = BlockPool(N), RefPool(N)
    held: list = []         # contexts referenced (blocks in context order)
    gone: list = []         # contexts freed, newest last
    entries: list = []
    for op, pick, size in script:
        if op == "alloc":
            k = min(size, pool.num_free)
            got = pool.get_new_blocks(k)
            assert [b.block_id for b in got] == ref.get_new(k)
            if got:
                held.append(got)
        elif op == "take":
            k = min(size % 4, pool.num_free)
            got = pool.get_new_blocks(k)
            assert [b.block_id for b in got] == ref.get_new(k)
            if got:
                held.append(got)
        elif op in ("free", "retain") and held:
            blocks = held.pop(pick % len(held))
            if op == "retain" and size % 2:
                pool.pin(blocks)
                ref.pin([b.block_id for b in blocks])
                pool.unpin(blocks)
                ref.free_blocks([b.block_id for b in reversed(blocks)], False, True)
            elif op == "retain":
                pool.pin(blocks)
                ref.pin([b.block_id for b in blocks])
                entries.append(blocks)
            else:
                pool.free_blocks(reversed(blocks))
                ref.free_blocks([b.block_id for b in reversed(blocks)], False, False)
            gone.append(blocks)
        elif op == "hit" and (gone or entries):
            ctxs = gone + entries
            ctx = ctxs[-1 - pick % len(ctxs)]
            hits = ctx[:max(1, min(size, len(ctx)))]
            if pick % 4 == 2 and len(hits) > 1:     # not from the first block (leaves places empty)
                hits = hits[1:]
            elif pick % 4 == 3:     # then another context's first block (not a run's tail)
                other = ctxs[(pick // 4) % len(ctxs)][0]
                if other not in hits:
                    hits = hits + [other]
            ids = [b.block_id for b in hits]
            assert pool.hit_counts(hits) == (sum(ref.ref[b] == 0 for b in ids),
                                             sum(0 < ref.ref[b] == ref.entry[b] for b in ids))
            pool.touch(hits)
            ref.touch(ids)
            held.append(list(hits))
        same_state(pool, ref)
