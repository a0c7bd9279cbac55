"""KV memory tiers below GPU memory (CPU DRAM, CXL): vLLM 0.19's native KV offloading
(docs/kv-tiers.md).

What it models, after vLLM's ``OffloadingConnector`` (scheduler side:
``offloading_connector.py`` / ``offloading/scheduler.py``), its LRU manager
(``vllm/v1/kv_offload/lru_manager.py``) and its CPU<->GPU worker
(``vllm/v1/kv_offload/worker/cpu_gpu.py``):

- **Stores** (``after_step``): after every step, each scheduled request's newly *full*
  blocks (computed tokens after the step, capped at its known tokens) are stored to the
  first tier, write-through (``_get_reqs_to_store``: every new full block, tracked by a
  per-request "next block to store" index). A block already in a tier is not copied again.
  The copy is queued on the instance's device-to-host link (one FIFO per direction:
  ``SingleDirectionOffloadingHandler`` runs transfers in submission order, the store after
  the step's compute); the block becomes loadable (``is_ready``) when its copy ends. A
  store that cannot find room is skipped and retried after the next step (``prepare_store``
  returns None and the index does not advance).
- **Room** (``TierStore.prepare_store``): blocks not yet stored evict the least recently
  used ready, unreferenced blocks (LRU order: stores append, lookups touch). Blocks being
  loaded (``ref_cnt > 0``), blocks whose store is in flight and blocks a retention
  ``offload`` pins are not evicted by LRU; when that is not enough, pinned entries are
  released in ascending eviction-key order (the victim-protection hook, ``tier`` set), as
  GPU entries are (protection is a preference, not a lock). A block evicted from the CPU
  tier moves to the CXL tier when one is configured (demotion; not in vLLM, whose CPU tier
  has no lower tier).
- **Loads**: the tiers are a ``remote_kv.RemoteKVSource`` (the engine's one path for
  vLLM's ``WAITING_FOR_REMOTE_KVS``). ``get_num_new_matched_tokens``: a waiting request's
  blocks after its GPU prefix hit are looked up tier by tier (consecutive ready blocks
  among every full block of the prompt, ``num_tokens // block_size``: vLLM's offloading
  connector looks up all of the request's block hashes, where the GPU lookup stops at
  ``num_tokens - 1`` tokens). On a hit the request gets GPU blocks for the whole hit and is
  parked (no token budget, not running); ``start`` queues its copy on the host-to-device
  link when the step it was scheduled in launches (``start_load_kv``). Other requests keep
  stepping. When the copy ends (``_finish_load``) the request's computed tokens cover the
  hit, less one when it covers the whole prompt (vLLM's ``_update_waiting_for_remote_kv``
  recomputes the last token to sample the next), its blocks up to them are published, and
  it is admitted before the waiting queue (``ahead_of_queue``); it computes only the rest.
- **Cost**: a transfer of ``b`` bytes per GPU takes ``latency + b / bandwidth`` on its
  link; every GPU of the instance copies its own shard over its own link in parallel, so
  the time is that of one rank and the bytes reported are the instance's (all ranks).
  Transfers never lengthen a step (copy engines; vLLM overlaps them with compute).

Invariants (``check_invariants``): per tier, stored blocks <= capacity; every block's
``ref`` equals the loads in flight that hold it; every pin count equals the pinned
entries that name it. Nothing here runs unless ``kv_tiers`` is configured.
"""
from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Optional

from hooks import KVEntryInfo, default_eviction_key

__all__ = ["TierSpec", "Link", "TierStore", "TierPin", "InstanceTiers", "attach_tiers"]


@dataclass(frozen=True, slots=True)
class TierSpec:
    """One tier as configured: ``capacity_blocks`` blocks of the instance's KV (all ranks),
    its link to a GPU: decimal GB/s (= bytes per ns) each direction and a fixed latency."""
    name: str                   # "cpu" | "cxl"
    capacity_blocks: int
    h2d_gbs: float
    d2h_gbs: float
    latency_ns: int


