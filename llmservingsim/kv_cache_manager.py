"""KV cache manager: prefix caching, slot allocation and retained KV entries.

The vLLM part (one full-attention group) follows vLLM 0.19 ``kv_cache_manager.py``:
``get_computed_blocks`` walks the chained block hashes up to ``num_tokens - 1`` tokens
(the last token is always recomputed); ``allocate_slots`` fails without touching anything
when the blocks it needs (new blocks plus cache hits that are currently evictable) exceed
the free blocks; otherwise it touches the hits, pops new blocks and publishes every full
block at schedule time, before the forward pass.

The Retention Plane part (paper §3.4) adds **KV entries**: at completion a call's blocks may
be kept referenced by an entry owned by its program, with a protection deadline d and a
value v. Until d, entries are not free (they count as used) and ordinary LRU allocation
never touches them, but they are reclaimable: when an allocation finds too few free blocks,
entries are released in ascending eviction-key order (eq. 5: lower value first; the
victim-protection hook may supply the key) until enough blocks are free. Protection is a
preference, not a lock. At d the entry expires: its blocks join the LRU free queue with their
content, i.e. expired KV is reclaimed before any protected entry (eq. 5's first component). The requester's
own program's entry is reclaimed last (its cache hits live there).

Invariants: every block referenced by a request or an entry has ``ref_cnt`` >= the number
of holders; ``req_blocks`` and ``entries`` are the only holders; free + held = usable.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from hooks import Hooks, KVEntryInfo, RETAINING_KINDS, RetentionDecision, default_eviction_key

from .block_pool import BlockPool, KVBlock
from .request import Request


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def num_evictable(hits: list[KVBlock]) -> int:
    """The hits no one references (free, so they count as blocks to find)."""
    return len([b for b in hits if not b.ref_cnt])


@dataclass(slots=True)
class KVEntry:
    """A program's retained KV (only mutated by KVCacheManager)."""
    owner: int
    blocks: list
    num_tokens: int
    created_ns: int
    deadline_ns: int
    value: Optional[float]
    seq: int
    expiry: Optional[int] = None    # the pending event of its deadline (``set_expiry``)

    def info(self, instance: int) -> KVEntryInfo:
        return KVEntryInfo(self.owner, instance, self.created_ns, self.deadline_ns, self.value,
                           len(self.blocks), self.seq)


@dataclass(slots=True)
class PrefixStats:
    queries: int = 0      # prompt tokens looked up at first admission
    hits: int = 0         # of which served from the cache


