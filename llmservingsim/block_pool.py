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
- An entry that pins blocks while no block has two references (``num_multi == 0``) holds
  blocks only the finishing request held (``ref_cnt == 1``, ``entry_refs == 0``); it takes
  them over *lazily*: they are listed in ``lazy_pins`` and counted in ``entry_only``, their
  ``entry_refs`` left 0 (one entry reference each, not yet written). While listed, each
  such block keeps ``ref_cnt == 1`` (the entry is its only holder): a second holder can only
  come by ``touch`` (or ``hit_counts`` reads one), and a hit with ``ref_cnt > 0`` first
  writes every lazy reference (``materialize``), as does a pinned ``free_blocks``. ``unpin``
  of a still-lazy entry frees all its blocks without reading their counts. ``entry_refs_of``
  gives the count with the lazy reference.
- Blocks are created on first use (``FreeBlockQueue.fresh``): a pool costs O(1) until its
  blocks are needed, so idle instances of a large cluster cost almost nothing, with the same
  order and results as a pool whose blocks all exist from the start.
- A hash's primary block changes only when that block's content is dropped (``cached[h]``
  is otherwise only added by a publish). ``PrefixMemo`` builds on that: a token stream's
  memo lists the primaries of its leading hashes, and every drop of one of them cuts the
  memo back (through the block's ``memo`` / ``memo_pos`` back-pointer; a pure identity's
  memo and place follow from the identity, ``tokens.pure_place``), so a prefix lookup
  reads the memo instead of looking its hashes up again, with the same result.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from itertools import islice
from typing import Callable, Iterable, Iterator, Optional

from .tokens import PLACE_MASK, STREAM_BASE, STREAM_SHIFT, pure_base, pure_place


# empty places a free queue tolerates beyond twice its free blocks before compacting its runs
COMPACT_SLACK = 1024
# takes of more blocks than this look for memo tails to drop as runs (BlockPool._take_runs)
BULK = 32
# places a pure memo's map grows by past a one-block publication's (a decode publishes its
# stream's next block, one at a time), so most of them find their place already there
MAP_AHEAD = 16


class KVBlock:
    __slots__ = ("block_id", "ref_cnt", "entry_refs", "block_hash", "free_run", "memo", "memo_pos")

    def __init__(self, block_id: int):
        self.block_id = block_id
        self.ref_cnt = 0
        self.entry_refs = 0     # of ref_cnt, the references retained entries hold
        self.block_hash: Optional[int] = None
        self.free_run: Optional["_Run"] = None   # only touched by FreeBlockQueue
        # the memo that last listed it, at memo_pos (not written for pure identities)
        self.memo: Optional["PrefixMemo"] = None
        self.memo_pos = 0

    def __repr__(self) -> str:
        return f"KVBlock({self.block_id}, ref={self.ref_cnt}, hash={'y' if self.block_hash is not None else 'n'})"


class _Run:
    """Blocks that entered the free queue together, in queue order, read from ``pos`` on.
    ``blocks[i]`` (i >= pos) is in the queue iff its ``free_run`` is this run: a block taken
    out of the middle (a cache hit) only forgets its run, and when it is freed again it
    joins a new run, so its old place reads as empty. A block taken from the front keeps
    naming the run (its place is behind ``pos``, never read again). ``live`` counts the
    blocks in the queue: when it is ``len(blocks) - pos`` the run has no empty place and
    the front takes a slice of it without reading a block."""
    __slots__ = ("blocks", "pos", "live")

    def __init__(self, blocks: list):
        self.blocks = blocks
        self.pos = 0
        self.live = len(blocks)


class _FreshRun:
    """Never-used blocks ``lo .. hi - 1`` in id order, created by ``make(lo, hi)`` (a list of
    those blocks) when taken."""
    __slots__ = ("lo", "hi", "make")

    def __init__(self, lo: int, hi: int, make: Callable[[int, int], list]):
        self.lo, self.hi, self.make = lo, hi, make