class Link:
    """One direction of one GPU's path to a tier: transfers run one after another in
    submission order (vLLM chains each transfer's stream on the previous one's event)."""
    __slots__ = ("gbs", "latency_ns", "free_ns", "busy_ns", "bytes", "transfers")

    def __init__(self, gbs: float, latency_ns: int):
        self.gbs = gbs
        self.latency_ns = latency_ns
        self.free_ns = 0
        self.busy_ns = 0
        self.bytes = 0
        self.transfers = 0

    def duration_ns(self, rank_bytes: int) -> int:
        return self.latency_ns + round(rank_bytes / self.gbs)

    def submit(self, now_ns: int, rank_bytes: int, total_bytes: int) -> int:
        """Queue a copy of ``rank_bytes`` per GPU; returns when it ends."""
        start = now_ns if now_ns > self.free_ns else self.free_ns
        end = start + self.duration_ns(rank_bytes)
        self.busy_ns += end - start
        self.free_ns = end
        self.bytes += total_bytes
        self.transfers += 1
        return end


class _Slot:
    __slots__ = ("ready_ns", "ref", "pins")

    def __init__(self, ready_ns: int):
        self.ready_ns = ready_ns    # the store's copy ends (loadable from then on)
        self.ref = 0                # loads in flight reading it
        self.pins = 0               # offload entries keeping it


@dataclass(slots=True)
class TierPin:
    """A program's KV kept in a tier by an ``offload`` decision until ``deadline_ns``."""
    owner: int
    instance: int
    hashes: list
    created_ns: int
    deadline_ns: int
    value: Optional[float]
    seq: int

    def info(self, tier: str) -> KVEntryInfo:
        return KVEntryInfo(self.owner, self.instance, self.created_ns, self.deadline_ns,
                           self.value, len(self.hashes), self.seq, tier)


@dataclass(slots=True)
class TierStats:
    stored_blocks: int = 0      # blocks copied into the tier
    hit_blocks: int = 0         # blocks loaded from it
    evicted_blocks: int = 0     # blocks dropped (or demoted) to make room
    failed_stores: int = 0      # store attempts skipped for lack of room
    reclaimed_pins: int = 0     # offload entries released early to make room


