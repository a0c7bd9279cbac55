"""Data parallelism inside one server (vLLM 0.19 ``--data-parallel-size``).

One concept: a server is ``dp`` engine cores (ranks), each an :class:`Instance` with its own
scheduler and KV cache; the server picks a rank per request as vLLM's internal DP load
balancer does, and for mixture-of-experts models steps its ranks in lockstep waves.
docs/data-expert-parallel.md explains the sources and what is approximated.

Invariants (tests/engine/test_data_parallel.py):
- the Cluster addresses servers (``submit``, ``load``, ``num_instances``); a request lives on
  one rank for its whole life; its ``CallInfo.instance`` and the KV residency hooks name the
  server, so the program layer sees one instance per server; the engine cores are
  ``Cluster.instances`` in server order (core index = server x dp + rank) and a program's
  retained KV entry is on at most one core (a protect decision releases the others);
- rank choice (``DPLoadBalancer``, ``core_client.py`` ``DPLBAsyncMPClient
  .get_core_engine_for_request``): the lowest ``4 x waiting + running`` over the ranks'
  counts as last published, ties to the lowest rank; the chosen rank's waiting count is
  incremented locally until the next publication (every 100 ms, ``coordinator.py``
  ``stats_update_interval_ms``);
- lockstep (MoE, ``core.py`` ``DPEngineCoreProc.run_busy_loop``): a step starts on every
  rank at once and lasts as long as the slowest rank; a rank with nothing scheduled runs a
  dummy step (``execute_dummy_batch``: one token) while the wave lasts; the wave ends only
  at a step count that is a multiple of 32 at which no rank has work
  (``_has_global_unfinished_reqs``), so up to 31 dummy steps follow the last request.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .errors import StuckError
from .expert_parallel import EPCommModel, MoERankTimer
from .instance import Instance
from .perf_model import BatchShape
from .scheduler import SchedulerOutput
from .step_timer import StepTimer, StepTiming, shape_of

WAITING_WEIGHT = 4                      # core_client.py: score = waiting * 4 + running
STATS_INTERVAL_NS = 100_000_000         # coordinator.py: stats_update_interval_ms = 100
WAVE_CHECK_STEPS = 32                   # core.py: finish-sync all-reduce every 32 steps
DUMMY_SHAPE = BatchShape(1, 0.0, 1, 0, 0, 0, 0)     # execute_dummy_batch: one token, no sampling


class DPLoadBalancer:
    """vLLM's internal DP load balancer for one front end (``eng_start_index`` 0, one API
    server: ``client_count`` 1). The coordinator's published counts are read lazily: the
    first choice in a new 100-ms period takes the ranks' counts at that moment."""

    def __init__(self, ranks: list):
        self.ranks = ranks
        self.counts = [[0, 0] for _ in ranks]       # [waiting, running] as the front end sees them
        self._period = 0
        self.assigned = [0] * len(ranks)            # requests sent to each rank (summary.json)

    def choose(self, now_ns: int) -> int:
        period = now_ns // STATS_INTERVAL_NS
        if period != self._period:
            self._period = period
            self.counts = [[len(r.scheduler.waiting), len(r.scheduler.running)] for r in self.ranks]
        best, best_score = 0, None
        for i, (waiting, running) in enumerate(self.counts):
            score = waiting * WAITING_WEIGHT + running
            if best_score is None or score < best_score:
                best, best_score = i, score
        self.counts[best][0] += 1
        self.assigned[best] += 1
        return best


@dataclass(slots=True)
class LockstepTiming(StepTiming):
    """A rank's part of a lockstep step: ``total_ns`` is the group's step; ``comm_ns``
    includes the rank's TP all-reduces, the EP collectives and its wait for the slowest rank."""
    tp_comm_ns: int = 0
    ep_all_gather_ns: int = 0
    ep_reduce_scatter_ns: int = 0
    dp_wait_ns: int = 0


class LockstepTimer:
    """Times one lockstep step of a MoE server from its ranks' scheduler outputs."""

    def __init__(self, timer: StepTimer, moe: MoERankTimer, ep_comm: Optional[EPCommModel], moe_layers: int):
        self.timer, self.moe, self.ep_comm, self.moe_layers = timer, moe, ep_comm, moe_layers

    def rank_ns(self, shape: BatchShape, dummy: bool, gathered: int, max_tokens: int) -> tuple:
        """(compute, tp comm, ep all-gather, ep reduce-scatter, overhead) of one rank in ns."""
        t, perf = self.timer, self.timer.perf
        T = shape.num_tokens
        cu = perf.compute_us(shape)     # lockstep servers have pp = 1 (MoE dp x pp is refused)
        if dummy:                   # a dummy forward computes no logits and samples nothing
            cu -= perf.per_sequence_us(shape.num_seqs)
        # the bundle's MoE at the rank's own tokens, replaced by the rank's share of the gathered tokens
        cu += self.moe_layers * (self.moe.us(T, gathered) - perf.moe_us(T))
        tp_comm = t.comm.exposed_comm_ns(shape) if t.comm is not None else 0
        ag = rs = 0
        if self.ep_comm is not None:
            ag1, rs1 = self.ep_comm.layer_ns(max_tokens)
            ag, rs = self.moe_layers * ag1, self.moe_layers * rs1
        overhead = round(t.framework.us(shape.num_prefills, shape.prefill_tokens, T, cu) * 1000.0)
        return round(cu * 1000.0), tp_comm, ag, rs, overhead

    def time(self, outs: list) -> list[LockstepTiming]:
        shapes = [shape_of(o) if o else DUMMY_SHAPE for o in outs]
        gathered = sum(s.num_tokens for s in shapes)
        max_tokens = max(s.num_tokens for s in shapes)
        parts = [self.rank_ns(s, not o, gathered, max_tokens) for s, o in zip(shapes, outs)]
        totals = [sum(p) for p in parts]
        step = max(max(totals), 1000)
        return [LockstepTiming(step, c, tp + ag + rs + (step - tot), ovh, tp, ag, rs, step - tot)
                for (c, tp, ag, rs, ovh), tot in zip(parts, totals)]


