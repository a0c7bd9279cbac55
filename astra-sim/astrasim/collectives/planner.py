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
   network has one dimension and ring otherwise (as upstream).
3. **Pipeline.** Each dimension has one queue that runs ``active-chunks-per-dimension`` chunks at
   once (FIFO); a chunk enters the next dimension's queue when its phase ends. With one
   dimension and one active chunk, chunks simply run back to back: T = chunks * T_chunk.

Everything is memoized per (kind, size, group, involved dims): repeated queries cost one dict
lookup.
"""
from __future__ import annotations

import heapq
from collections import deque
from typing import Optional, Sequence

from ..config.system import Implementation, SystemConfig
from ..errors import ConfigError, WorkloadError
from ..network.base import NetworkBackend
from .algorithms import plan_phase
from .phase_time import phase_ns

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
        self._phase_memo: dict = {}

    # ------------------------------------------------------------------ public
    def collective_ns(self, kind, size: int, group: Optional[Sequence[int]] = None,
                      involved_dims: Optional[Sequence[bool]] = None) -> int:
        """Duration in ns of one collective when all members start at the same time."""
        key = (kind, size, None if group is None else tuple(group),
               None if involved_dims is None else tuple(involved_dims))
        t = self._memo.get(key)
        if t is None:
            t = self._memo[key] = self._compute(normalize_kind(kind), int(size), key[2], key[3])
        return t

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

    def _phase(self, impl: Implementation, kind: str, members: tuple[int, ...], size: int):
        key = (impl.algorithm, impl.window, kind, members, size)
        hit = self._phase_memo.get(key)
        if hit is None:
            plan = plan_phase(impl.algorithm, kind, len(members), size, impl.window)
            t = phase_ns(plan, members, self.network, self.system.endpoint_delay_ns,
                         self.system.local_mem_bw_gbs)
            hit = self._phase_memo[key] = (t, plan.final_size)
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

    def _compute(self, kind: str, size: int, group, involved) -> int:
        chunk, chunks = self._chunking(kind, size)
        if chunks == 0:
            return 0
        n_all = self.network.npus_count
        if group is not None and len(group) != n_all:
            impls = self.system.implementations[kind]
            impl = impls[0] if len(impls) == 1 else Implementation("ring")
            t, _ = self._phase(impl, kind, tuple(group), chunk)
            return pipeline_ns(chunks, [("group", t)], self.system.active_chunks_per_dimension)
        ldims = self._logical_dims(kind)
        active = [(d, impl, m) for d, impl, m in ldims
                  if len(m) > 1 and (involved is None or d >= len(involved) or involved[d])]
        if kind == "all-gather":
            active.reverse()
        if kind == "all-reduce" and self.system.collective_optimization == "localBWAware" and len(active) > 1:
            steps = ([(a, "reduce-scatter") for a in active[:-1]] + [(active[-1], "all-reduce")]
                     + [(a, "all-gather") for a in reversed(active[:-1])])
        else:
            steps = [(a, kind) for a in active]
        phases = []
        remain = chunk
        for (dim, impl, members), k in steps:
            t, remain = self._phase(impl, k, members, remain)
            phases.append((dim, t))
        return pipeline_ns(chunks, phases, self.system.active_chunks_per_dimension)