class KVCacheManager:
    tiers = None            # kv_tiers.InstanceTiers when KV tiers are configured
    # cancels a pending event (the instance's EventLoop.cancel): an entry that leaves before
    # its deadline cancels its expiry, which would do nothing, so that it does not cut a
    # fast-forwarded run short (fast_forward stops at the next event)
    cancel_event: Optional[Callable[[int], None]] = None

    def __init__(self, num_blocks: int, block_size: int = 16, enable_caching: bool = True,
                 clock: Callable[[], int] = lambda: 0, hooks: Optional[Hooks] = None,
                 instance: int = 0):
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.pool = BlockPool(num_blocks, enable_caching)
        self.req_blocks: dict[int, list[KVBlock]] = {}
        self.num_cached_blocks: dict[int, int] = {}
        self.entries: dict[int, KVEntry] = {}
        self._entry_seq = 0
        self._clock = clock
        self._hooks = hooks or Hooks()
        self.instance = instance
        self.prefix_stats = PrefixStats()
        self.num_reclaimed_entries = 0
        self.entry_epoch = 0        # counts entry creations and releases
        self._fit_fail = None       # state of the last failed admission check

    # ---- queries -------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free

    def usage(self) -> float:
        return self.pool.usage()

    def get_blocks(self, request_id: int) -> list[KVBlock]:
        return self.req_blocks.get(request_id, [])

    def get_computed_blocks(self, req: Request) -> tuple[list[KVBlock], int]:
        """Longest cached prefix of whole blocks, at most ``num_tokens - 1`` tokens."""
        if not self.enable_caching:
            return [], 0
        n = (req.num_tokens - 1) // self.block_size
        if n <= 0:
            return [], 0
        # The stream's memo lists the primaries of its leading hashes (see PrefixMemo):
        # they are this lookup's first hits, and only the hashes after them are looked up.
        # A head-of-line request is looked up every step, and a program's call extends the
        # context its previous call published (and listed), so few lookups remain.
        pool = self.pool
        memo = pool.memo_of(req.stream)
        k = memo.valid
        if k >= n:
            hits = memo.blocks[:n]
        else:
            hits = memo.blocks[:k]
            hits += pool.look_up(memo, req.stream.block_hashes(n), n)
        return hits, len(hits) * self.block_size

    # ---- allocation ----------------------------------------------------------------------
    def can_fit_full_sequence(self, req: Request, hits: list[KVBlock]) -> bool:
        """Admission gate (scheduler_reserve_full_isl): the whole current sequence must fit.
        ``hits``: the request's ``get_computed_blocks`` of this step.

        A head-of-line request is re-checked every step; while no block was freed, no entry
        created or released and its hits are the same blocks, the answer cannot change
        (allocations only lower the free count: one that pops a hit drops its content, which
        cuts the stream's memo; and a hit block taken by another request lowers free and
        evictable hits alike), so it is reused. Hits are the same blocks while the memo that
        lists them was not cut; hits beyond the memo (a repeated hash) rely on no content
        having been dropped at all."""
        pool = self.pool
        memo = pool.memo_of(req.stream) if hits else None
        if memo is not None and len(hits) <= memo.valid:
            same_hits = (memo, memo.cuts)
        else:
            same_hits = pool.drop_epoch
        key = (req.request_id, pool.free_epoch, self.entry_epoch, len(hits), same_hits)
        if key == self._fit_fail:
            return False
        ok = self._can_fit(req, hits)
        self._fit_fail = None if ok else key
        return ok

    def _can_fit(self, req: Request, hits: list[KVBlock]) -> bool:
        need = cdiv(req.num_tokens, self.block_size) - len(self.get_blocks(req.request_id)) - len(hits)
        need = max(need, 0)
        free = self.pool.num_free
        if need + len(hits) <= free:    # only otherwise can the evictable hits matter
            return True
        return self._fits(need, *self.pool.hit_counts(hits), free)

    def _fits(self, need: int, evictable: int, entry_held: int, free: int) -> bool:
        """Whether ``need`` new blocks plus the ``evictable`` hits fit in the free blocks,
        or would once every entry were released (what ``_reclaim`` can do: releasing entries
        frees exactly the blocks only entries hold, the pool's ``entry_only``, and such an
        ``entry_held`` hit becomes evictable too; the counts are ``BlockPool.hit_counts``). Each freed
        block raises the free count and a freed hit raises the need as well, so free - need
        never falls as entries go: the answer does not depend on their order (no eviction key
        is evaluated)."""
        need += evictable
        if need <= free:
            return True
        return bool(self.entries) and free + self.pool.entry_only >= need + entry_held

    def allocate_slots(self, req: Request, num_new_tokens: int,
                       hits: list[KVBlock] = (), num_hit_tokens: int = 0, publish: bool = True) -> bool:
        """Reserve blocks for ``num_new_tokens`` more tokens (after ``hits``); publish full
        blocks (``publish=False``: not yet, their content is still to arrive: a kv_tiers load's
        destination or a P/D decode leg's, published when it lands). Returns False, with
        nothing touched, when the blocks cannot be found."""
        held = self.req_blocks.get(req.request_id)
        num_held = len(held) if held is not None else 0
        total = req.num_computed_tokens + num_hit_tokens + num_new_tokens
        if num_new_tokens == 1 and not hits and total <= num_held * self.block_size:
            # a decode inside its last block: nothing to allocate; a block can only become
            # publishable here when this token completes it
            if total % self.block_size == 0:
                self.cache_blocks(req, min(total, req.num_tokens))
            return True
        num_new_blocks = max(cdiv(total, self.block_size) - num_held - len(hits), 0)
        free = self.pool.num_free
        if num_new_blocks + len(hits) > free:
            # reclaim only if it will succeed: a failed allocation touches nothing
            evictable, entry_held = self.pool.hit_counts(hits)
            if not self._fits(num_new_blocks, evictable, entry_held, free):
                return False
            if num_new_blocks + evictable > free:
                self._reclaim(req.owner, hits, num_new_blocks)
        if held is None:
            held = self.req_blocks[req.request_id] = []
            self.num_cached_blocks[req.request_id] = 0
        if hits:
            self.pool.touch(hits)
            held.extend(hits)
            if not num_held:        # hits are published already: publishing starts after them
                self.num_cached_blocks[req.request_id] = len(hits)
        if num_new_blocks:
            held.extend(self.pool.get_new_blocks(num_new_blocks))
        if publish:
            self.cache_blocks(req, min(total, req.num_tokens))
        return True

    def append_new_block(self, req: Request) -> None:
        """One more block for a running request (fast-forward's boundary crossings; the
        caller has checked that a block is free)."""
        self.req_blocks[req.request_id].extend(self.pool.get_new_blocks(1))

    def apply_decode_events(self, scheduled, allocs: list, a: int, a2: int, pubs: list, p: int,
                            p2: int) -> None:
        """Fast-forward's block events of one segment (``fast_forward._events_through``): the
        allocations ``allocs[a:a2]`` ((bulk step, batch index) of ``scheduled``: one more block
        for that request, as ``append_new_block``) and publications ``pubs[p:p2]`` ((bulk step,
        batch index, tokens): as ``cache_blocks``), sorted by step, in step order: a step's
        allocations, then its publications. The blocks come from one take
        (``BlockPool.take_for_decodes``: nothing else here reads or changes the free queue, a
        published block being held); each allocation's content drop is made at its own place.
        A decode's one-block publication goes to ``BlockPool.cache_next_block`` directly."""
        pool = self.pool
        req_blocks = self.req_blocks
        ncached = self.num_cached_blocks
        bs = self.block_size
        if not self.enable_caching:     # publications publish nothing
            p = p2
        if a < a2:
            taken = pool.take_for_decodes(a2 - a)
            k = 0
        while a < a2 or p < p2:
            j = allocs[a][0] if a < a2 else pubs[p][0]
            if p < p2 and pubs[p][0] < j:
                j = pubs[p][0]
            while a < a2 and allocs[a][0] == j:
                block = taken[k]
                k += 1
                if block.block_hash is not None:
                    pool.drop_taken(block)
                req_blocks[scheduled[allocs[a][1]].req.request_id].append(block)
                a += 1
            while p < p2 and pubs[p][0] == j:
                _, i, tokens = pubs[p]
                p += 1
                req = scheduled[i].req
                rid = req.request_id
                done = ncached.get(rid, 0)
                if tokens // bs != done + 1 or len(req_blocks[rid]) <= done:
                    self.cache_blocks(req, tokens)      # not a decode's one block
                    continue
                stream = req.stream
                memos = stream.memos
                memo = memos.get(pool) if memos is not None else None
                if memo is None:
                    memo = pool.memo_of(stream)
                hashes = memo.hashes        # the stream's chain (extended in place)
                if len(hashes) <= done:
                    hashes = stream.block_hashes(done + 1)
                ncached[rid] = done + 1
                pool.cache_next_block(req_blocks[rid][done], hashes[done], memo, done)

    def cache_blocks(self, req: Request, num_tokens: int) -> None:
        """Publish the request's full blocks up to ``num_tokens`` tokens."""
        if not self.enable_caching:
            return
        rid = req.request_id
        done = self.num_cached_blocks.get(rid, 0)
        n = num_tokens // self.block_size
        if n <= done:
            return
        blocks = self.req_blocks[rid]
        hi = min(n, len(blocks))
        pool = self.pool
        stream = req.stream
        if hi == done + 1:          # one block (a decode's): no slices
            # the stream's memo and its chain (extended in place)
            memo = pool.memo_of(stream)
            hashes = memo.hashes
            if len(hashes) <= done:
                hashes = stream.block_hashes(n)
            pool.cache_next_block(blocks[done], hashes[done], memo, done)
            self.num_cached_blocks[rid] = hi
            return
        hashes = stream.block_hashes(n)
        pool.cache_blocks(blocks[done:hi], hashes[done:hi], pool.memo_of(stream), done)
        self.num_cached_blocks[rid] = hi

    def free(self, req: Request, drop_content: bool = False) -> None:
        """Release a request's blocks, tail first (vLLM frees in reverse order); a kv_tiers
        store index of the request restarts (finished, preempted or sent: every path frees)."""
        blocks = self.req_blocks.pop(req.request_id, None)
        self.num_cached_blocks.pop(req.request_id, None)
        if self.tiers is not None:
            self.tiers.forget(req)
        if blocks:
            self.pool.free_blocks(reversed(blocks), drop_content)

    # ---- retention (paper §3.4) ----------------------------------------------------------
    def finish(self, req: Request, decision: Optional[RetentionDecision], now_ns: int) -> Optional[int]:
        """Apply a completed request's retention decision to its blocks. Returns the new
        entry's sequence number when it protected them (the caller schedules its expiry)."""
        if decision is None or decision.kind in ("release", "none") or (
                decision.kind in RETAINING_KINDS and decision.deadline_ns <= now_ns):
            self.free(req)
            return
        if decision.kind == "offload":      # kv_tiers: the GPU blocks are released (cached
            self.release_entry(req.owner)   # until reused); the tier keeps the context
            seq = None
            if self.tiers is not None:
                seq = self.tiers.offload(req, decision.deadline_ns, decision.value, now_ns)
            self.free(req)
            self._report(req.owner, 0, False, now_ns)
            return seq
        if decision.kind == "evict":
            self.free(req, drop_content=True)
            return
        if not self.req_blocks.get(req.request_id):     # finished while preempted: nothing held
            self.free(req)
            return
        blocks = self.req_blocks.pop(req.request_id)
        self.num_cached_blocks.pop(req.request_id, None)
        if self.tiers is not None:      # the request is done with its blocks (as in free)
            self.tiers.forget(req)
        old = self.entries.get(req.owner)
        if old is not None:
            self._cancel_expiry(old)
        self._entry_seq += 1
        self.entry_epoch += 1
        self.entries[req.owner] = KVEntry(req.owner, blocks, req.num_tokens, now_ns,
                                          decision.deadline_ns, decision.value, self._entry_seq)
        if old is None:
            self.pool.pin(blocks)
        else:       # the new context supersedes the old (shared blocks stay held)
            # Usually the old context is a prefix of the new one (the call hit it): moving
            # those blocks' entry references from the old entry to the new one changes no
            # count, so only the rest is pinned, and nothing of the old entry is freed.
            k = len(old.blocks)
            if k <= len(blocks) and old.blocks == blocks[:k]:
                self.pool.pin(blocks[k:])
            else:
                self.pool.pin(blocks)
                self.pool.unpin(old.blocks)
        self._report(req.owner, req.num_tokens, True, now_ns)
        return self._entry_seq

    def set_expiry(self, owner: int, seq: int, event: int) -> None:
        """``event`` (an event-loop sequence number) runs ``expire_entry(owner, seq)`` at the
        deadline of entry ``seq``; it is cancelled if the entry leaves first."""
        entry = self.entries.get(owner)
        if entry is not None and entry.seq == seq:
            entry.expiry = event

    def _cancel_expiry(self, entry: KVEntry) -> None:
        if entry.expiry is not None and self.cancel_event is not None:
            self.cancel_event(entry.expiry)
        entry.expiry = None

    def expire_entry(self, owner: int, seq: int) -> None:
        """At its deadline a protected entry becomes ordinary cache: its blocks go to the LRU
        free queue with their content (hittable until reused). Does nothing if the entry was
        already released, reclaimed or superseded (another ``seq``)."""
        entry = self.entries.get(owner)
        if entry is not None and entry.seq == seq:
            entry.expiry = None         # this is that event, running: nothing to cancel
            self.release_entry(owner)

    def release_entry(self, owner: int, drop_content: bool = False) -> bool:
        entry = self.entries.pop(owner, None)
        if entry is None:
            return False
        self._cancel_expiry(entry)
        self.entry_epoch += 1
        self.pool.unpin(entry.blocks, drop_content)
        self._report(owner, 0, False, self._clock())
        return True

    def _entry_order(self, requester: int) -> list[KVEntry]:
        """Entries in reclamation order: ascending eviction key (eq. 5, or the victim-
        protection hook's key); the requester's own entry last (its cache hits live there,
        so it is released only when nothing else can make room)."""
        now = self._clock()
        hook = self._hooks.victim_protection
        inst = self.instance
        cands = [e for e in self.entries.values() if e.owner != requester]
        if hook is None:
            cands.sort(key=lambda e: default_eviction_key(e.info(inst), now))
        else:
            cands.sort(key=lambda e: hook.eviction_key(e.info(inst), now))
        own = self.entries.get(requester)
        if own is not None:
            cands.append(own)
        return cands

    def _reclaim(self, requester: int, hits: list[KVBlock], new_blocks: int) -> None:
        """Release entries in reclamation order until the new blocks plus the hits that are
        evictable fit in the free blocks (the caller has checked with ``_fits`` that
        releasing them all would do). Releasing an entry frees the blocks it alone holds,
        and a freed block that is one of the hits becomes evictable too and raises the need,
        so it is recounted after every release."""
        for entry in self._entry_order(requester):
            self.release_entry(entry.owner)
            self.num_reclaimed_entries += 1
            need = new_blocks + num_evictable(hits)
            if need <= self.pool.num_free:
                return

    def _report(self, owner: int, tokens: int, protected: bool, now_ns: int) -> None:
        hook = self._hooks.residency
        if hook is not None:
            hook.on_residency(owner, self.instance, tokens, protected, now_ns)

    # ---- checks --------------------------------------------------------------------------
    def check_invariants(self) -> None:
        self.pool.check_invariants()
        holders: dict[int, int] = {}
        pinned: dict[int, int] = {}
        for blocks in self.req_blocks.values():
            for b in blocks:
                holders[b.block_id] = holders.get(b.block_id, 0) + 1
        for e in self.entries.values():
            for b in e.blocks:
                holders[b.block_id] = holders.get(b.block_id, 0) + 1
                pinned[b.block_id] = pinned.get(b.block_id, 0) + 1
        lazy = {b.block_id for blocks in self.pool.lazy_pins.values() for b in blocks}
        for b in self.pool.blocks[1:]:
            assert b.ref_cnt == holders.get(b.block_id, 0), (b, holders.get(b.block_id, 0))
            refs = b.entry_refs + (b.block_id in lazy)
            assert refs == pinned.get(b.block_id, 0), (b, pinned.get(b.block_id, 0))