class TierStore:
    """One tier's content: block hash -> slot, in LRU order (front = least recent).
    Shared by the instances of a node when ``kv_tiers.shared``."""

    def __init__(self, spec: TierSpec, lower: Optional["TierStore"] = None):
        self.spec = spec
        self.name = spec.name
        self.capacity = spec.capacity_blocks
        self.blocks: "OrderedDict[int, _Slot]" = OrderedDict()
        self.lower = lower          # where evicted blocks go (CPU -> CXL), or None
        self.pins: dict[int, TierPin] = {}
        self.stats = TierStats()
        self.eviction_key: Optional[Callable] = None    # victim-protection hook, or None

    def __len__(self) -> int:
        return len(self.blocks)

    def ready(self, h: int, now_ns: int) -> bool:
        s = self.blocks.get(h)
        return s is not None and s.ready_ns <= now_ns

    def touch(self, hashes) -> None:
        """Most recently used: the first block ends last in LRU order (vLLM touches in
        reverse, so a prefix outlives its tail)."""
        blocks = self.blocks
        for h in reversed(hashes):
            if h in blocks:
                blocks.move_to_end(h)

    def prepare_store(self, hashes: list, ready_ns: int, now_ns: int) -> Optional[list]:
        """Make room for the hashes not yet here and add them (loadable at ``ready_ns``);
        returns the added hashes, or None (nothing changed) when room cannot be found."""
        new = [h for h in hashes if h not in self.blocks]
        if not new:
            return new
        need = len(self.blocks) + len(new) - self.capacity
        if need > 0 and not self._make_room(need, now_ns):
            self.stats.failed_stores += 1
            return None
        for h in new:
            self.blocks[h] = _Slot(ready_ns)
        self.stats.stored_blocks += len(new)
        return new

    def _evictable(self, now_ns: int) -> list:
        return [h for h, s in self.blocks.items() if not s.ref and not s.pins and s.ready_ns <= now_ns]

    def _make_room(self, need: int, now_ns: int) -> bool:
        """Evict ``need`` evictable blocks (unreferenced, unpinned, landed) in LRU order,
        first releasing pinned entries, lowest eviction key first, until enough are
        evictable. Releasing a pin can only make that pin's blocks evictable, so the count
        is kept up to date from its blocks and the victims are listed once at the end."""
        free_now = 0
        victims = []
        for h, s in self.blocks.items():
            if not s.ref and not s.pins and s.ready_ns <= now_ns:
                victims.append(h)
                free_now += 1
                if free_now == need:
                    break
        if free_now < need:
            # free_now is every evictable block: the scan did not stop early
            pinned_only = sum(1 for s in self.blocks.values()
                              if s.pins and not s.ref and s.ready_ns <= now_ns)
            if free_now + pinned_only < need:
                return False
            blocks = self.blocks
            for pin in self._pin_order(now_ns):
                self.unpin(pin.owner, pin.seq)
                self.stats.reclaimed_pins += 1
                for h in set(pin.hashes):
                    s = blocks.get(h)
                    if s is not None and not s.pins and not s.ref and s.ready_ns <= now_ns:
                        free_now += 1
                if free_now >= need:
                    break
            if free_now < need:
                return False
            victims = self._evictable(now_ns)[:need]
        self._evict(victims, now_ns)
        return True

    def _pin_order(self, now_ns: int) -> list:
        """Pins in reclamation order: ascending eviction key (the victim-protection hook's,
        or eq. 5's default)."""
        key = self.eviction_key or default_eviction_key
        return sorted(self.pins.values(), key=lambda p: key(p.info(self.name), now_ns))

    def _evict(self, victims: list, now_ns: int) -> None:
        for h in victims:
            del self.blocks[h]
        self.stats.evicted_blocks += len(victims)
        if self.lower is not None and victims:
            self.lower.demote(victims, now_ns)

    def demote(self, hashes: list, now_ns: int) -> None:
        """Blocks evicted from the tier above; kept if room can be made (host-side copy:
        ready at once, no GPU link time)."""
        self.prepare_store(hashes, now_ns, now_ns)

    # ---- pins (retention "offload") ----------------------------------------------------
    def pin(self, pin: TierPin) -> None:
        old = self.pins.pop(pin.owner, None)
        kept = [h for h in pin.hashes if h in self.blocks]
        pin.hashes = kept
        for h in kept:
            self.blocks[h].pins += 1
        self.pins[pin.owner] = pin
        if old is not None:
            self._drop_pin(old)

    def unpin(self, owner: int, seq: Optional[int] = None) -> bool:
        pin = self.pins.get(owner)
        if pin is None or (seq is not None and pin.seq != seq):
            return False
        del self.pins[owner]
        self._drop_pin(pin)
        return True

    def _drop_pin(self, pin: TierPin) -> None:
        for h in pin.hashes:
            s = self.blocks.get(h)
            if s is not None:
                s.pins -= 1

    def check_invariants(self, refs: dict) -> None:
        assert len(self.blocks) <= self.capacity, (self.name, len(self.blocks), self.capacity)
        pins: dict = {}
        for p in self.pins.values():
            for h in p.hashes:
                pins[h] = pins.get(h, 0) + 1
        for h, s in self.blocks.items():
            assert s.ref == refs.get(h, 0), (self.name, h, s.ref, refs.get(h, 0))
            assert s.pins == pins.get(h, 0), (self.name, h, s.pins, pins.get(h, 0))
        for h in pins:
            assert h in self.blocks, (self.name, h)


@dataclass(slots=True)
class _Load:
    req: object
    gpu_blocks: int             # GPU prefix hit (already held)
    parts: list                 # [(store, hashes)] in prefix order
    start_ns: int = 0
    end_ns: int = 0