class FreeBlockQueue:
    """The free blocks in eviction order: a deque of runs (``_Run``), a run per batch of
    blocks freed together (a request's or an entry's blocks, in one call), so freeing,
    taking and the hits of a whole context cost a list operation per batch and an
    attribute write per block, not a linked-list splice per block.

    Order: runs front to back, each run's live blocks in order. ``popleft`` / ``popleft_n``
    take from the front, ``append`` / ``extend`` add a run at the back, ``appendleft`` /
    ``extendleft`` a run at the front, ``remove`` takes a block out of any place (O(1): its
    place is left empty and skipped when the front reaches it). When adding makes the places
    (live or empty) exceed ``2 * num_free + compact_slack`` the runs are rewritten without
    the empty ones, so memory stays O(blocks) however often blocks cycle, and each empty
    place is skipped or dropped once.

    ``FreeBlockQueue.fresh(n, make)`` holds blocks 0 .. n-1 in id order without creating
    them (one ``_FreshRun``): blocks enter only at the ends, so the never-used blocks stay
    one run, in id order, exactly where a queue of real blocks would hold them: the order is
    the same, and the cost is O(blocks used), not O(blocks).
    """

    __slots__ = ("runs", "num_free", "_places", "compact_slack")

    def __init__(self, blocks: Iterable[KVBlock]):
        self.runs: deque = deque()
        self.num_free = 0
        self._places = 0            # places in runs at or after their pos (live or empty)
        self.compact_slack = COMPACT_SLACK
        self.extend(list(blocks))

    @classmethod
    def fresh(cls, n: int, make: Callable[[int, int], list]) -> "FreeBlockQueue":
        """Blocks 0 .. n-1 free in id order, created when first taken: ``make(lo, hi)``
        returns blocks ``lo .. hi - 1``."""
        q = cls(())
        if n > 0:
            q.runs.append(_FreshRun(0, n, make))
            q.num_free = n
        return q

    # ---- adding ------------------------------------------------------------------------
    def extend(self, blocks: list) -> None:
        """Add ``blocks`` at the back, in this order."""
        self._add(blocks, self.runs.append)

    def extendleft(self, blocks: list) -> None:
        """Add ``blocks`` at the front, in this order (``blocks[0]`` is taken first)."""
        self._add(blocks, self.runs.appendleft)

    def _add(self, blocks: list, place) -> None:
        if blocks:
            run = _Run(blocks)
            for b in blocks:
                b.free_run = run
            self._place(run, place)

    def open_run(self) -> _Run:
        """An empty run for a caller that frees blocks one by one: it appends each to
        ``run.blocks`` and sets its ``free_run`` to the run as it goes (one pass over the
        blocks instead of two), then hands it to ``close_run``."""
        return _Run([])

    def close_run(self, run: _Run) -> None:
        """Add an ``open_run`` run, filled, at the back."""
        if run.blocks:
            run.live = len(run.blocks)
            self._place(run, self.runs.append)

    def _place(self, run: _Run, place) -> None:
        place(run)
        self.num_free += run.live
        self._places += run.live
        if self._places > 2 * self.num_free + self.compact_slack:
            self._compact()

    def append(self, block: KVBlock) -> None:
        self.extend([block])

    def appendleft(self, block: KVBlock) -> None:
        self.extendleft([block])

    # ---- taking ------------------------------------------------------------------------
    def remove(self, block: KVBlock) -> None:
        """Take ``block`` (free) out of its place."""
        self.take([block])

    def take(self, blocks: list) -> None:
        """Take these free blocks out of their places (a context's cache hits at once)."""
        for b in blocks:
            b.free_run.live -= 1
            b.free_run = None
        self.num_free -= len(blocks)

    def take_tail(self, run: _Run, k: int) -> None:
        """Take the last ``k`` places of ``run``, all live (BlockPool._free_tail found them),
        out of the queue with their blocks; the run leaves the queue when no place is left.
        The blocks' stale ``free_run`` is not cleared: the caller references them, and a
        referenced block's ``free_run`` is never read (as a block taken from a run's front)."""
        del run.blocks[-k:]
        run.live -= k
        self._places -= k
        self.num_free -= k
        if not run.live:
            runs = self.runs
            if runs[-1] is run:
                runs.pop()
            else:
                runs.remove(run)
            run.blocks = []

    def popleft(self) -> KVBlock:
        if not self.num_free:
            raise RuntimeError("no free blocks")
        return self.popleft_n(1)[0]

    def popleft_n(self, n: int) -> list[KVBlock]:
        """The first ``n`` free blocks, taken out of the queue (the caller has checked that
        there are ``n``)."""
        runs = self.runs
        if n == 1:      # a decode's next block (most takes): the front run's front place, if live
            run = runs[0]
            if type(run) is _Run:
                blocks, pos = run.blocks, run.pos
                b = blocks[pos]
                if b.free_run is run:
                    pos += 1
                    run.pos = pos
                    run.live -= 1
                    self._places -= 1
                    self.num_free -= 1
                    if pos == len(blocks):
                        runs.popleft()
                        run.blocks = []
                    return [b]
        out: list[KVBlock] = []
        places = self._places
        while len(out) < n:
            run = runs[0]
            if type(run) is _FreshRun:
                k = min(n - len(out), run.hi - run.lo)
                out += run.make(run.lo, run.lo + k)
                run.lo += k
                if run.lo == run.hi:
                    runs.popleft()
                continue
            blocks, pos = run.blocks, run.pos
            end = len(blocks)
            if run.live == end - pos:       # no empty place: a slice
                k = min(n - len(out), end - pos)
                out += blocks[pos:pos + k]
                run.live -= k
                pos += k
            else:
                got = len(out)
                while pos < end:
                    b = blocks[pos]
                    pos += 1
                    if b.free_run is run:
                        out.append(b)
                        if len(out) == n:
                            break
                run.live -= len(out) - got
            places -= pos - run.pos
            run.pos = pos
            if pos == end:
                runs.popleft()
                run.blocks = []         # its blocks may still name it: hold nothing
        self._places = places
        self.num_free -= n
        return out

    # ---- reading -----------------------------------------------------------------------
    def block_ids(self) -> list[int]:
        out = []
        for run in self.runs:
            if type(run) is _FreshRun:
                out.extend(range(run.lo, run.hi))
            else:
                out.extend(b.block_id for b in run.blocks[run.pos:] if b.free_run is run)
        return out

    def _compact(self) -> None:
        """Rewrite the runs without their empty places (same order)."""
        kept: deque = deque()
        places = 0
        for run in self.runs:
            if type(run) is not _FreshRun:
                if run.live < len(run.blocks) - run.pos:
                    run.blocks = [b for b in run.blocks[run.pos:] if b.free_run is run]
                elif run.pos:
                    run.blocks = run.blocks[run.pos:]
                run.pos = 0
                if not run.blocks:
                    continue
                places += len(run.blocks)
            kept.append(run)
        self.runs = kept
        self._places = places


