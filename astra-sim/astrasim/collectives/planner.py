"""Collective time: chunking, per-dimension phases and the chunk pipeline (ASTRA-Sim's Sys).

How a collective of ``S`` bytes becomes time (all participating ranks start together):

1. **Chunks** (``preferred-dataset-splits`` = s): chunk = S // s; except for all-gather, a chunk
   smaller than the total NPU count N is raised to N and S to s*N. There are ceil(S / chunk)
   chunks of ``chunk`` bytes each (the last one is not shortened, as upstream).
2. **Phases per chunk.** Default group (all NPUs): one phase per network dimension with more
   than one NPU whose ``involved_dim`` entry is true (missing entries count as true), in
   ascending order (descending for all-gather); each phase's input is the previous phase's
   output size. With ``collective-optimization: localBWAware`` an all-reduce becomes
   reduce-scatter on all active dimensions but the last, all-reduce on the last, then
   all-gather back down. A "one*" implementation on dimension d makes one phase over a single
   logical ring of all N NPUs and ends the list. A communicator group smaller than N runs one
   phase on a logical ring of its members (JSON order), with the configured algorithm when the
   network has one dimension and ring otherwise, and an endpoint delay of 10 ns whatever the
   configured ``endpoint-delay`` (as upstream: GROUP_ENDPOINT_DELAY_NS).
3. **Pipeline.** Each dimension has one queue that runs ``active-chunks-per-dimension`` chunks at
   once (FIFO); a chunk enters the next dimension's queue when its phase ends. With one
   dimension and one active chunk, chunks simply run back to back: T = chunks * T_chunk.

4. **Per-rank times.** When a collective is a single phase whose ring spans all its members
   (one-dimensional network, ``one*`` algorithms, communicator groups), every member keeps its
   own clock: it starts when it issues the collective, chunks follow each other per rank, and
   members finish at different times when message costs differ (e.g. a group whose ring wraps
   over a longer path) -- as upstream. With several phases all members start when the last
   one has issued and finish together.

Everything is memoized per (kind, size, group, involved dims) for equal start times: repeated
queries cost one dict lookup.
"""
from __future__ import annotations

import heapq
from collections import deque
from typing import Optional, Sequence

from ..config.system import Implementation, SystemConfig
from ..errors import ConfigError, WorkloadError
from ..network.base import NetworkBackend
from .algorithms import plan_phase
from .direct_sim import direct_chunks_finish_links, direct_phase_finish
from .phase_time import chunks_finish_links, phase_finish

# Upstream times a communicator group's collective on a "local" logical ring whose packets take
# its fast path, which costs a fixed 10 ns per hand-off whatever the system's endpoint-delay
# (MemBus, Transmition::Fast); the default group's phases use the configured endpoint-delay.
GROUP_ENDPOINT_DELAY_NS = 10

_ALIASES = {"allreduce": "all-reduce", "reducescatter": "reduce-scatter", "allgather": "all-gather",
            "alltoall": "all-to-all"}


def normalize_kind(kind) -> str:
    """Accept "all_reduce", "all-reduce", "ALL_REDUCE", "AllReduce"... -> "all-reduce"."""
    key = str(getattr(kind, "name", kind)).lower().replace("_", "").replace("-", "")
    if key not in _ALIASES:
        raise WorkloadError(f"unsupported collective {kind!r} (all-reduce, all-gather, reduce-scatter, all-to-all)")
    return _ALIASES[key]


