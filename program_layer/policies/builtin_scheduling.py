"""Built-in scheduling policies: the q of eq. 4 (smaller runs first)."""
from __future__ import annotations

from .base import SchedulingPolicy

__all__ = ["FCFS", "ProgramFCFS", "PLAS"]


def _ns(seconds: float) -> int:
    return int(round(seconds * 1e9))


class FCFS(SchedulingPolicy):
    """q = the call's release time r_{p,k}, in integer ns (vLLM's own FCFS order)."""
    name = "fcfs"
    engine_args = {"scheduling_policy": "fcfs"}

    def priority(self, pcb, now):
        return _ns(pcb.release_s)


class ProgramFCFS(SchedulingPolicy):
    """q = the program's arrival a_p, in integer ns (Continuum: program arrival order)."""
    name = "program-fcfs"
    engine_args = {"scheduling_policy": "priority"}

    def priority(self, pcb, now):
        return _ns(pcb.arrival_s)


class PLAS(SchedulingPolicy):
    """q = A_p(r_{p,k}), the program's attained service at release, in integer ms
    (Autellix's least-attained-service, Listing 3)."""
    name = "plas"
    engine_args = {"scheduling_policy": "priority"}

    def priority(self, pcb, now):
        return int(round(pcb.attained_service_s * 1000.0))