class PrefixMemo:
    """What one token stream's leading block hashes resolve to in one pool, kept so that a
    prefix lookup (every admission check of a waiting request, and each call of a program,
    whose prompt extends the context its previous call published) need not look them up again.

    Invariant: for every ``i < valid``, ``blocks[i]`` is ``cached[hashes[i]]`` (the primary
    of the stream's i-th hash), and, in a memo that is not pure, ``blocks[i].memo is self``
    and ``blocks[i].memo_pos == i``; places from ``valid`` on are stale. ``hashes`` is the stream's hash chain (read by checks,
    and by a large take for the hashes of the listed blocks it drops). The pool keeps this
    true at the only events that can break it: a listed block's content is dropped (``valid``
    is cut back to its place: a hash's primary changes only when it is dropped), and another
    memo lists the block (it is first cut out of this one).
    ``cuts`` counts those cuts: while it is unchanged, ``blocks[:k]`` for any k at most
    ``valid`` are the same blocks (places are only appended after ``valid``).

    A *pure* memo (``base`` set: the memo of a pure stream's uid, ``tokens.TokenStream``,
    whose block b's identity is ``base + b``; the streams of one uid share it) also holds
    the prefix map of those identities in its pool, which ``cached`` does not hold:
    ``slots[b]`` is the primary of ``base + b`` or None, for every b (beyond the list: None;
    the list always ends in a None, so ``slots.index(None, k)`` finds the end of a
    published run). So ``blocks[i] is slots[i]`` for ``i < valid``. A primary's place
    and memo follow from its identity (``tokens.pure_place``: the uid's memo in
    ``BlockPool.pure_memos``, place b), so its ``memo`` / ``memo_pos`` are not written (they
    are stale: a drop reads the identity). Publishing a span of identities is a slice
    assignment after a check in C that none is published and a write of each block's
    identity, a lookup is a slice, and dropping a run of places is one slice assignment.
    ``mixed`` (the number of leading identities of a pure stream in the chain of a stream
    that is not pure: a fork of one): such a memo lists nothing (``valid`` stays 0); its
    lookups read the pure stream's map, then ``cached``."""
    __slots__ = ("blocks", "valid", "hashes", "cuts", "base", "slots", "mixed")

    def __init__(self, hashes: Optional[list], base: Optional[int] = None, mixed: int = 0):
        self.blocks: list[KVBlock] = []
        self.valid = 0
        self.hashes = hashes
        self.cuts = 0
        self.base = base
        self.slots: Optional[list] = None if base is None else [None]
        self.mixed = mixed

    def cut(self, block: KVBlock) -> None:
        """``block`` (whose ``memo`` is this one) stops being listed: cut back to its place
        if it is in the listed prefix (a stale back-pointer is ignored)."""
        p = block.memo_pos
        if p < self.valid and self.blocks[p] is block:
            self.valid = p
            self.cuts += 1


class _CachedView(Mapping):
    """``BlockPool.cached``: every published identity's primary, the hashed identities'
    dict and the pure memos' maps together (read by checks and tests)."""

    def __init__(self, pool: "BlockPool"):
        self._pool = pool

    def __getitem__(self, h):
        b = self._pool.get_cached_block(h)
        if b is None:
            raise KeyError(h)
        return b

    def __iter__(self) -> Iterator[int]:
        yield from self._pool._hashed
        for memo in self._pool.pure_memos.values():
            base = memo.base
            for b, block in enumerate(memo.slots):
                if block is not None:
                    yield base + b

    def __len__(self) -> int:
        pool = self._pool
        return len(pool._hashed) + sum(len(m.slots) - m.slots.count(None)
                                       for m in pool.pure_memos.values())

    def __contains__(self, h) -> bool:
        return self._pool.get_cached_block(h) is not None


