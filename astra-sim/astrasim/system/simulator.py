"""``SystemSimulator``: the in-process entry point the serving engine calls per step.

Construction validates the configuration once (implementation lists vs. network dimensions,
communicator groups vs. NPU count); :meth:`SystemSimulator.run` evaluates one set of per-rank
Chakra graphs; :meth:`SystemSimulator.collective_time_ns` answers the closed-form duration of a
single collective (memoized), for callers that memoize whole graphs by shape.

The simulator owns no state between runs except memo tables, so runs are independent and
deterministic: the same graphs give the same result.
"""
from __future__ import annotations

from typing import Optional, Sequence

from ..chakra.schema import Node
from ..collectives.planner import CollectivePlanner
from ..config.groups import parse_comm_groups
from ..config.memory import RemoteMemoryConfig
from ..config.system import SystemConfig
from ..network.base import NetworkBackend
from ..errors import AstraSimError
from .engine import SHARED_MEMORIES, NotSymmetric, Run, RunResult


class SystemSimulator:
    """ASTRA-Sim-compatible system layer over a :class:`NetworkBackend`.

    ``comm_groups`` maps group id (> 0) to member NPU ids, as in a comm-group JSON; nodes name
    their group with the ``pg_name`` attribute ("" or "0" = all NPUs).
    """

    def __init__(self, network: NetworkBackend, system: Optional[SystemConfig] = None,
                 comm_groups: Optional[dict] = None,
                 remote_memory: Optional[RemoteMemoryConfig] = None):
        self.network = network
        self.system = system if system is not None else SystemConfig.with_algorithm("ring", len(network.dims))
        self.planner = CollectivePlanner(network, self.system)
        raw = {str(k): list(v) for k, v in (comm_groups or {}).items()}
        self.comm_groups = parse_comm_groups(raw, "comm_groups", network.npus_count)
        self.remote_memory = remote_memory

    @property
    def npus_count(self) -> int:
        return self.network.npus_count

    def collective_time_ns(self, kind, size_bytes: int, group: Optional[Sequence[int]] = None,
                           involved_dims: Optional[Sequence[bool]] = None) -> int:
        """Duration of one collective started by all members at once.

        ``kind``: "all-reduce" / "all_reduce" / "ALL_REDUCE" (also all-gather, reduce-scatter,
        all-to-all, or a :class:`CollectiveCommType`). ``size_bytes`` is the Chakra ``comm_size``:
        the buffer being reduced / exchanged; for all-gather it is what each rank contributes
        (upstream semantics). ``group``: member NPU ids (``None`` = all NPUs).
        """
        return self.planner.collective_ns(kind, size_bytes, group, involved_dims)

    def run(self, per_rank_nodes: Sequence[Sequence[Node]]) -> RunResult:
        """Simulate one graph per rank (``per_rank_nodes[r]`` for NPU r) to completion.

        When every rank is given the very same sequence object (``[nodes] * N``, or
        ``read_workload(..., share_identical=True)`` on byte-identical files), the graph is
        simulated once in lockstep, which is exact while every collective spans all NPUs and
        its members finish together, and there are no send/recv nodes and no remote memory
        shared between ranks. Anything else (an error included) falls back to the per-rank
        run, so the result and any error are always those of the per-rank run."""
        first = per_rank_nodes[0] if per_rank_nodes else None
        memory = self.remote_memory
        if (len(per_rank_nodes) == self.network.npus_count > 1
                and all(r is first for r in per_rank_nodes)
                and (memory is None or memory.memory_type not in SHARED_MEMORIES)):
            try:
                one = Run([first], self.network, self.system, self.planner, self.comm_groups,
                          memory, symmetric=True, exact=True).execute()
            except (NotSymmetric, AstraSimError):
                pass
            else:
                return _repeat(one, len(per_rank_nodes))
        return Run(per_rank_nodes, self.network, self.system, self.planner, self.comm_groups,
                   self.remote_memory).execute()

    def run_symmetric(self, nodes: Sequence[Node], ranks: Optional[int] = None) -> RunResult:
        """Fast path when every rank runs the same graph (e.g. tensor parallelism).

        Simulates ``nodes`` once: identical ranks issue each collective at the same instant, so
        no rank waits for another, and each collective takes its slowest member's time. This
        equals :meth:`run` on ``[nodes] * N`` whenever all members of a collective finish
        together (every default-group collective, and groups whose ring has equal hops); for a
        group whose ring has unequal hops it is the slowest member's time on every rank. The
        result lists are repeated for ``ranks`` (default: all NPUs). Send/recv and remote
        memories shared between ranks raise WorkloadError (they break the symmetry).
        """
        one = Run([nodes], self.network, self.system, self.planner, self.comm_groups,
                  self.remote_memory, symmetric=True).execute()
        return _repeat(one, self.network.npus_count if ranks is None else ranks)


def _repeat(one: RunResult, k: int) -> RunResult:
    """The result of one symmetric rank as every one of ``k`` ranks."""
    return RunResult(one.finish_ns * k, one.exposed_comm_ns * k, one.comm_only_ns * k,
                     one.gpu_compute_ns * k)
