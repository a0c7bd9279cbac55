"""Paged KV blocks, the LRU free queue and the prefix-cache map (vLLM ``block_pool.py``).

Invariants
- Block 0 is the null block: taken at construction, never freed, never counted as usable.
- A block is in the free queue iff its ``ref_cnt`` is 0. ``ref_cnt`` is changed only here.
- ``block_hash`` is set iff the block's content is published: it is either the primary
  block of its hash in ``cached`` or one of that hash's later ``copies`` (two blocks can
  hold the same content, e.g. a recomputed last block). Lookups return the primary; when
  it is evicted the oldest copy takes its place (vLLM keeps every copy per hash and
  evicts by block id).
- Free-queue order is eviction order: ``popleft`` takes the least recently freed block.
  vLLM 0.19 appends every freed block to the tail; callers free a request's blocks in
  reverse so its tail is evicted before its prefix. Blocks whose content was dropped
  (``evict``) carry nothing worth keeping, so they go to the head and are reused first.
- ``entry_refs`` counts the references retained KV entries hold (a part of ``ref_cnt``;
  the KV cache manager takes them with ``pin`` and drops them with ``free_blocks(...,
  pinned=True)``). ``entry_only`` is kept equal to the number of blocks with
  ``0 < entry_refs == ref_cnt``: what releasing every entry would free, without a walk.
- Blocks are created on first use (``FreeBlockQueue.fresh``): a pool costs O(1) until its
  blocks are needed, so idle instances of a large cluster cost almost nothing, with the same
  order and results as a pool whose blocks all exist from the start.
"""
from __future__ import annotations

from typing import Callable, Iterable, Optional


class KVBlock:
    __slots__ = ("block_id", "ref_cnt", "entry_refs", "block_hash", "prev_free", "next_free")

    def __init__(self, block_id: int):
        self.block_id = block_id
        self.ref_cnt = 0
        self.entry_refs = 0     # of ref_cnt, the references retained entries hold
        self.block_hash: Optional[int] = None
        self.prev_free: Optional["KVBlock"] = None   # only touched by FreeBlockQueue
        self.next_free: Optional["KVBlock"] = None

    def __repr__(self) -> str:
        return f"KVBlock({self.block_id}, ref={self.ref_cnt}, hash={'y' if self.block_hash is not None else 'n'})"


class FreeBlockQueue:
    """Doubly linked list with sentinels: O(1) popleft, append, appendleft and remove.

    ``FreeBlockQueue.fresh(n, make)`` holds blocks 0 .. n-1 in id order without creating
    them: one marker node stands in the list for the never-used blocks ``_fresh_lo`` ..
    ``_fresh_hi - 1``, and a ``popleft`` that reaches it creates the next one with
    ``make(id)``. Blocks enter the list only at its ends, so the never-used blocks stay one
    run, in id order, exactly where a list of real blocks would hold them: the order is the
    same, and the cost is O(blocks used), not O(blocks).
    """

    __slots__ = ("head", "tail", "num_free", "_marker", "_fresh_lo", "_fresh_hi", "_make")

    def __init__(self, blocks: Iterable[KVBlock]):
        self.head = KVBlock(-1)
        self.tail = KVBlock(-2)
        self.head.next_free = self.tail
        self.tail.prev_free = self.head
        self.num_free = 0
        self._marker: Optional[KVBlock] = None      # None: no never-used blocks left
        self._fresh_lo = self._fresh_hi = 0
        self._make: Optional[Callable[[int], KVBlock]] = None
        for b in blocks:
            self.append(b)

    @classmethod
    def fresh(cls, n: int, make: Callable[[int], KVBlock]) -> "FreeBlockQueue":
        """Blocks 0 .. n-1 free in id order, each created by ``make(id)`` when first taken."""
        q = cls(())
        if n > 0:
            q._marker = KVBlock(-3)
            q._fresh_lo, q._fresh_hi, q._make = 0, n, make
            q.append(q._marker)
            q.num_free = n
        return q

    def append(self, block: KVBlock) -> None:
        last = self.tail.prev_free
        last.next_free = block
        block.prev_free = last
        block.next_free = self.tail
        self.tail.prev_free = block
        self.num_free += 1

    def appendleft(self, block: KVBlock) -> None:
        first = self.head.next_free
        self.head.next_free = block
        block.prev_free = self.head
        block.next_free = first
        first.prev_free = block
        self.num_free += 1

    def popleft(self) -> KVBlock:
        block = self.head.next_free
        if block is self._marker:
            return self._pop_fresh()
        if block is self.tail:
            raise RuntimeError("no free blocks")
        self.remove(block)
        return block

    def _pop_fresh(self) -> KVBlock:
        i = self._fresh_lo
        self._fresh_lo = i + 1
        if self._fresh_lo == self._fresh_hi:        # the last never-used block: drop the marker
            marker, self._marker = self._marker, None
            marker.prev_free.next_free = marker.next_free
            marker.next_free.prev_free = marker.prev_free
        self.num_free -= 1
        return self._make(i)

    def remove(self, block: KVBlock) -> None:
        prev, nxt = block.prev_free, block.next_free
        prev.next_free = nxt
        nxt.prev_free = prev
        block.prev_free = block.next_free = None
        self.num_free -= 1

    def block_ids(self) -> list[int]:
        out, b = [], self.head.next_free
        while b is not self.tail:
            if b is self._marker:
                out.extend(range(self._fresh_lo, self._fresh_hi))
            else:
                out.append(b.block_id)
            b = b.next_free
        return out