@dataclass(slots=True)
class CallTierStats:
    """Per call: prompt tokens loaded from each tier and the time its load took."""
    tokens: dict = field(default_factory=dict)
    load_ns: int = 0


class InstanceTiers:
    """The tiers one instance uses: the stores (own or its node's), one link per tier and
    direction, per-request store progress and the loads in flight. Its load side is a
    ``remote_kv.RemoteKVSource``."""

    ahead_of_queue = True   # landed loads are admitted before the waiting queue

    def __init__(self, inst, stores: list, block_bytes_rank: int, ranks: int, hooks=None):
        self.inst = inst
        self.kv = inst.kv
        self.sched = inst.scheduler
        self.stores = stores                    # first = the tier stores go to
        self.block_bytes_rank = block_bytes_rank
        self.block_bytes = block_bytes_rank * ranks
        self.h2d = {s.name: Link(s.spec.h2d_gbs, s.spec.latency_ns) for s in stores}
        self.d2h = {s.name: Link(s.spec.d2h_gbs, s.spec.latency_ns) for s in stores}
        self.next_store: dict[int, int] = {}    # request id -> next block index to store
        self.loading: dict[int, _Load] = {}     # request id -> load in flight
        self._matched: list = []                # the last match's [(store, hashes)]
        self.calls: dict[int, CallTierStats] = {}
        self._pin_seq = 0
        for s in stores:
            vp = getattr(hooks, "victim_protection", None) if hooks is not None else None
            s.eviction_key = vp.eviction_key if vp is not None else None

    # ---- stores ------------------------------------------------------------------------
    def after_step(self, out, now_ns: int) -> None:
        """Store every scheduled request's newly full blocks (write-through)."""
        bs = self.kv.block_size
        for sr in out.scheduled:
            req = sr.req
            if req.request_id in self.loading:
                continue
            n = min(sr.ctx_before + sr.num_new, req.num_tokens, req.num_computed_tokens) // bs
            self._store(req, n, now_ns)

    def after_decode_run(self, scheduled: list, times: list) -> None:
        """``after_step`` at the end of each bulk step of a fast-forward run (before its
        per-request counters move): ``scheduled`` is the batch of the run's first bulk step
        N+1, in batch order, every entry a one-token decode; ``times[j - 1]`` is ``(start,
        timing)`` of bulk step N+j. Nobody finishes, is admitted or preempted in the run,
        and nothing else reads or changes the tiers' stores and links until it ends (any
        other use of them is an event, and a run ends before the next event), so the
        stores are made here at once, at their steps' end times, in step-by-step order.

        At the end of bulk step j an entry's ``after_step`` count is ``min(ctx_before +
        num_new, num_tokens, num_computed_tokens) // bs`` = ``(m + j) // bs`` with ``m =
        min(ctx_before, num_tokens, num_computed_tokens - 1)`` read now (each term grows by
        one per step: the step's token is computed, one sampled, its successor scheduled).
        A store is attempted only where that count exceeds the request's ``next_store``
        (elsewhere ``_store`` returns at once): after a stored block, at the step that
        completes the next one; after a refused store (a full tier), at every step, as
        ``after_step`` retries it. The attempts run in (step, batch index) order."""
        if not times:
            return
        bs = self.kv.block_size
        next_store = self.next_store
        steps = len(times)
        due = []                    # (bulk step, batch index, m) of each entry's next attempt
        for i, sr in enumerate(scheduled):
            req = sr.req
            if req.request_id in self.loading:
                continue
            m = min(sr.ctx_before, req.num_tokens, req.num_computed_tokens - 1)
            j = max(1, (next_store.get(req.request_id, 0) + 1) * bs - m)
            if j <= steps:
                due.append((j, i, m))
        heapq.heapify(due)
        while due:
            j, i, m = heapq.heappop(due)
            req = scheduled[i].req
            start, timing = times[j - 1]
            self._store(req, (m + j) // bs, start + timing.total_ns)
            # stored: the step completing the next block; refused: the next step
            j = max(j + 1, (next_store.get(req.request_id, 0) + 1) * bs - m)
            if j <= steps:
                heapq.heappush(due, (j, i, m))

    def _store(self, req, n: int, now_ns: int) -> None:
        rid = req.request_id
        start = self.next_store.get(rid, 0)
        if n <= start:
            return
        store = self.stores[0]
        hashes = req.stream.block_hashes(n)[start:n]
        link = self.d2h[store.name]
        new = store.prepare_store(hashes, 1 << 62, now_ns)
        if new is None:
            return                          # retried after the next step (index kept)
        self.next_store[rid] = n
        store.touch(hashes)
        if new:
            end = link.submit(now_ns, len(new) * self.block_bytes_rank, len(new) * self.block_bytes)
            blocks = store.blocks
            for h in new:
                blocks[h].ready_ns = end

    def forget(self, req) -> None:
        """A request finished or was preempted: its store index restarts (vLLM resets the
        block list of a preempted request; re-stores are skipped as already present)."""
        self.next_store.pop(req.request_id, None)

    # ---- loads ---------------------------------------------------------------------------
    def lookup(self, req, gpu_blocks: int, now_ns: int) -> list:
        """Consecutive ready blocks after the GPU hit, tier by tier: [(store, hashes)], among
        the prompt's full blocks (vLLM's ``OffloadingConnectorScheduler`` looks up every block
        hash of the request; the load may cover the whole prompt)."""
        n = req.num_tokens // self.kv.block_size
        if n <= gpu_blocks:
            return []
        hashes = req.stream.block_hashes(n)
        parts = []
        cur, run = None, []
        for h in hashes[gpu_blocks:n]:
            for s in self.stores:
                if s.ready(h, now_ns):
                    break
            else:
                break
            if s is not cur:
                if run:
                    parts.append((cur, run))
                cur, run = s, []
            run.append(h)
        if run:
            parts.append((cur, run))
        return parts

    # ---- remote_kv.RemoteKVSource ---------------------------------------------------------
    def get_num_new_matched_tokens(self, req, hits: list, num_hit: int):
        """The tokens of the tier hit past the GPU hit; None without one (a request with
        computed tokens, e.g. a landed load, looks up nothing)."""
        if req.num_computed_tokens:
            return None
        parts = self.lookup(req, len(hits), self.inst.loop.now)
        if not parts:
            self.admitted(req)
            return None
        self._matched = parts
        return sum(len(hs) for _, hs in parts) * self.kv.block_size

    def update_state_after_alloc(self, req, hits: list, num_hit: int, num_external: int) -> None:
        kv = self.kv
        if req.num_cached_tokens < 0:
            # first admission: vLLM counts its computed tokens when it schedules the landed
            # request (what the landing will count)
            req.num_cached_tokens = _computed_after_load(num_hit + num_external, req.num_tokens)
            kv.prefix_stats.queries += req.prompt_len
            kv.prefix_stats.hits += num_hit
        self.begin_load(req, len(hits), self._matched)
        self._matched = []

    def start(self, reqs: list, now_ns: int) -> None:
        self.start_loads(reqs, now_ns)

    def begin_load(self, req, gpu_blocks: int, parts: list) -> None:
        """Admission took the request with a tier hit: reference the blocks (not evictable
        while read), touch its prefix, hold the load until its step launches."""
        for s, hs in parts:
            for h in hs:
                s.blocks[h].ref += 1
        n = req.num_tokens // self.kv.block_size
        # the lookup's blocks (vLLM touches every block hash of the request): the stream's
        # cached chain may run past them (an earlier use of the stream extended it), and what
        # is touched must not depend on that
        prefix = req.stream.block_hashes(n)[:n]
        for s in self.stores:
            s.touch(prefix)
            s.unpin(req.owner)          # the successor holds what it needs now
        self.loading[req.request_id] = _Load(req, gpu_blocks, parts)

    def admitted(self, req) -> None:
        """Admitted without a tier hit: its program's offload pin has served its purpose."""
        for s in self.stores:
            if req.owner in s.pins:
                s.unpin(req.owner)

    def start_loads(self, reqs: list, now_ns: int) -> None:
        """The step that scheduled these loads launches: queue their copies."""
        for req in reqs:
            load = self.loading[req.request_id]
            load.start_ns = now_ns
            end = now_ns
            for s, hs in load.parts:
                end = self.h2d[s.name].submit(now_ns, len(hs) * self.block_bytes_rank,
                                              len(hs) * self.block_bytes)
            load.end_ns = end
            self.inst.loop.schedule(end, lambda rid=req.request_id: self._finish_load(rid))

    def _finish_load(self, rid: int) -> None:
        load = self.loading.pop(rid)
        req = load.req
        st = self.calls.setdefault(rid, CallTierStats())
        total = 0
        for s, hs in load.parts:
            for h in hs:
                slot = s.blocks.get(h)
                if slot is not None:
                    slot.ref -= 1
            s.stats.hit_blocks += len(hs)
            st.tokens[s.name] = st.tokens.get(s.name, 0) + len(hs) * self.kv.block_size
            total += len(hs)
        st.load_ns += load.end_ns - load.start_ns
        self.next_store[rid] = load.gpu_blocks + total      # loaded blocks are in a tier already
        computed = _computed_after_load((load.gpu_blocks + total) * self.kv.block_size, req.num_tokens)
        self.inst.finished_recving(req, computed, True)

    # ---- retention "offload" -----------------------------------------------------------
    def offload(self, req, deadline_ns: int, value, now_ns: int) -> Optional[int]:
        """Keep the finished call's full blocks in the first tier until ``deadline_ns``
        (storing any not stored yet); returns the pin's sequence number."""
        n = req.num_tokens // self.kv.block_size
        self._store(req, n, now_ns)
        hashes = req.stream.block_hashes(n)[:self.next_store.get(req.request_id, 0)]
        self._pin_seq += 1
        store = self.stores[0]
        store.pin(TierPin(req.owner, self.inst.index, list(hashes), now_ns, deadline_ns, value,
                          self._pin_seq))
        return self._pin_seq

    def expire_pin(self, owner: int, seq: int) -> None:
        self.stores[0].unpin(owner, seq)

    # ---- checks and metrics ----------------------------------------------------------------
    def refs(self) -> dict:
        out: dict = {}
        for load in self.loading.values():
            for s, hs in load.parts:
                for h in hs:
                    key = (id(s), h)
                    out[key] = out.get(key, 0) + 1
        return out


def _computed_after_load(hit_tokens: int, num_tokens: int) -> int:
    """A landed load's computed tokens: its hit (GPU and tier blocks, at most the prompt's
    full blocks), less one when that is the whole prompt, whose last token is recomputed to
    sample the next (vLLM's ``_update_waiting_for_remote_kv``)."""
    return hit_tokens - 1 if hit_tokens == num_tokens else hit_tokens


def attach_tiers(inst, stores: list, block_bytes_rank: int, ranks: int, hooks=None) -> InstanceTiers:
    """Give an instance (its scheduler and KV manager) tiers; nothing else changes."""
    tiers = InstanceTiers(inst, stores, block_bytes_rank, ranks, hooks)
    inst.tiers = tiers
    # asked first at admission (before a P/D source): a tier hit is looked up before the
    # request's remote prefill is pulled
    inst.scheduler.kv_sources = (tiers,) + inst.scheduler.kv_sources
    inst.kv.tiers = tiers
    return tiers


def check_tier_invariants(all_tiers: list) -> None:
    """Every store's accounting, over the instances that use it (shared stores included)."""
    stores = {}
    refs: dict = {}
    for t in all_tiers:
        for s in t.stores:
            stores[id(s)] = s
        for key, c in t.refs().items():
            refs[key] = refs.get(key, 0) + c
    for sid, s in stores.items():
        s.check_invariants({h: c for (k, h), c in refs.items() if k == sid})