class DPRank(Instance):
    """An engine core of a lockstep server: its steps are started and ended by the group."""
    group: "LockstepGroup"
    dummy_steps: int = 0

    def _start(self, now: int) -> None:
        if not self.group.ending:       # a submit during the group's step end waits for it
            self.group.start(now)


class LockstepGroup:
    """The ranks of one MoE server stepping together (see the module docstring)."""

    def __init__(self, ranks: list, timer: LockstepTimer):
        self.ranks, self.timer = ranks, timer
        self.loop = ranks[0].loop
        self.in_wave = False
        self.step_counter = 0
        self.ending = False
        self.dummy_steps = 0
        for r in ranks:
            r.group = self
            r.fast_forward = False          # fast-forward times one engine alone

    def _next_output(self, r: Instance, now: int) -> SchedulerOutput:
        out, r.pending = r.pending, None
        if out:
            return out
        if not r.scheduler.has_work():
            return SchedulerOutput()
        out = r.scheduler.schedule()
        while not out and out.preempted:     # as Instance._start: schedule again with the freed blocks
            out = r.scheduler.schedule()
        if not out and r.scheduler.waiting and not r.scheduler.running:
            head = r.scheduler.waiting.peek()
            raise StuckError(
                f"instance {r.server} rank {r.index} cannot admit request {head.request_id} (program "
                f"{head.owner}, call {head.call_index}, {head.num_tokens} tokens) with nothing running at "
                f"t={now / 1e9:.3f} s: {r.kv.num_free_blocks} free KV blocks")
        return out

    def start(self, now: int) -> None:
        outs = [self._next_output(r, now) for r in self.ranks]
        if not any(outs) and not self.in_wave:
            return
        if not self.in_wave:            # START_DP_WAVE: every rank joins the new wave
            self.in_wave, self.step_counter = True, 0
        timings = self.timer.time(outs)
        step = timings[0].total_ns
        for r, out, timing in zip(self.ranks, outs, timings):
            for sr in out.scheduled:
                if sr.req.first_scheduled_ns is None:
                    sr.req.first_scheduled_ns = now
            r.last_step_ns = step
            r.step_end_ns = now + step
            r.current = out
            r.busy_ns += step
            r.num_steps += 1
            if not out:
                r.dummy_steps += 1
                self.dummy_steps += 1
            if r._on_step is not None:
                r._on_step(r, out, now, timing)
            if r.async_scheduling:
                r.pending = r.scheduler.schedule()
        self.loop.schedule(now + step, self._end)

    def _end(self) -> None:
        now = self.loop.now
        self.ending = True
        try:
            for r in self.ranks:
                out, r.current = r.current, None
                if out:
                    for req in r.scheduler.update_from_output(out, now):
                        r._finish(req, now)
        finally:
            self.ending = False
        self.step_counter += 1
        if self.step_counter % WAVE_CHECK_STEPS == 0:       # the finish-sync all-reduce
            self.in_wave = any(r.scheduler.has_work() or r.pending for r in self.ranks)
            if not self.in_wave:
                self.step_counter = 0
        if self.in_wave or any(r.scheduler.has_work() for r in self.ranks):
            self.start(now)


class DPServer:
    """One server of ``dp`` engine cores behind vLLM's DP load balancer; ``group`` is the
    lockstep driver of a MoE server (None: the ranks step independently, as vLLM runs a
    dense model's DP ranks)."""

    def __init__(self, index: int, ranks: list, group: Optional[LockstepGroup] = None):
        self.index, self.ranks, self.group = index, ranks, group
        self.balancer = DPLoadBalancer(ranks)

    def choose(self, now_ns: int) -> Instance:
        return self.ranks[self.balancer.choose(now_ns)]


def server_load(ranks: list, make):
    """A server's load as the program layer sees it: the sum over its ranks of running and
    waiting calls, KV blocks in use and in the pools, in-flight and running-context tokens;
    utilisation = used / pool over all ranks (vLLM's usage: cached free blocks count as free).
    A call still needs to fit in one rank's pool (``Instance.check_fits``)."""
    running = waiting = used = usable = inflight = ctx = 0
    for r in ranks:
        pool = r.kv.pool
        bs = r.kv.block_size
        running += len(r.scheduler.running)
        waiting += len(r.scheduler.waiting)
        used += (pool.num_usable - pool.num_free) * bs
        usable += pool.num_usable * bs
        inflight += r.current.num_tokens if r.current is not None else 0
        ctx += sum(q.num_tokens for q in r.scheduler.running)
    free_cached = sum(r.kv.pool.free_queue.num_free for r in ranks)
    denom = sum(r.kv.pool.num_blocks - 1 for r in ranks)
    return make(running, waiting, 1.0 - free_cached / denom if denom else 0.0, used, usable, inflight, ctx)
