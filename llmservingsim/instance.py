"""One serving instance: a vLLM engine core (scheduler + KV cache manager) driven by the
simulation's event loop.

Step loop (vllm/v1/engine/core.py). Synchronous: at a step's end the output is applied,
then the next batch is scheduled and launched. Asynchronous scheduling (vLLM 0.19 default):
while step N runs, step N+1 is already scheduled (with placeholders for N's tokens); at
N's end its output is applied, N+1 launches and N+2 is scheduled — so a request arriving
during step N is first scheduled in step N+2. An idle engine schedules an arriving request
at once.
"""
from __future__ import annotations

from typing import Callable, Optional

from hooks import CallInfo, Hooks, RETAINING_KINDS

from .errors import StuckError
from .fast_forward import try_fast_forward
from .frozen import maker
from .events import EventLoop
from .kv_cache_manager import KVCacheManager, cdiv
from .request import Request
from .scheduler import Scheduler, SchedulerOutput
from .step_timer import StepTimer, StepTiming

#: CallInfo's positional constructor (one or two per call; llmservingsim/frozen.py)
_make_info = maker(CallInfo)


class Instance:
    tiers = None            # kv_tiers.InstanceTiers when KV tiers are configured
    # the cluster's ``finish_is_quiet`` (set by ``Cluster.add_instance``): whether what
    # ``_on_finished`` does for a request schedules nothing and reads only the request;
    # None: any finish may (fast-forward then stops before every finish)
    quiet_finish: Optional[Callable[[Request], bool]] = None
    # the cluster's ``events_are_public`` (set by ``Cluster.add_instance``): whether every
    # event but its instances' own steps reads the engine only through the cluster's API;
    # None: a fast-forward run never spans an event (``may_span``)
    public_events: Optional[Callable[[], bool]] = None
    # tokens the running requests hold ahead of the clock: inside a fast-forward run that
    # spans events, each running request's token sampled by the step in flight, whose end
    # the run applied already (``Cluster.load`` subtracts them; 0 otherwise)
    tokens_ahead = 0

    def __init__(self, index: int, loop: EventLoop, scheduler: Scheduler, timer: StepTimer,
                 hooks: Hooks, async_scheduling: bool, on_finished: Callable[[Request, int], Optional[CallInfo]],
                 on_step: Optional[Callable] = None, on_decode_steps: Optional[Callable] = None,
                 fast_forward: bool = False):
        self.index = index          # engine core (Cluster.instances position)
        self.server = index         # what the program layer calls the instance (data_parallel: the server)
        self.loop = loop
        self.scheduler = scheduler
        self.kv: KVCacheManager = scheduler.kv
        self.kv.cancel_event = loop.cancel      # an entry that leaves early cancels its expiry
        self.timer = timer
        self.hooks = hooks
        self.async_scheduling = async_scheduling
        self._on_finished = on_finished
        self._on_step = on_step
        self._on_decode_steps = on_decode_steps  # fast-forward runs (MetricsCollector.on_decode_steps)
        self.fast_forward = fast_forward and async_scheduling
        # releases the owner's KV entries on every instance but ``skip`` (set by the Cluster):
        # a program's newest context supersedes its entries wherever they are
        self.release_owner_entries: Callable[[int, Optional[int], bool], None] = (
            lambda owner, skip, drop: None if skip == self.index else self.kv.release_entry(owner, drop))
        self.current: Optional[SchedulerOutput] = None
        self.pending: Optional[SchedulerOutput] = None
        self.busy_ns = 0
        self.num_steps = 0
        self.last_step_ns = 0
        self.step_end_ns = 0         # when the step in flight ends (valid while ``current``)
        # P/D disaggregation (llmservingsim/disagg.py): finished prefill legs whose blocks
        # wait for their transfer to a decode instance (vLLM's delayed free on the sender)
        self.num_sending = 0

    # ---- arrivals -----------------------------------------------------------------------
    def submit(self, req: Request, ingest_hooks: bool = True) -> None:
        """``ingest_hooks=False``: a P/D decode leg, whose call met the arrival hooks on
        its prefill instance already."""
        now = self.loop.now
        # vLLM's engine loop ingests new requests between steps (core.py run_busy_loop)
        req.queued_ns = now if self.current is None else self.step_end_ns
        hooks = self.hooks
        if ingest_hooks and (hooks.retention is not None or hooks.priority is not None):
            info = self.call_info(req)
            if hooks.retention is not None:
                d = hooks.retention.on_arrival(info, now)
                if d.kind in ("release", "evict"):
                    self.release_owner_entries(req.owner, None, d.kind == "evict")
            if hooks.priority is not None:
                req.priority = hooks.priority.priority(info, now)
        self.scheduler.add_request(req)
        if self.current is None:
            self._start(now)

    def call_info(self, req: Request) -> CallInfo:
        return _make_info(req.request_id, req.owner, self.server, req.arrival_ns, req.prompt_len,
                        req.num_tokens, req.first_scheduled_ns, req.finished_ns, req.num_preemptions)

    # ---- the step loop ------------------------------------------------------------------
    def _start(self, now: int) -> None:
        out = self.scheduler.schedule()
        while not out and out.preempted:
            # A step that only preempted (the victim was the requester itself) schedules
            # nothing; vLLM's busy loop simply schedules again with the freed blocks.
            out = self.scheduler.schedule()
        if out:
            self._launch(out, now)
            return
        if out.remote_kv is not None:       # only KV transfers were started (vLLM: a no-forward step)
            self._start_remote_kv(out.remote_kv, now)
        # a landing transfer (received here, or sent from here) will wake it
        if self.scheduler.waiting and not self.scheduler.running and not (
                self.num_sending or self.scheduler.num_receiving):
            head = self.scheduler.waiting.peek()
            raise StuckError(
                f"instance {self.index} cannot admit request {head.request_id} (program {head.owner}, "
                f"call {head.call_index}, {head.num_tokens} tokens) with nothing running at "
                f"t={now / 1e9:.3f} s: {self.kv.num_free_blocks} free KV blocks")

    def _launch(self, out: SchedulerOutput, now: int, timing: Optional[StepTiming] = None) -> None:
        """Launch ``out`` at ``now``; ``timing``: its ``timer.time(out)`` when the caller has it
        (fast-forward times the step after its bulk steps while planning them)."""
        scheduled = out.scheduled
        for k in range(out.first_admitted, len(scheduled)):     # SchedulerOutput.first_admitted
            req = scheduled[k].req
            if req.first_scheduled_ns is None:
                req.first_scheduled_ns = now
        if timing is None:
            timing = self.timer.time(out)
        self.last_step_ns = timing.total_ns
        self.step_end_ns = now + timing.total_ns
        self.current = out
        self.busy_ns += timing.total_ns
        self.num_steps += 1
        if self._on_step is not None:
            self._on_step(self, out, now, timing)
        if out.remote_kv is not None:       # transfers start as their step launches
            self._start_remote_kv(out.remote_kv, now)
        if self.async_scheduling:
            self.pending = self.scheduler.schedule()
        self.loop.schedule(now + timing.total_ns, self._end_step)

    def _end_step(self) -> None:
        now = self.loop.now
        out, self.current = self.current, None
        finished = self.scheduler.update_from_output(out, now)
        if self.tiers is not None:          # kv_tiers: store the step's new full blocks
            self.tiers.after_step(out, now)
        for req in finished:
            self._finish(req, now)
        self.scheduler.recycle(out)     # the step is over: its entries serve the next passes
        nxt, self.pending = self.pending, None
        if nxt:
            if self.fast_forward and try_fast_forward(self, nxt):
                return
            self._launch(nxt, now)
            return
        if nxt is not None and nxt.remote_kv is not None:  # a pass that only parked requests
            self._start_remote_kv(nxt.remote_kv, now)
        if self.scheduler.has_work():
            self._start(now)

    # ---- requests waiting for remote KV (llmservingsim/remote_kv.py) --------------------
    def _start_remote_kv(self, parked: dict, now: int) -> None:
        """Start the transfers of the requests a pass parked, source by source in the
        scheduler's order (so same-time landings are ordered alike in every run)."""
        for src in self.scheduler.kv_sources:
            reqs = parked.get(src)
            if reqs:
                src.start(reqs, now)

    def finished_recving(self, req: Request, num_computed: int, ahead_of_queue: bool) -> None:
        """A source's transfer for ``req`` landed: publish, re-queue it, wake the engine."""
        self.scheduler.finished_recving(req, num_computed, ahead_of_queue)
        self.wake()

    def wake(self) -> None:
        """An idle engine with work (a request landed, blocks came free) takes its next step."""
        if self.current is None and self.scheduler.has_work():
            self._start(self.loop.now)

    def _finish(self, req: Request, now: int) -> None:
        info = self._on_finished(req, now)
        if req.pd is not None and req.pd.prefill is req:
            return      # a prefill leg keeps its blocks until its KV has been sent (disagg.py)
        decision = None
        if self.hooks.retention is not None:
            # the callback's CallInfo (Cluster.finished builds one) is this one: its fields
            # are the request's, and its instance is checked
            if info is None or info.instance != self.server:
                info = self.call_info(req)
            decision = self.hooks.retention.on_complete(info, now, self.kv.usage())
            if decision.kind in RETAINING_KINDS and decision.deadline_ns > now:
                self.release_owner_entries(req.owner, self.index, False)
        seq = self.kv.finish(req, decision, now)
        if seq is not None:         # protection lapses at the deadline (an event: policies see it)
            kv, owner = self.kv, req.owner
            if decision.kind == "offload":
                tiers = self.tiers
                self.loop.schedule(decision.deadline_ns, lambda: tiers.expire_pin(owner, seq))
            else:
                kv.set_expiry(owner, seq, self.loop.schedule(decision.deadline_ns,
                                                             lambda: kv.expire_entry(owner, seq)))

    def finish_is_quiet(self, req: Request) -> bool:
        """Whether ``_finish(req, t)`` may run before the clock reaches t, inside a
        fast-forward run (llmservingsim/fast_forward.py): it creates no event and reads
        nothing but ``req`` and this instance's KV pool. So: no retention hook (its decision
        reads the cluster and may schedule an expiry), no KV tiers, and the cluster says so
        of its own part (no P/D leg; a listener that only records the call)."""
        return (self.quiet_finish is not None and self.hooks.retention is None and self.tiers is None
                and self.quiet_finish(req))

    def may_span(self) -> bool:
        """Whether a fast-forward run may end with a bulk step that events fall inside
        (llmservingsim/fast_forward.py, "Runs that span events"): every event that can run
        then reads this instance only through what the run keeps at the step's values
        (``current``, ``step_end_ns``, ``Cluster.load``) or schedules. So no retention hook
        (an arrival's decision releases entries, and expiries are events that change the
        pool), no KV tiers and no KV sources (their landings are events on this instance's
        state), and the cluster says its other events are public (``events_are_public``)."""
        return (self.public_events is not None and self.hooks.retention is None and self.tiers is None
                and not self.scheduler.kv_sources and self.public_events())

    # ---- checks -------------------------------------------------------------------------
    def check_fits(self, req: Request) -> None:
        need = cdiv(req.max_len, self.kv.block_size)
        usable = self.kv.pool.num_usable
        if need > usable:
            where = f"{req.spec.source}: " if req.spec.source else ""
            raise StuckError(
                f"{where}program {req.owner} call {req.call_index} needs {req.max_len} "
                f"tokens of KV ({need} blocks) but instance {self.index}'s pool holds "
                f"{usable * self.kv.block_size} tokens ({usable} blocks): it can never run")
