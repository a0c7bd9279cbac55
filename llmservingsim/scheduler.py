"""vLLM V1 scheduler (0.19 semantics; docs/architecture.md "One engine step").

``schedule()`` forms one step's batch; ``update_from_output()`` applies the step's result.
There are no prefill/decode phases: each request has ``num_computed_tokens`` against
``num_known_tokens`` (``num_tokens + num_placeholders``) and a step closes part of the gap
within one token budget.

Phase 1 serves ``running`` strictly in list order (an earlier prefill chunk may take the
whole budget). An allocation failure preempts by recompute: FCFS takes the tail of
``running``, priority takes max (priority, arrival); if the victim is the request itself the
running loop ends (0.19). Phase 2 admits from ``waiting`` only if nothing was preempted,
until ``max_num_seqs``, with head-of-line blocking: the head's whole current sequence must
fit (``scheduler_reserve_full_isl``) or admission stops.

Output tokens: when a step's chunk reaches the end of a request's known tokens the step
samples one token; it is counted as a placeholder at schedule time and becomes a real
token in ``update_from_output``. Requests whose outputs (real + placeholder) already reach
``max_tokens`` are not scheduled again (vLLM anticipates max_tokens stops).
KV from outside the pool (CPU/CXL tiers, a P/D decode leg's prefill instance) takes one
path, vLLM's ``WAITING_FOR_REMOTE_KVS`` (``remote_kv.py``): admission asks ``kv_sources``,
parks a matched head with unpublished blocks, and ``finished_recving`` re-admits it first.
Publication: between passes, every running request has published each full block whose
tokens are all known and computed (with caching on, ``num_cached_blocks >=
min(num_computed_tokens, num_tokens) // block_size``): ``allocate_slots`` publishes as it
schedules tokens, ``update_from_output`` as a sampled token completes a block, fast-forward
as its bulk steps do both. So a decode that holds a placeholder publishes nothing when it
is scheduled: its known tokens (``num_tokens`` <= its computed tokens) are in published blocks
already, and the block its token completes waits for the placeholder's token.
Ownership: only this class writes ``status``, ``num_computed_tokens``, ``num_known_tokens``
and ``num_tokens`` of a request; every write of ``num_tokens`` keeps ``num_placeholders``
(``num_known_tokens - num_tokens``) what the step semantics say.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Optional

from .kv_cache_manager import KVCacheManager, cdiv
from .request import Request, RequestStatus
from .request_queue import make_queue


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int = 128
    max_num_batched_tokens: int = 2048
    long_prefill_token_threshold: int = 0
    enable_chunked_prefill: bool = True
    policy: str = "fcfs"            # "fcfs" | "priority"
    max_model_len: int = 131072


@dataclass(slots=True)
class ScheduledRequest:
    req: Request
    num_new: int
    ctx_before: int                 # tokens already computed before this step
    samples: bool                   # this step samples an output token for the request


@dataclass(slots=True)
class SchedulerOutput:
    """One step's batch. Besides the batch, its tallies (kept by the scheduler as it forms
    and advances the batch, so that timing and metrics need no walk over it): decodes are the
    entries with ``num_new == 1`` and ``ctx_before > 0``, their KV length ``ctx_before + 1``;
    every other entry is a prefill chunk."""
    scheduled: list = field(default_factory=list)     # [ScheduledRequest] in batch order
    preempted: list = field(default_factory=list)
    num_tokens: int = 0
    # requests this pass parked as WAITING_FOR_REMOTE_KVS, {source: [request]} (their
    # transfers start when this step launches; llmservingsim/remote_kv.py); None unless some
    remote_kv: Optional[dict] = None
    num_decodes: int = 0
    decode_kv_sum: int = 0
    decode_kv_max: int = 0          # 0 when no decode
    decode_kv_min: int = 0          # 0 when no decode
    prefill_tokens: int = 0         # sum of the prefill chunks
    prefill_ctx_sum: int = 0        # sum of chunk x its prior context
    num_sampled: int = 0            # entries whose step samples a token
    # entries from here on were admitted from the waiting queue by this pass: the only
    # ones whose request may never have been scheduled (a running request's admission
    # was launched), so the launch stamps ``first_scheduled_ns`` of these alone
    first_admitted: int = 0
    # the entries the general path made (``Scheduler._commit``: prefill chunks, admissions);
    # every other entry is a decode run's (num_new 1, samples), which ``Scheduler.recycle``
    # relies on
    general: list = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.scheduled)

    def retally_decodes(self) -> None:
        """Recompute the tallies (and ``num_tokens``) of a batch of sampling decodes only, one
        token each, from ``scheduled``: fast-forward took finished entries out of it."""
        ctx = [sr.ctx_before for sr in self.scheduled]
        m = len(ctx)
        self.num_decodes = self.num_sampled = self.num_tokens = m
        self.decode_kv_sum = sum(ctx) + m
        self.decode_kv_max = max(ctx) + 1
        self.decode_kv_min = min(ctx) + 1

    def tally(self, entries) -> None:
        """Add ``entries`` (of ``scheduled``) to the tallies."""
        nd, kv_sum, kv_max, kv_min = self.num_decodes, self.decode_kv_sum, self.decode_kv_max, self.decode_kv_min
        for sr in entries:
            n = sr.num_new
            if n == 1 and sr.ctx_before > 0:
                kv = sr.ctx_before + 1
                kv_sum += kv
                if not nd or kv > kv_max:
                    kv_max = kv
                if not nd or kv < kv_min:
                    kv_min = kv
                nd += 1
            else:
                self.prefill_tokens += n
                self.prefill_ctx_sum += n * sr.ctx_before
            if sr.samples:
                self.num_sampled += 1
        self.num_decodes, self.decode_kv_sum, self.decode_kv_max, self.decode_kv_min = nd, kv_sum, kv_max, kv_min


_new = object.__new__


def _take(scheduled: list, req: Request) -> Optional[ScheduledRequest]:
    """Remove and return ``req``'s entry of this pass's batch (None if not scheduled yet)."""
    for k, sr in enumerate(scheduled):
        if sr.req is req:
            return scheduled.pop(k)
    return None


class Scheduler:
    # remote_kv.RemoteKVSource objects asked in this order at admission; () when none
    kv_sources: tuple = ()

    def __init__(self, config: SchedulerConfig, kv: KVCacheManager):
        self.config = config
        self.kv = kv
        self.running: list[Request] = []
        self.waiting = make_queue(config.policy)
        self.landed: deque = deque()    # landed remote KV (ahead_of_queue), admitted before the queue
        self.priority_policy = config.policy == "priority"
        self.num_preemptions = 0
        self.num_ff_steps = 0       # steps applied in bulk by fast-forward
        self.num_ff_queued_steps = 0    # of which with requests waiting (admission blocked)
        self.num_ff_finishes = 0    # finishes applied inside fast-forward runs
        # pipeline parallelism (llmservingsim.pipeline): a request whose sampled token is in an
        # in-flight batch has nothing to schedule (vLLM without async scheduling: num_new == 0)
        self.skip_in_flight = False
        self.num_receiving = 0      # requests WAITING_FOR_REMOTE_KVS (every source)
        # entries of finished steps, reused by the next passes' decodes (``recycle``)
        self._spare: list[ScheduledRequest] = []

    def add_request(self, req: Request) -> None:
        req.status = RequestStatus.WAITING
        self.waiting.add(req)

    def has_work(self) -> bool:
        return bool(self.running) or bool(self.waiting) or bool(self.landed)

    # ---- schedule -----------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        cfg = self.config
        kv = self.kv
        budget = cfg.max_num_batched_tokens
        threshold = cfg.long_prefill_token_threshold
        # the output's slots stored directly (SchedulerOutput() through its dataclass
        # __init__ costs some 4,000 instructions); its tallies are stored at the end
        out = _new(SchedulerOutput)
        out.scheduled = scheduled = []
        out.preempted = []
        out.remote_kv = None
        out.general = general = []
        out.prefill_tokens = out.prefill_ctx_sum = 0
        append = scheduled.append
        running = self.running
        last_pos = cfg.max_model_len - 1
        # pipeline parallelism (llmservingsim.pipeline): a request whose token is in flight in
        # another batch holds a placeholder and has nothing to schedule
        skip_in_flight = self.skip_in_flight
        req_blocks = kv.req_blocks
        bs = kv.block_size
        pool = kv.pool
        free_queue = pool.free_queue
        # tallies of the decode runs below over their ctx_before (SchedulerOutput; each
        # decode's KV length is ctx_before + 1); every other entry goes to ``general`` and
        # is tallied at the end
        nd = kv_sum = kv_max = 0
        kv_min = 1 << 62
        retally = False
        spare = self._spare
        pop = spare.pop
        i = 0
        while i < len(running) and budget > 0:
            # A run of decodes (the common case: every running request, every step), one
            # token each, so at most ``budget`` of them: KVCacheManager.allocate_slots, then
            # _commit, inlined (the token reaches the known end, so the step samples). A
            # running request holds the blocks of all its computed tokens, so a token that
            # neither opens nor completes a block (known % bs > 1) is inside a held block and
            # needs no block lookup at all. The run stops at the first request that is not
            # such a decode (a prefill chunk, max_model_len, a block to reclaim, nothing
            # computed yet: not a decode for the tallies); the general path below takes it,
            # and the next run starts after it.
            start = len(scheduled)
            skipped = 0
            run = running[i:i + budget]
            if len(spare) < len(run):       # a decode-shaped entry for each (``recycle``)
                spare += [ScheduledRequest(None, 1, 0, True) for _ in range(len(run) - len(spare))]
            for req in run:
                known = req.num_known_tokens
                if skip_in_flight and known != req.num_tokens:
                    skipped += 1        # its token is in flight (pipeline parallelism)
                    continue
                if known >= req.max_len:
                    skipped += 1        # its last token is in flight: anticipated finish
                    continue
                computed = req.num_computed_tokens
                if known - computed != 1 or computed >= last_pos:
                    break
                if known % bs < 2:
                    if not computed % bs:
                        # its token starts a block: held already (allocated past its
                        # computed tokens), or one is free and allocate_slots' one-block
                        # path without reclaim is inlined (the same pop); otherwise the
                        # general path (a reclaim, or a failure)
                        held = req_blocks.get(req.request_id)
                        if held is None or not computed:
                            break
                        cap = len(held) * bs
                        if computed == cap and free_queue.num_free:
                            held += pool.get_new_blocks(1)
                        elif computed >= cap:
                            break
                    if not known % bs and known == req.num_tokens:
                        # its token completes a block, all of whose tokens are known:
                        # publish it (allocate_slots). With a placeholder, allocate_slots'
                        # publish (up to num_tokens <= computed tokens) is a no-op: those
                        # blocks are published already (module docstring, "Publication").
                        kv.cache_blocks(req, known)
                req.num_computed_tokens = known
                req.num_known_tokens = known + 1     # a placeholder for its sample
                sr = pop()          # num_new 1, samples: a recycled entry's shape
                sr.req = req
                sr.ctx_before = computed
                append(sr)
                kv_sum += computed
                if computed > kv_max:
                    kv_max = computed
                if computed < kv_min:
                    kv_min = computed
            else:
                req = None
            k = len(scheduled) - start
            nd += k
            budget -= k
            i += k + skipped
            if req is None:
                continue
            num_new = known - computed
            if 0 < threshold < num_new:
                num_new = threshold
            if num_new > budget:
                num_new = budget
            if num_new > last_pos - computed:
                num_new = last_pos - computed
            if num_new <= 0:
                i += 1
                continue
            ok = True
            while not kv.allocate_slots(req, num_new):
                if self.priority_policy:
                    victim = max(running, key=lambda r: (r.priority, r.arrival_ns))
                    vidx = running.index(victim)
                    running.pop(vidx)
                    sr = _take(scheduled, victim)
                    if sr is not None:      # already scheduled this step: give its tokens back
                        budget += sr.num_new
                        self._unschedule(sr)
                        retally = True      # the tallies are redone at the end
                    if vidx < i:
                        i -= 1
                else:
                    victim = running.pop()
                self._preempt(victim)
                out.preempted.append(victim)
                if victim is req:
                    ok = False
                    break
            if not ok:
                break
            scheduled.append(self._commit(req, num_new))
            general.append(scheduled[-1])
            budget -= num_new
            i += 1

        out.first_admitted = len(scheduled)
        if not out.preempted:
            waiting = self.waiting
            landed = self.landed
            sources = self.kv_sources
            while (landed or waiting) and budget > 0 and len(running) < cfg.max_num_seqs:
                req = landed[0] if landed else waiting.peek()
                hits, num_hit, num_new = self._admission_chunk(req, budget)
                if num_new <= 0:
                    break
                if not kv.can_fit_full_sequence(req, hits):
                    break
                if sources:
                    took = self._wait_for_remote_kvs(req, hits, num_hit, out)
                    if took is None:
                        break
                    if took:
                        continue
                if not kv.allocate_slots(req, num_new, hits, num_hit):
                    break
                self._pop_head(req)
                running.append(req)
                req.status = RequestStatus.RUNNING
                req.num_computed_tokens += num_hit
                if req.num_cached_tokens < 0:
                    req.num_cached_tokens = num_hit
                    kv.prefix_stats.queries += req.prompt_len
                    kv.prefix_stats.hits += num_hit
                scheduled.append(self._commit(req, num_new))
                general.append(scheduled[-1])
                budget -= num_new

        out.num_tokens = cfg.max_num_batched_tokens - budget
        if retally:
            out.num_decodes = out.decode_kv_sum = out.decode_kv_max = out.decode_kv_min = out.num_sampled = 0
            out.tally(scheduled)
        else:
            if nd:
                out.num_decodes, out.decode_kv_sum, out.decode_kv_max, out.decode_kv_min = nd, kv_sum + nd, kv_max + 1, kv_min + 1
            else:
                out.num_decodes = out.decode_kv_sum = out.decode_kv_max = out.decode_kv_min = 0
            out.num_sampled = len(scheduled) - len(general)
            if general:
                out.tally(general)
        return out

    def recycle(self, out: SchedulerOutput) -> None:
        """``out``'s step has ended and its output was applied: nothing reads its entries
        again (the engine core drops it), so the next passes may reuse them instead of
        creating entries (a decode step makes one per running request). Invariant: every
        spare entry is decode-shaped (num_new 1, samples), so a decode run sets only its
        ``req`` and ``ctx_before``."""
        self._spare.extend(out.scheduled)
        for sr in out.general:      # the decode runs' entries are decode-shaped already
            sr.num_new = 1
            sr.samples = True
        out.scheduled = []

    def _pop_head(self, req: Request) -> None:
        """Take the admission head ``req`` off its queue: landed remote-KV requests first."""
        landed = self.landed
        if landed and req is landed[0]:
            landed.popleft()
        else:
            self.waiting.pop()

    def _wait_for_remote_kvs(self, req: Request, hits: list, num_hit: int, out: SchedulerOutput):
        """The admission head may take KV from a source (llmservingsim/remote_kv.py): the
        first source that matches tokens past its local hit gets it blocks for the hit and
        those tokens (unpublished until they land) and parks it as WAITING_FOR_REMOTE_KVS.
        True: parked; False: no source matched (admit as usual); None: its blocks cannot be
        allocated (admission stops)."""
        for src in self.kv_sources:
            num_external = src.get_num_new_matched_tokens(req, hits, num_hit)
            if num_external is None:
                continue
            if not self.kv.allocate_slots(req, num_external, hits, num_hit, publish=False):
                return None
            self._pop_head(req)
            req.status = RequestStatus.WAITING_FOR_REMOTE_KVS
            self.num_receiving += 1
            src.update_state_after_alloc(req, hits, num_hit, num_external)
            parked = out.remote_kv
            if parked is None:
                parked = out.remote_kv = {}
            parked.setdefault(src, []).append(req)
            return True
        return False

    def finished_recving(self, req: Request, num_computed: int, ahead_of_queue: bool) -> None:
        """A parked request's KV landed (vLLM's ``_update_waiting_for_remote_kv``): its
        blocks are published up to ``num_computed`` tokens, which count as computed, and it
        is admitted again first: from the landed FIFO before the waiting queue
        (``ahead_of_queue``, ahead of any priority too) or from the waiting queue's front."""
        self.kv.cache_blocks(req, num_computed)
        req.num_computed_tokens = num_computed
        req.status = RequestStatus.PREEMPTED if req.num_preemptions else RequestStatus.WAITING
        self.num_receiving -= 1
        if ahead_of_queue:
            self.landed.append(req)
        else:
            self.waiting.prepend(req)

    def admission_blocked(self, num_decodes: int):
        """Whether the admission phase admits nothing now and at every next schedule while
        only the ``num_decodes`` running decodes run (one token each, every allocation
        fitting in the free blocks, no arrival, finish or entry change): fast-forward under
        load. Returns None when it may admit; otherwise ``(k, h)``: it stays blocked unless
        a block with hash ``h`` (the head's block ``k``) is published, extending the head's
        cached prefix; ``(-1, None)`` when nothing published can unblock it.

        Why blocking persists: decode allocations only lower the free count, and a popped
        block that was one of the head's hits truncates its hits by t blocks, which adds t
        blocks to its need and removes at most t evictable or entry-held hits from it. So
        the head's need never falls while the free and reclaimable counts never rise; only
        a newly published block at the end of its cached prefix can lower the need."""
        cfg = self.config
        budget = cfg.max_num_batched_tokens - num_decodes
        if not self.waiting or len(self.running) >= cfg.max_num_seqs or budget <= 0:
            return -1, None
        req = self.waiting.peek()
        kv = self.kv
        if (cfg.enable_chunked_prefill and not req.num_computed_tokens
                and cdiv(req.num_tokens, kv.block_size) <= kv.pool.num_free):
            # it fits with no cache hit (hits only lower its need) and a chunk of it fits
            # the budget: admitted, so no prefix lookup is needed to say so (the common
            # case: a request that arrived during the step that just ended)
            return None
        hits, _, num_new = self._admission_chunk(req, budget)
        if num_new > 0 and kv.can_fit_full_sequence(req, hits):
            return None
        if req.num_computed_tokens or not kv.enable_caching:
            return -1, None
        k = len(hits)
        if k >= (req.num_tokens - 1) // kv.block_size:     # the longest prefix a lookup takes
            return -1, None
        return k, req.stream.block_hashes(k + 1)[k]

    def _admission_chunk(self, req: Request, budget: int) -> tuple[list, int, int]:
        """The waiting head's cache hits, their tokens and the tokens admission would schedule
        for it with ``budget`` left; 0 tokens when admission stops before the fit check (a
        chunk that chunked prefill may not split, or nothing to schedule)."""
        cfg = self.config
        hits, num_hit = self.kv.get_computed_blocks(req) if req.num_computed_tokens == 0 else ([], 0)
        num_new = req.num_tokens - req.num_computed_tokens - num_hit
        threshold = cfg.long_prefill_token_threshold
        if 0 < threshold < num_new:
            num_new = threshold
        if not cfg.enable_chunked_prefill and num_new > budget:
            return hits, num_hit, 0
        return hits, num_hit, max(min(num_new, budget), 0)

    def _commit(self, req: Request, num_new: int) -> ScheduledRequest:
        before = req.num_computed_tokens
        req.num_computed_tokens = before + num_new
        samples = req.num_computed_tokens >= req.num_known_tokens
        if samples:
            req.num_known_tokens += 1           # a placeholder for its sample
        sr = _new(ScheduledRequest)     # ScheduledRequest(req, num_new, before, samples), slots stored
        sr.req = req
        sr.num_new = num_new
        sr.ctx_before = before
        sr.samples = samples
        return sr

    def _unschedule(self, sr: ScheduledRequest) -> None:
        if sr.samples:
            sr.req.num_known_tokens -= 1
        sr.req.num_computed_tokens = sr.ctx_before

    def _preempt(self, req: Request) -> None:
        self.kv.free(req)
        req.status = RequestStatus.PREEMPTED
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.prepend(req)

    def advance_decodes(self, pending: SchedulerOutput, steps: int, first_ns: int, last_ns: int) -> None:
        """Fast-forward: ``steps`` decode cycles of the batch ``pending`` (every request
        computed and sampled ``steps`` more tokens; the last sampled at ``last_ns``, a first
        token, if any, at ``first_ns``); ``pending`` becomes the batch after them."""
        for sr in pending.scheduled:
            req = sr.req
            if req.first_token_ns is None:     # a last 1-token prefill chunk samples its first token
                req.first_token_ns = first_ns
            req.num_computed_tokens += steps
            req.num_tokens += steps
            req.num_known_tokens += steps      # its placeholder stays
            req.last_token_ns = last_ns
            sr.ctx_before += steps
        pending.decode_kv_sum += steps * pending.num_decodes      # every entry is a decode
        pending.decode_kv_max += steps
        pending.decode_kv_min += steps
        self.num_ff_steps += steps
        if self.waiting:
            self.num_ff_queued_steps += steps

    def finish_decode(self, req: Request, steps: int, first_ns: int, end_ns: int) -> None:
        """Fast-forward: the running decode ``req`` sampled its last token in the ``steps``-th
        of its bulk steps, which ended at ``end_ns`` (a first token, if none yet, at
        ``first_ns``); it is left as ``update_from_output`` leaves a finished request: the
        schedules after its last token skipped it (that token is never computed), and it
        is off ``running``."""
        if req.first_token_ns is None:
            req.first_token_ns = first_ns
        req.num_computed_tokens += steps - 1
        req.num_tokens += steps
        req.num_known_tokens += steps - 1      # its last token's placeholder is gone
        req.last_token_ns = end_ns
        self._finished(req, end_ns)
        self.num_ff_finishes += 1

    # ---- update -------------------------------------------------------------------------
    def update_from_output(self, out: SchedulerOutput, now_ns: int) -> list[Request]:
        """Apply a finished step: sampled tokens become real; return finished requests
        (removed from the queues; their blocks are still held for the retention decision)."""
        finished = []
        block_size = self.kv.block_size
        RUNNING = RequestStatus.RUNNING
        scheduled = out.scheduled
        # the entries that sample: all of them when the tally says so (a decode step), so
        # no entry is tested then
        if out.num_sampled != len(scheduled):
            scheduled = [sr for sr in scheduled if sr.samples]
        for sr in scheduled:
            req = sr.req
            # the placeholder becomes a real token: num_known_tokens stays
            n = req.num_tokens = req.num_tokens + 1
            if req.first_token_ns is None:
                req.first_token_ns = now_ns
            req.last_token_ns = now_ns
            # a sampled token completes a block only at a block boundary
            if n % block_size == 0 and req.status == RUNNING:
                self.kv.cache_blocks(req, min(req.num_computed_tokens, n))
            if n >= req.max_len:
                self._finished(req, now_ns)
                finished.append(req)
        return finished

    def _finished(self, req: Request, now_ns: int) -> None:
        """``req`` has its last token at ``now_ns``: off its queue, FINISHED."""
        if req.status == RequestStatus.RUNNING:
            self.running.remove(req)
        elif req.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED):
            self.waiting.remove(req)
        req.status = RequestStatus.FINISHED
        req.finished_ns = now_ns