class BlockPool:
    """Owns every block, their reference counts, the free queue and the content map."""

    __slots__ = ("num_blocks", "_blocks", "free_queue", "cached", "copies", "enable_caching",
                 "null_block", "drop_epoch", "free_epoch", "entry_only")

    def __init__(self, num_blocks: int, enable_caching: bool = True):
        if num_blocks < 2:
            raise ValueError("the KV pool needs at least 2 blocks (one is the null block)")
        self.num_blocks = num_blocks
        self._blocks: list[KVBlock] = []            # blocks 0 .. len - 1 exist
        self.free_queue = FreeBlockQueue.fresh(num_blocks, self._block)
        self.cached: dict[int, KVBlock] = {}
        self.copies: dict[int, list[KVBlock]] = {}
        self.enable_caching = enable_caching
        self.null_block = self.free_queue.popleft()
        self.null_block.ref_cnt = 1
        self.drop_epoch = 0     # counts content drops: cached lookups stay valid while unchanged
        self.free_epoch = 0     # counts frees: a failed admission stays failed while unchanged
        self.entry_only = 0     # blocks only retained entries hold (0 < entry_refs == ref_cnt)

    def _block(self, i: int) -> KVBlock:
        """Block ``i``, created now unless ``blocks`` already did (the queue takes never-used
        blocks in id order, so ``i`` is the next one to create)."""
        blocks = self._blocks
        if i < len(blocks):
            return blocks[i]
        if i != len(blocks):
            raise RuntimeError(f"block {i} created out of order ({len(blocks)} exist)")
        block = KVBlock(i)
        blocks.append(block)
        return block

    @property
    def blocks(self) -> list[KVBlock]:
        """Every block by id, creating the never-used ones (O(num_blocks): checks and tests)."""
        blocks = self._blocks
        while len(blocks) < self.num_blocks:
            blocks.append(KVBlock(len(blocks)))
        return blocks

    @property
    def num_free(self) -> int:
        return self.free_queue.num_free

    @property
    def num_usable(self) -> int:
        return self.num_blocks - 1

    def usage(self) -> float:
        """vLLM's KV usage: cached-but-unreferenced blocks count as free."""
        return 1.0 - self.free_queue.num_free / (self.num_blocks - 1)

    def get_cached_block(self, block_hash: int) -> Optional[KVBlock]:
        return self.cached.get(block_hash)

    def get_new_blocks(self, n: int) -> list[KVBlock]:
        if n > self.free_queue.num_free:
            raise RuntimeError(f"asked for {n} blocks with {self.free_queue.num_free} free")
        out = []
        popleft = self.free_queue.popleft
        for _ in range(n):
            block = popleft()
            if block.block_hash is not None:
                self._drop_content(block)
            block.ref_cnt = 1
            out.append(block)
        return out

    def touch(self, blocks: Iterable[KVBlock]) -> None:
        """Take a reference on cache hits; an unreferenced hit leaves the free queue."""
        remove = self.free_queue.remove
        for block in blocks:
            r = block.ref_cnt
            if r == 0:
                remove(block)
            elif r == block.entry_refs:     # held by entries alone until now
                self.entry_only -= 1
            block.ref_cnt = r + 1

    def pin(self, blocks: Iterable[KVBlock]) -> None:
        """A retained entry takes over one reference of each block (``ref_cnt`` unchanged)."""
        delta = 0
        for block in blocks:
            e = block.entry_refs
            r = block.ref_cnt
            if e and r == e:
                delta -= 1
            e += 1
            block.entry_refs = e
            if r == e:
                delta += 1
        self.entry_only += delta

    def free_blocks(self, ordered: Iterable[KVBlock], drop_content: bool = False,
                    pinned: bool = False) -> None:
        """Drop one reference from each block, in the given (eviction) order; ``pinned``:
        the references are a retained entry's."""
        queue = self.free_queue
        self.free_epoch += 1
        delta = 0
        for block in ordered:
            r = block.ref_cnt - 1
            block.ref_cnt = r
            if pinned:
                block.entry_refs -= 1
                if r == 0:                  # the entry was its last holder
                    delta -= 1
            elif r and r == block.entry_refs:   # entries alone hold it now
                delta += 1
            if r == 0:
                if drop_content and block.block_hash is not None:
                    self._drop_content(block)
                    queue.appendleft(block)
                else:
                    queue.append(block)
        self.entry_only += delta

    def cache_block(self, block: KVBlock, block_hash: int) -> None:
        if block.block_hash is not None or not self.enable_caching:
            return
        block.block_hash = block_hash
        primary = self.cached.setdefault(block_hash, block)
        if primary is not block:
            self.copies.setdefault(block_hash, []).append(block)

    def _drop_content(self, block: KVBlock) -> None:
        self.drop_epoch += 1
        h = block.block_hash
        block.block_hash = None
        if self.cached.get(h) is block:
            copies = self.copies.get(h)
            if copies:
                self.cached[h] = copies.pop(0)
                if not copies:
                    del self.copies[h]
            else:
                del self.cached[h]
        else:
            copies = self.copies[h]
            copies.remove(block)
            if not copies:
                del self.copies[h]

    def check_invariants(self) -> None:
        """Conservation checks used by tests (O(num_blocks))."""
        in_queue = set(self.free_queue.block_ids())
        assert len(in_queue) == self.free_queue.num_free
        for b in self.blocks[1:]:
            assert b.ref_cnt >= 0, b
            assert 0 <= b.entry_refs <= b.ref_cnt, b
            assert (b.ref_cnt == 0) == (b.block_id in in_queue), b
            if b.block_hash is not None:
                assert self.cached.get(b.block_hash) is b or b in self.copies.get(b.block_hash, ()), b
        assert self.entry_only == sum(1 for b in self.blocks[1:] if 0 < b.entry_refs == b.ref_cnt)
        for h, b in self.cached.items():
            assert b.block_hash == h
        for h, bs in self.copies.items():
            assert bs and h in self.cached and all(b.block_hash == h for b in bs)
