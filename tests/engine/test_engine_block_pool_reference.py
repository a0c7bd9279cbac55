"""BlockPool's batched paths and PrefixMemo against a plain per-block reference pool.

The reference keeps the free queue as one list, drops content one block at a time and looks
every hash up; the pool must agree with it after every operation: the same free-queue
(eviction) order, reference counts, entry references, contents, primaries and copies, the
same ``entry_only`` total, and the same hits for every prefix lookup (which the pool serves
from the stream's memo)."""
from hypothesis import given, settings
from hypothesis import strategies as st

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
@given(chains, ops)
def test_pool_matches_per_block_reference(chain_list, script):
    """Requests of a few streams (hash chains that repeat and share hashes) are admitted
    with their cached prefix, allocate and publish blocks, are freed (optionally dropping
    content) or retained as entries and later released."""
    pool, ref = BlockPool(N), RefPool(N)
    streams = [Stream(c) for c in chain_list]
    held: list = []         # (stream, blocks) of admitted requests
    entries: list = []      # blocks retained by entries
    for op, pick, size in script:
        if op == "admit":
            s = streams[pick % len(streams)]
            n = min(size, len(s.hashes))
            memo = pool.memo_of(s)
            k = min(memo.valid, n)
            hits = memo.blocks[:k] + (pool.look_up(memo, s.hashes, n) if k < n else [])
            expect = ref.look_up(s.hashes[:n])
            assert [b.block_id for b in hits] == expect
            new = min(len(s.hashes) - len(hits), pool.num_free - sum(b.ref_cnt == 0 for b in hits))
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