def _reversed_match(out: list, i: int, listed: list, p: int) -> int:
    """The largest k with ``out[i + j] is listed[p - j]`` for every j < k (``out[i] is
    listed[p]``), found with list comparisons of chunks growing 4x (shrinking after a
    mismatch), so O(k) identity checks in C."""
    limit = min(len(out) - i, p + 1)
    k = 1
    step = 8
    while k < limit:
        s = min(step, limit - k)
        a = p + 1 - k - s
        if out[i + k:i + k + s] == listed[a:a + s][::-1]:
            k += s
            step *= 4
        elif s == 1:
            break
        else:
            step = max(s // 4, 1)
    return k


def _take_rest(out: list, i: int, k: int, it) -> int:
    """A run of ``k`` taken blocks from ``out[i]`` (referenced already) dropped as one: each
    loses its content, the rest are referenced, and ``it`` (over ``out``, at ``i``) skips past
    them; returns the run's last index."""
    out[i].block_hash = None
    if k > 1:
        for b in out[i + 1:i + k]:
            b.ref_cnt = 1
            b.block_hash = None
        next(islice(it, k - 2, None), None)     # past the run (in C)
    return i + k - 1


class BlockPool:
    """Owns every block, their reference counts, the free queue and the content map."""

    __slots__ = ("num_blocks", "_blocks", "free_queue", "_hashed", "copies", "enable_caching",
                 "null_block", "drop_epoch", "free_epoch", "entry_only", "num_multi", "lazy_pins",
                 "pure_memos")

    def __init__(self, num_blocks: int, enable_caching: bool = True):
        if num_blocks < 2:
            raise ValueError("the KV pool needs at least 2 blocks (one is the null block)")
        self.num_blocks = num_blocks
        self._blocks: list[KVBlock] = []            # blocks 0 .. len - 1 exist
        self.free_queue = FreeBlockQueue.fresh(num_blocks, self._new_blocks)
        # the prefix map: hashed identities here, a pure stream's in its memo (PrefixMemo)
        self._hashed: dict[int, KVBlock] = {}
        self.pure_memos: dict[int, PrefixMemo] = {}     # uid -> the pure memo of that uid
        self.copies: dict[int, list[KVBlock]] = {}
        self.enable_caching = enable_caching
        self.null_block = self.free_queue.popleft()
        self.null_block.ref_cnt = 1
        self.drop_epoch = 0     # changes with every batch of content drops
        self.free_epoch = 0     # counts frees: a failed admission stays failed while unchanged
        self.entry_only = 0     # blocks only retained entries hold (0 < entry_refs == ref_cnt)
        self.num_multi = 0      # blocks with ref_cnt >= 2
        self.lazy_pins: dict[int, list[KVBlock]] = {}    # id(blocks) -> an entry's lazy blocks

    def _new_blocks(self, lo: int, hi: int) -> list[KVBlock]:
        """Blocks ``lo .. hi - 1``, created now unless ``blocks`` already did (the queue takes
        never-used blocks in id order, so ``lo`` is at most the next one to create)."""
        blocks = self._blocks
        n = len(blocks)
        if lo > n:
            raise RuntimeError(f"block {lo} created out of order ({n} exist)")
        if hi > n:
            blocks.extend(map(KVBlock, range(n, hi)))
        return blocks[lo:hi]

    @property
    def blocks(self) -> list[KVBlock]:
        """Every block by id, creating the never-used ones (O(num_blocks): checks and tests)."""
        self._new_blocks(len(self._blocks), self.num_blocks)
        return self._blocks

    @property
    def num_free(self) -> int:
        return self.free_queue.num_free

    @property
    def num_usable(self) -> int:
        return self.num_blocks - 1

    def usage(self) -> float:
        """vLLM's KV usage: cached-but-unreferenced blocks count as free."""
        return 1.0 - self.free_queue.num_free / (self.num_blocks - 1)

    @property
    def cached(self) -> _CachedView:
        """Every published identity's primary (a read-only mapping; checks and tests)."""
        return _CachedView(self)

    def get_cached_block(self, block_hash: int) -> Optional[KVBlock]:
        """The primary of ``block_hash``, or None."""
        if block_hash >= STREAM_BASE:
            uid, b = pure_place(block_hash)
            memo = self.pure_memos.get(uid)
            if memo is None:
                return None
            slots = memo.slots
            return slots[b] if b < len(slots) else None
        return self._hashed.get(block_hash)

    def _pure_memo(self, uid: int) -> PrefixMemo:
        """The pure memo of ``uid`` (created empty if none)."""
        memo = self.pure_memos.get(uid)
        if memo is None:
            memo = self.pure_memos[uid] = PrefixMemo(None, pure_base(uid))
        return memo

    def get_new_blocks(self, n: int) -> list[KVBlock]:
        if n > self.free_queue.num_free:
            raise RuntimeError(f"asked for {n} blocks with {self.free_queue.num_free} free")
        out = self.free_queue.popleft_n(n)
        if n > BULK:
            self._take_runs(out)
            return out
        # one pass: each block's reference, and its content dropped (_drop_contents, inlined:
        # most popped blocks still hold content, usually the only block of their hash)
        hashed = self._hashed
        copies = self.copies
        pure_memos = self.pure_memos
        dropped = False
        for block in out:
            block.ref_cnt = 1
            h = block.block_hash
            if h is not None:
                dropped = True
                if copies and h in copies:
                    self._drop_contents((block,), bump=False)
                    continue
                block.block_hash = None
                if h >= STREAM_BASE:    # a pure identity's primary: its place in its map
                    x = h - STREAM_BASE     # (tokens.pure_place, written out: a hot path)
                    memo = pure_memos[x >> STREAM_SHIFT]
                    p = x & PLACE_MASK
                    memo.slots[p] = None
                else:
                    del hashed[h]
                    memo = block.memo
                    if memo is None:
                        continue
                    p = block.memo_pos
                if p < memo.valid and memo.blocks[p] is block:      # PrefixMemo.cut, inlined
                    memo.valid = p
                    memo.cuts += 1
        if dropped:
            self.drop_epoch += 1
        return out

    def take_for_decodes(self, n: int) -> list[KVBlock]:
        """The blocks of ``n`` one-block takes in one (fast-forward's allocations of a segment,
        ``KVCacheManager.apply_decode_events``; the caller has checked that ``n`` are free),
        each referenced, its content still to drop: the caller drops it (``drop_taken``) at
        its own allocation's place among the publications, where a one-block take drops it
        (a drop and a publication of the same hash or memo do not commute). ``drop_epoch``
        changes here, once, if any of them has content (only its changes are read)."""
        out = self.free_queue.popleft_n(n)
        content = False
        for block in out:
            block.ref_cnt = 1
            if block.block_hash is not None:
                content = True
        if content:
            self.drop_epoch += 1
        return out

    def drop_taken(self, block: KVBlock) -> None:
        """Drop the content of ``block`` (taken by ``take_for_decodes``; it has content), as
        ``get_new_blocks`` drops a taken block's (its batch counted by the take)."""
        self._drop_contents((block,), bump=False)

    def _take_runs(self, out: list[KVBlock]) -> None:
        """``get_new_blocks``'s pass over a large take ``out`` (just popped), with the same
        result block by block, but a memo's listed tail taken as one run.

        A context's blocks are freed tail first, so a large take usually meets, block after
        block, the places ``p, p - 1, .., lo`` of one memo's listed prefix (usually from its
        last place). Block by block each of them is a cut (``valid`` falls to its place,
        ``cuts`` grows by one: each place is below the one before) and its hash, the memo's
        ``hashes[j]`` (a listed block is its hash's primary), leaves ``cached``. As a run:
        the blocks are matched against the listed places with list comparisons (identity,
        in C), the hashes are deleted in one loop over the memo's hash list, and the memo is
        cut once, to ``lo`` with ``cuts += k``. A run meeting a hash with copies, and every
        block with content that is not listed, is dropped block by block (``_drop_contents``,
        in the same order; in the runs measured no such block came). A pure memo's run (its
        places ``lo .. p`` of the map, listed or not) is one slice assignment of Nones, and
        the places below ``valid`` among them are its cuts."""
        hashed = self._hashed
        copies = self.copies
        dropped = False
        it = iter(out)
        i = -1
        for block in it:
            i += 1
            block.ref_cnt = 1
            h = block.block_hash
            if h is None:
                continue
            if h >= STREAM_BASE:
                x = h - STREAM_BASE         # (tokens.pure_place, written out: a hot path)
                memo = self.pure_memos[x >> STREAM_SHIFT]
                p = x & PLACE_MASK
                slots = memo.slots
                if slots[p] is block:       # a pure identity's primary (not a copy)
                    k = _reversed_match(out, i, slots, p)
                    lo = p + 1 - k
                    base = memo.base
                    if not copies or copies.keys().isdisjoint(range(base + lo, base + p + 1)):
                        slots[lo:p + 1] = [None] * k
                        i = _take_rest(out, i, k, it)
                        v = memo.valid
                        if lo < v:      # the places below valid are listed: a cut each
                            memo.valid = lo
                            memo.cuts += min(v, p + 1) - lo
                        dropped = True
                        continue
            else:
                memo = block.memo
                if memo is not None and memo.slots is None:
                    p = block.memo_pos
                    listed = memo.blocks
                    if p < memo.valid and listed[p] is block:
                        k = _reversed_match(out, i, listed, p)
                        lo = p + 1 - k
                        hashes = memo.hashes[lo:p + 1]
                        if not copies or copies.keys().isdisjoint(hashes):
                            for h in hashes:
                                del hashed[h]
                            i = _take_rest(out, i, k, it)
                            memo.valid = lo
                            memo.cuts += k
                            dropped = True
                            continue
            self._drop_contents((block,), bump=False)     # block by block (rare)
            dropped = True
        if dropped:
            self.drop_epoch += 1

    def _free_tail(self, hits: list[KVBlock]) -> Optional[_Run]:
        """The run whose last ``len(hits)`` places hold ``hits`` in reverse order, every
        place of the run from its ``pos`` being live, or None. A program's next call hits
        the context its previous call freed (tail first, as one run), so its hits are
        usually such a tail: all of them free, found with a list comparison (identity, in
        C) instead of a look at each block."""
        first = hits[0]
        if first.ref_cnt:
            return None
        run = first.free_run
        blocks = run.blocks
        n = len(blocks)
        k = len(hits)
        if blocks[-1] is not first or run.live != n - run.pos or k > run.live:
            return None
        # every place from pos is live, so these blocks are free (ref_cnt 0)
        return run if blocks[n - k:] == hits[::-1] else None

    def touch(self, blocks: Iterable[KVBlock]) -> None:
        """Take a reference on cache hits; an unreferenced hit leaves the free queue."""
        if type(blocks) is list and blocks:
            run = self._free_tail(blocks)
            if run is not None:
                # a free run's tail: each hit's first reference, and the run loses those
                # places (FreeBlockQueue.take_tail)
                for block in blocks:
                    block.ref_cnt = 1
                self.free_queue.take_tail(run, len(blocks))
                return
        taken = 0
        entry_only = multi = 0
        lazy = self.lazy_pins
        for block in blocks:
            r = block.ref_cnt
            if r == 0:          # FreeBlockQueue.take, inlined (one pass over the hits)
                block.free_run.live -= 1
                block.free_run = None
                taken += 1
            else:
                if lazy:        # a second holder: lazy references become counts (clears it)
                    self.materialize()
                if r == 1:
                    multi += 1
                if r == block.entry_refs:       # held by entries alone until now
                    entry_only += 1
            block.ref_cnt = r + 1
        self.free_queue.num_free -= taken
        self.entry_only -= entry_only
        self.num_multi += multi

    def hit_counts(self, hits: list[KVBlock]) -> tuple[int, int]:
        """(evictable, entry-held): the hits no one references, and those only retained entries
        reference (released with the entries, they become evictable too). One pass; a
        referenced hit first has the lazy entry references written (``materialize``)."""
        if hits and self._free_tail(hits) is not None:     # all free (no lazy one is read)
            return len(hits), 0
        evictable = entry_held = 0
        lazy = self.lazy_pins
        for b in hits:
            r = b.ref_cnt
            if not r:
                evictable += 1
            else:
                if lazy:        # (materialize clears it)
                    self.materialize()
                if r == b.entry_refs:
                    entry_held += 1
        return evictable, entry_held

    def pin(self, blocks: Iterable[KVBlock]) -> None:
        """A retained entry takes over one reference of each block (``ref_cnt`` unchanged).
        The reference it takes over is not an entry's, so no block was entry-only before;
        it is after iff every reference is now an entry's. With no block referenced twice,
        each of ``blocks`` (a list the entry keeps, released with ``unpin``) has one
        reference, its request's: the entry takes them over lazily (see the invariants)."""
        if not self.num_multi and type(blocks) is list:
            self.lazy_pins[id(blocks)] = blocks
            self.entry_only += len(blocks)
            return
        delta = 0
        for block in blocks:
            e = block.entry_refs + 1
            block.entry_refs = e
            if block.ref_cnt == e:
                delta += 1
        self.entry_only += delta

    def materialize(self) -> None:
        """Write every lazy entry reference into ``entry_refs`` (``entry_only`` counts them
        already)."""
        for blocks in self.lazy_pins.values():
            for block in blocks:
                block.entry_refs += 1
        self.lazy_pins.clear()

    def entry_refs_of(self, block: KVBlock) -> int:
        """``block``'s entry references, a lazy one included (checks and tests)."""
        return block.entry_refs + sum(
            1 for blocks in self.lazy_pins.values() for b in blocks if b is block)

    def unpin(self, blocks: list[KVBlock], drop_content: bool = False) -> None:
        """Release an entry's references to ``blocks`` (the list given to ``pin``), freeing
        them tail first: ``free_blocks(reversed(blocks), drop_content, pinned=True)``. A
        still-lazy entry is the only holder of each block, so all of them are freed, as one
        run at the back."""
        if drop_content or self.lazy_pins.get(id(blocks)) is not blocks:
            self.free_blocks(reversed(blocks), drop_content, pinned=True)
            return
        del self.lazy_pins[id(blocks)]
        self.free_epoch += 1
        self.entry_only -= len(blocks)
        self._free_sole(blocks[::-1])

    def _free_sole(self, freed: list[KVBlock]) -> None:
        """Free ``freed``, each block's last reference (its one holder's), as one run at the
        queue's back in that order: what ``free_blocks``' loop does when every block it
        meets reaches ``ref_cnt == 0``, with no count but the queue's to change."""
        queue = self.free_queue
        run = queue.open_run()
        run.blocks = freed
        for block in freed:
            block.ref_cnt = 0
            block.free_run = run
        queue.close_run(run)

    def free_blocks(self, ordered: Iterable[KVBlock], drop_content: bool = False,
                    pinned: bool = False) -> None:
        """Drop one reference from each block, in the given (eviction) order; ``pinned``:
        the references are a retained entry's. The blocks this frees join the queue's back
        in that order, or, with ``drop_content``, those that had content its front (the
        last freed first, as one ``appendleft`` each would place them)."""
        self.free_epoch += 1
        if not self.num_multi and not pinned and not drop_content:
            # no block has two references: each of these (a request's, held) has one, so
            # every one is freed and no count but the queue's changes (the loop below, with
            # no branch taken but the first)
            self._free_sole(list(ordered))
            return
        if pinned and self.lazy_pins:
            self.materialize()
        if drop_content:        # queued below, once it is known which keep content
            freed = []
            queue = run = None
        else:       # the usual case: the freed blocks form one run at the back, built here
            queue = self.free_queue
            run = queue.open_run()
            freed = run.blocks
        if pinned:
            # a block the entry held last was entry-only (ref_cnt == entry_refs == 1); one
            # that stays held changes ref_cnt and entry_refs alike, so stays what it was
            multi = 0
            for block in ordered:
                r = block.ref_cnt - 1
                block.ref_cnt = r
                block.entry_refs -= 1
                if not r:
                    freed.append(block)
                    block.free_run = run
                elif r == 1:
                    multi += 1
            self.entry_only -= len(freed)
            self.num_multi -= multi
        else:
            delta = multi = 0
            for block in ordered:
                r = block.ref_cnt - 1
                block.ref_cnt = r
                if not r:
                    freed.append(block)
                    block.free_run = run
                else:
                    if r == 1:
                        multi += 1
                    if r == block.entry_refs:   # entries alone hold it now (none lazily:
                        delta += 1              # a lazy block has no second holder)
            self.entry_only += delta
            self.num_multi -= multi
        if queue is not None:
            queue.close_run(run)
            return
        front = [b for b in freed if b.block_hash is not None]
        if front:
            freed = [b for b in freed if b.block_hash is None]
            self._drop_contents(front)
            front.reverse()
            self.free_queue.extendleft(front)
        self.free_queue.extend(freed)

    def cache_block(self, block: KVBlock, block_hash: int) -> None:
        self.cache_blocks((block,), (block_hash,))

    def _publish(self, block: KVBlock, h: int) -> None:
        """Publish ``block`` (without content) under ``h``, any identity, listed by no memo
        but a pure memo's map (the path of publications without a memo or a mixed one's)."""
        block.block_hash = h
        if h >= STREAM_BASE:
            uid, b = pure_place(h)
            memo = self._pure_memo(uid)
            slots = memo.slots
            if len(slots) < b + 2:      # the map ends in a None
                slots += [None] * (b + 2 - len(slots))
            if slots[b] is None:
                slots[b] = block
                return
        elif self._hashed.setdefault(h, block) is block:
            return
        self.copies.setdefault(h, []).append(block)

    def cache_blocks(self, blocks: list[KVBlock], hashes: list[int],
                     memo: Optional[PrefixMemo] = None, start: int = 0) -> None:
        """Publish each block under the hash beside it; a block that already has content
        keeps it. ``memo``: the blocks are its stream's blocks ``start ..``; while they
        continue its listed prefix as primaries, it lists them (a block without content
        is in no memo's listed prefix, so none loses it)."""
        if not self.enable_caching:
            return
        if memo is not None:
            if memo.base is not None:
                self._publish_pure(blocks, hashes, memo, start)
                return
            if memo.mixed:
                memo = None
        if memo is None:
            for block, block_hash in zip(blocks, hashes):
                if block.block_hash is None:
                    self._publish(block, block_hash)
            return
        setdefault = self._hashed.setdefault
        pairs = zip(blocks, hashes)
        if memo.valid == start:
            i = start
            for block, block_hash in pairs:
                if block.block_hash is not None:
                    break
                block.block_hash = block_hash
                if setdefault(block_hash, block) is not block:
                    self.copies.setdefault(block_hash, []).append(block)
                    break
                block.memo = memo
                block.memo_pos = i
                i += 1
            listed = memo.blocks
            del listed[start:]
            listed += blocks[:i - start]
            memo.valid = i
        for block, block_hash in pairs:     # the rest: published, not listed
            if block.block_hash is None:
                block.block_hash = block_hash
                if setdefault(block_hash, block) is not block:
                    self.copies.setdefault(block_hash, []).append(block)

    def _publish_pure(self, blocks: list[KVBlock], hashes: list[int], memo: PrefixMemo,
                      start: int) -> None:
        """``cache_blocks`` for a pure memo's identities ``start ..``, with the same listing:
        the map's places take the blocks (one slice assignment when none of the identities
        is published and no block has content, the usual case; place by place otherwise, a
        published identity's block becoming a copy)."""
        slots = memo.slots
        end = start + len(blocks)
        if len(slots) <= end:       # the map ends in a None
            slots += [None] * (end + 1 - len(slots))
        i = start
        if not any(slots[start:end]):       # no identity published (in C)
            for block, block_hash in zip(blocks, hashes):
                if block.block_hash is not None:
                    i += blocks.index(block)        # (a request holds a block once)
                    break
                block.block_hash = block_hash
            else:
                i = end
            slots[start:i] = blocks[:i - start] if i < end else blocks
            listed_to = i
        else:
            listed_to = -1      # the listing ends at the first block not published as primary
        if i < end:
            copies = self.copies
            j = i - start
            for block, block_hash in zip(blocks[j:], hashes[j:]):
                if block.block_hash is None:
                    block.block_hash = block_hash
                    if slots[i] is None:
                        slots[i] = block
                    else:
                        copies.setdefault(block_hash, []).append(block)
                        if listed_to < 0:
                            listed_to = i
                elif listed_to < 0:
                    listed_to = i
                i += 1
            if listed_to < 0:
                listed_to = end
        if memo.valid == start:
            listed = memo.blocks
            del listed[start:]
            listed += slots[start:listed_to]
            memo.valid = listed_to

    def cache_next_block(self, block: KVBlock, block_hash: int, memo: PrefixMemo, pos: int) -> None:
        """``cache_blocks([block], [block_hash], memo, pos)`` for one block (a decode's
        completed block: most publications), without the slices and the two loops."""
        if not self.enable_caching:
            return
        slots = memo.slots
        if slots is not None:
            if block.block_hash is None:
                block.block_hash = block_hash
                if len(slots) < pos + 2:        # the map ends in a None
                    slots += [None] * (pos + 2 + MAP_AHEAD - len(slots))
                if slots[pos] is None:
                    slots[pos] = block
                    if memo.valid == pos:
                        listed = memo.blocks
                        del listed[pos:]
                        listed.append(block)
                        memo.valid = pos + 1
                    return
                self.copies.setdefault(block_hash, []).append(block)
        elif memo.mixed:
            if block.block_hash is None:
                self._publish(block, block_hash)
            return
        elif block.block_hash is None:
            block.block_hash = block_hash
            if self._hashed.setdefault(block_hash, block) is not block:
                self.copies.setdefault(block_hash, []).append(block)
            elif memo.valid == pos:
                block.memo = memo
                block.memo_pos = pos
                listed = memo.blocks
                del listed[pos:]
                listed.append(block)
                memo.valid = pos + 1
                return
        if memo.valid == pos:
            del memo.blocks[pos:]

    def memo_of(self, stream) -> PrefixMemo:
        """The stream's memo in this pool (created empty on first use): a pure stream's is
        its uid's pure memo (the map of its identities, shared by the streams of that uid)."""
        memos = stream.memos
        if memos is None:
            memos = stream.memos = {}
        memo = memos.get(self)
        if memo is None:
            base = getattr(stream, "_base", None)
            if base is not None:
                memo = self.pure_memos.get(stream.uid)
                if memo is None:
                    memo = self.pure_memos[stream.uid] = PrefixMemo(stream.block_hashes(0), base)
                elif memo.hashes is None:
                    memo.hashes = stream.block_hashes(0)
            else:
                mixed = 0       # the leading identities of a pure stream in the chain
                if getattr(stream, "_shared_blocks", 0):
                    hashes = stream.block_hashes(1)
                    while mixed < len(hashes) and hashes[mixed] >= STREAM_BASE:
                        mixed += 1
                memo = PrefixMemo(stream.block_hashes(0), mixed=mixed)
            memos[self] = memo
        return memo

    def look_up(self, memo: PrefixMemo, hashes: list, n: int) -> list[KVBlock]:
        """The primaries of ``hashes[memo.valid:n]`` up to the first hash not cached; the
        memo lists them (up to a block it lists already: a repeated hash ends its prefix)."""
        slots = memo.slots
        if slots is not None:       # a pure memo: its map's run from valid, listed as it is
            k = memo.valid
            j = slots.index(None, k)
            if j > n:
                j = n
            found = slots[k:j]
            listed = memo.blocks
            del listed[k:]
            listed += found     # (a pure primary's place is its identity's: no back-pointer)
            memo.valid = j
            return found
        k = k0 = memo.valid
        found: list[KVBlock] = []
        mixed = memo.mixed
        if mixed:       # a pure stream's identities first (one map), then hashed ones; unlisted
            slots = self._pure_memo(pure_place(hashes[0])[0]).slots
            j = min(slots.index(None), mixed, n)
            found = slots[:j]
            if j < mixed or j == n:
                return found
            k = j
        # the lookups run in C, a chunk at a time (a prompt's cached part is a prefix:
        # after the first miss nothing is looked up beyond its chunk)
        get = self._hashed.get
        chunk = 8
        while k < n:
            part = list(map(get, hashes[k:min(n, k + chunk)]))
            if None in part:
                found.extend(part[:part.index(None)])
                break
            found.extend(part)
            k += len(part)
            chunk *= 4
        if mixed:
            return found
        listed = memo.blocks
        del listed[k0:]
        i = k0
        for block in found:
            old = block.memo
            if old is not None:
                p = block.memo_pos
                if old is memo:
                    if p < i and listed[p] is block:
                        break
                else:
                    old.cut(block)
            block.memo = memo
            block.memo_pos = i
            listed.append(block)
            i += 1
        memo.valid = i
        return found

    def _drop_contents(self, blocks, bump: bool = True) -> None:
        """Unpublish these blocks (each has content): a hash's primary gives its place to the
        oldest copy; a memo listing one is cut back to its place. ``bump``: count it as a
        batch of drops (``drop_epoch``); a caller dropping more in the same batch passes
        False and counts the batch once."""
        if bump:
            self.drop_epoch += 1
        hashed = self._hashed
        copies = self.copies
        for block in blocks:
            h = block.block_hash
            block.block_hash = None
            if h >= STREAM_BASE:        # a pure identity: its memo and place are its own
                x = h - STREAM_BASE     # (tokens.pure_place, written out: a hot path)
                memo = self.pure_memos[x >> STREAM_SHIFT]
                p = x & PLACE_MASK
                if copies and h in copies:
                    self._drop_copy(block, h)
                else:                   # its primary: its map place
                    memo.slots[p] = None
                if p < memo.valid and memo.blocks[p] is block:      # PrefixMemo.cut
                    memo.valid = p
                    memo.cuts += 1
                continue
            if copies and h in copies:
                self._drop_copy(block, h)
            else:                       # the usual case: the hash's only block
                del hashed[h]
            memo = block.memo
            if memo is not None:
                memo.cut(block)

    def _drop_copy(self, block: KVBlock, h: int) -> None:
        """Unpublish ``block`` (content ``h``, already cleared on the block) of a hash that
        has copies: the primary gives its place to the oldest copy (in a pure map too)."""
        others = self.copies[h]
        if h >= STREAM_BASE:
            uid, p = pure_place(h)
            memo = self._pure_memo(uid)
            slots = memo.slots
            if slots[p] is block:       # (the caller cuts a memo listing it)
                slots[p] = others.pop(0)
            else:
                others.remove(block)
        elif self._hashed[h] is block:
            self._hashed[h] = others.pop(0)
        else:
            others.remove(block)
        if not others:
            del self.copies[h]

    def check_invariants(self) -> None:
        """Conservation checks used by tests (O(num_blocks))."""
        in_queue = set(self.free_queue.block_ids())
        assert len(in_queue) == self.free_queue.num_free
        q = self.free_queue     # places: at or after each run's pos, live or empty (fresh runs have none)
        assert q._places == sum(len(r.blocks) - r.pos for r in q.runs if type(r) is _Run), q._places
        memos = {}
        lazy: dict[int, int] = {}
        for blocks in self.lazy_pins.values():
            for b in blocks:
                assert b.ref_cnt == 1 and b.entry_refs == 0 and b.block_id not in lazy, b
                lazy[b.block_id] = 1
        assert self.num_multi == sum(1 for b in self.blocks[1:] if b.ref_cnt >= 2)
        for b in self.blocks[1:]:
            assert b.ref_cnt >= 0, b
            assert 0 <= b.entry_refs + lazy.get(b.block_id, 0) <= b.ref_cnt, b
            assert (b.ref_cnt == 0) == (b.block_id in in_queue), b
            if b.block_hash is not None:
                assert self.cached.get(b.block_hash) is b or b in self.copies.get(b.block_hash, ()), b
            if b.memo is not None:
                memos[id(b.memo)] = b.memo
        assert self.entry_only == sum(1 for b in self.blocks[1:]
                                      if 0 < b.entry_refs + lazy.get(b.block_id, 0) == b.ref_cnt)
        for h, b in self._hashed.items():
            assert b.block_hash == h and h < STREAM_BASE, (h, b)
        for uid, memo in self.pure_memos.items():
            slots = memo.slots
            assert memo.base == pure_base(uid) and slots[-1] is None
            assert memo.valid <= slots.index(None), (memo.valid, slots.index(None))
            assert memo.blocks[:memo.valid] == slots[:memo.valid]
            for p, b in enumerate(slots):
                if b is not None:
                    assert b.block_hash == memo.base + p, (b, p)
        for h, bs in self.copies.items():
            assert bs and h in self.cached and all(b.block_hash == h for b in bs)
        for memo in memos.values():
            if memo.base is not None:
                assert self.pure_memos[pure_place(memo.base)[0]] is memo
            assert not memo.mixed or memo.valid == 0
            if memo.base is not None:       # its listed prefix is its map's (checked above)
                continue
            for i in range(memo.valid):
                b = memo.blocks[i]
                assert b.memo is memo and b.memo_pos == i, (b, i)
                assert self.cached.get(memo.hashes[i]) is b, (b, i)
