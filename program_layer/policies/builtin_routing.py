"""Built-in routing policies (paper §3.3). ``inflight[i]`` is instance i's ``InflightLoad``."""
from __future__ import annotations

from typing import Optional

from ._params import integer, real
from .base import RoutingPolicy

__all__ = ["RoundRobin", "LeastLoaded", "SessionAffinity", "least_loaded"]


def least_loaded(inflight: tuple) -> int:
    """The instance with the fewest queued-or-running calls (num_running + num_waiting);
    ties go to the lower KV utilization, then the lower index."""
    def key(i: int):
        load = inflight[i]
        return (load.num_running + load.num_waiting, load.kv_utilization or 0.0, i)
    return min(range(len(inflight)), key=key)


class RoundRobin(RoutingPolicy):
    """Calls go to instances 0, 1, ..., n-1, 0, ... in release order."""
    name = "round-robin"

    def __init__(self):
        self._next = 0

    def select(self, pcb, inflight, now):
        choice = self._next % len(inflight)
        self._next = choice + 1
        return choice


class LeastLoaded(RoutingPolicy):
    """See ``least_loaded``."""
    name = "least-loaded"

    def select(self, pcb, inflight, now):
        return least_loaded(inflight)


class SessionAffinity(RoutingPolicy):
    """Reuse the program's prior instance (where its KV is) unless that instance is over
    capacity, then fall back to the least-loaded instance (first calls too).

    Over capacity: KV utilization above ``threshold`` (default 0.9, the upper knee of eq. 9),
    or, when ``max_waiting`` is set, more than ``max_waiting`` calls waiting there.
    """
    name = "session-affinity"

    def __init__(self, threshold: float = 0.9, max_waiting: Optional[int] = None):
        self.threshold = real("threshold", threshold, lo=0.0)
        self.max_waiting = None if max_waiting is None else integer("max_waiting", max_waiting,
                                                                    lo=0)

    def select(self, pcb, inflight, now):
        prior = pcb.prior_instance
        if prior is not None and 0 <= prior < len(inflight):
            load = inflight[prior]
            over = (load.kv_utilization or 0.0) > self.threshold or (
                self.max_waiting is not None and load.num_waiting > self.max_waiting)
            if not over:
                return prior
        return least_loaded(inflight)