def pipeline_ns(chunks: int, phases: Sequence[tuple[object, int]], active: int) -> int:
    """Finish time of ``chunks`` identical chunks through ``phases`` [(queue key, ns)]."""
    if chunks <= 0 or not phases:
        return 0
    if len(phases) == 1:
        return -(-chunks // active) * phases[0][1]
    free = {key: active for key, _ in phases}
    queues: dict[object, deque] = {key: deque() for key, _ in phases}
    events: list[tuple[int, int, int, int]] = []  # (time, seq, chunk, phase just finished)
    seq = 0
    finish = 0

    def start(key, now):
        nonlocal seq
        q = queues[key]
        while free[key] and q:
            c, p = q.popleft()
            free[key] -= 1
            heapq.heappush(events, (now + phases[p][1], seq, c, p))
            seq += 1

    def arrive(c, p, now):
        nonlocal finish
        if p == len(phases):
            finish = max(finish, now)
            return
        queues[phases[p][0]].append((c, p))
        start(phases[p][0], now)

    for c in range(chunks):
        arrive(c, 0, 0)
    while events:
        now, _, c, p = heapq.heappop(events)
        key = phases[p][0]
        free[key] += 1
        start(key, now)       # the queue it leaves admits its next chunk first (as upstream)
        arrive(c, p + 1, now)
    return finish


class CollectivePlanner:
    """Computes (and memoizes) collective durations for one network + system configuration."""

    def __init__(self, network: NetworkBackend, system: SystemConfig):
        self.network = network
        self.system = system
        ndims = len(network.dims)
        for kind, impls in system.implementations.items():
            if len(impls) != ndims:
                raise ConfigError(f"has {len(impls)} entries but the network has {ndims} dimension(s)",
                                  file=system.source, key=f"{kind}-implementation")
        self._strides = []
        s = 1
        for d in network.dims:
            self._strides.append(s)
            s *= d.npus
        self._memo: dict = {}
        self._max_memo: dict = {}
        self._phase_memo: dict = {}
        self._steps_memo: dict = {}     # (kind, involved) -> _phase_list's phases (size-free)

    # ------------------------------------------------------------------ public
    def collective_ns(self, kind, size: int, group: Optional[Sequence[int]] = None,
                      involved_dims: Optional[Sequence[bool]] = None) -> int:
        """Duration in ns of one collective when all members start at the same time
        (the slowest member decides)."""
        key = (kind, size, group if group is None else tuple(group),
               involved_dims if involved_dims is None else tuple(involved_dims))
        t = self._max_memo.get(key)
        if t is None:
            t = self._max_memo[key] = max(self.collective_finish(kind, size, group, involved_dims), default=0)
        return t

    def collective_finish(self, kind, size: int, group: Optional[Sequence[int]] = None,
                          involved_dims: Optional[Sequence[bool]] = None,
                          starts: Optional[Sequence[int]] = None,
                          link_free: Optional[dict] = None) -> tuple[int, ...]:
        """Finish time of every member (``group`` order, or NPU 0..N-1 for the default group),
        member i having issued the collective at ``starts[i]`` (default: all at 0).

        ``link_free`` (congestion-aware backends): the caller's link state (link -> time it is
        next free, absolute times like ``starts``); the collective's messages queue behind
        what is reserved there and reserve their own links in it, so collectives and sends
        timed on one ``link_free`` slow each other where they share links.

        Memoized when all members start together on idle links; otherwise computed afresh.
        """
        g = None if group is None else tuple(group)
        inv = None if involved_dims is None else tuple(involved_dims)
        n = self.network.npus_count if g is None else len(g)
        if link_free is not None and self.network.congestion_aware:
            starts = (0,) * n if starts is None else tuple(starts)
            return self._compute(normalize_kind(kind), int(size), g, inv, starts, link_free)
        if starts is not None and any(starts):
            return self._compute(normalize_kind(kind), int(size), g, inv, tuple(starts))
        key = (kind, size, g, inv)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = self._compute(normalize_kind(kind), int(size), g, inv, (0,) * n)
        return hit

    # ------------------------------------------------------------------ internals
    def _chunking(self, kind: str, size: int) -> tuple[int, int]:
        splits = self.system.preferred_dataset_splits
        total = self.network.npus_count
        chunk = size // splits
        if kind != "all-gather" and total > chunk:
            chunk, size = total, splits * total
        if size <= 0:
            return 0, 0
        chunk = max(chunk, 1)
        return chunk, -(-size // chunk)

    def _phase_finish(self, impl: Implementation, kind: str, members: tuple[int, ...], size: int,
                      local: bool, starts: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
        """(per-member finish times, output bytes) of one phase; ``local``: a group ring."""
        key = (impl.algorithm, impl.window, kind, members, size, local, starts)
        hit = self._phase_memo.get(key)
        if hit is None:
            plan = plan_phase(impl.algorithm, kind, len(members), size, impl.window)
            s = self.system
            e = GROUP_ENDPOINT_DELAY_NS if local else s.endpoint_delay_ns
            if impl.algorithm == "direct" and not self.network.congestion_aware:
                msg = size if kind == "all-gather" else size // len(members)
                fin = direct_phase_finish(kind, members, self.network, msg, impl.window, local,
                                          e, s.local_mem_bw_gbs, starts)
            else:
                fin = phase_finish(plan, members, self.network, e, s.local_mem_bw_gbs, starts)
            hit = (tuple(fin), plan.final_size)
            if not any(starts):
                self._phase_memo[key] = hit
        return hit

    def _dim_members(self, dim: int) -> tuple[int, ...]:
        """NPU 0's ring in ``dim`` (all rings of a dimension are identical)."""
        return tuple(k * self._strides[dim] for k in range(self.network.dims[dim].npus))

    def _logical_dims(self, kind: str) -> list[tuple[object, Implementation, tuple[int, ...]]]:
        out = []
        for dim, impl in enumerate(self.system.implementations[kind]):
            if impl.one:
                out.append((dim, impl, tuple(range(self.network.npus_count))))
                break
            out.append((dim, impl, self._dim_members(dim)))
        return out

    def _phase_list(self, kind: str, involved) -> list:
        """[((queue key, implementation, ring members), phase kind)] for the default group."""
        ldims = self._logical_dims(kind)
        active = [(d, impl, m) for d, impl, m in ldims
                  if len(m) > 1 and (involved is None or d >= len(involved) or involved[d])]
        if kind == "all-gather":
            active.reverse()
        if kind == "all-reduce" and self.system.collective_optimization == "localBWAware" and len(active) > 1:
            return ([(a, "reduce-scatter") for a in active[:-1]] + [(active[-1], "all-reduce")]
                    + [(a, "all-gather") for a in reversed(active[:-1])])
        return [(a, kind) for a in active]

    def _per_rank_chunks(self, impl, kind, members, chunk, chunks, local, starts,
                         link_free=None) -> tuple[int, ...]:
        """Chunks of a one-phase collective whose ring spans every member: each rank starts its
        next chunk as soon as one of its ``active`` slots is free (per-rank skew is kept). On a
        congestion-aware backend all chunks are simulated together, sharing links."""
        k = self.system.active_chunks_per_dimension
        if self.network.congestion_aware:     # concurrent chunks share links: one simulation
            e = GROUP_ENDPOINT_DELAY_NS if local else self.system.endpoint_delay_ns
            mem = self.system.local_mem_bw_gbs
            if impl.algorithm == "direct":
                msg = chunk if kind == "all-gather" else chunk // len(members)
                return tuple(direct_chunks_finish_links(kind, members, self.network, msg, impl.window, local,
                                                        e, mem, starts, chunks, k, link_free))
            plan = plan_phase(impl.algorithm, kind, len(members), chunk, impl.window)
            return tuple(chunks_finish_links(plan, members, self.network, e, mem, starts, chunks, k, link_free))
        s0 = starts[0]
        if starts.count(s0) == len(starts):
            # Members that start together and finish one chunk together stay in step: every
            # round of k chunks starts when the last one ended, the loop below with equal
            # slots everywhere. Skewed finishes (a ring that wraps over a longer path) skew the
            # next chunks' starts, which only the loop follows.
            fin, _ = self._phase_finish(impl, kind, members, chunk, local, (0,) * len(starts))
            t = fin[0]
            if fin.count(t) == len(fin):
                return (s0 + -(-chunks // k) * t,) * len(starts)
        slots = [[s] * k for s in starts]
        finish = list(starts)
        for _ in range(chunks):
            st = [min(sl) for sl in slots]
            base = min(st)
            fin, _ = self._phase_finish(impl, kind, members, chunk, local, tuple(x - base for x in st))
            for i, f in enumerate(fin):
                sl = slots[i]
                sl[sl.index(st[i])] = base + f
                finish[i] = max(finish[i], base + f)
        return tuple(finish)

    def _compute(self, kind: str, size: int, group, involved, starts: tuple[int, ...],
                 link_free: Optional[dict] = None) -> tuple[int, ...]:
        chunk, chunks = self._chunking(kind, size)
        if chunks == 0:
            return starts
        n_all = self.network.npus_count
        if group is not None and len(group) != n_all:
            impls = self.system.implementations[kind]
            impl = impls[0] if len(impls) == 1 else Implementation("ring")
            return self._per_rank_chunks(impl, kind, group, chunk, chunks, True, starts, link_free)
        steps = self._steps_memo.get((kind, involved))
        if steps is None:       # the phases depend on the topology alone: one build per kind
            steps = self._steps_memo[(kind, involved)] = tuple(self._phase_list(kind, involved))
        if len(steps) == 1 and len(steps[0][0][2]) == n_all:
            (_dim, impl, members), k = steps[0]
            fin = self._per_rank_chunks(impl, k, members, chunk, chunks, False, starts, link_free)
            return tuple(fin[members.index(r)] for r in range(n_all))
        # several phases (or parallel rings): identical on every rank; start when all have issued
        phases = []
        remain = chunk
        for (dim, impl, members), k in steps:
            fin, remain = self._phase_finish(impl, k, members, remain, False, (0,) * len(members))
            phases.append((dim, max(fin)))
        end = max(starts) + pipeline_ns(chunks, phases, self.system.active_chunks_per_dimension)
        return (end,) * len(starts)
