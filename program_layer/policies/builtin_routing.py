"""Built-in routing policies (paper §3.3). ``inflight[i]`` is instance i's ``InflightLoad``."""
from __future__ import annotations

from typing import Optional

from ._params import integer, real
from .base import DECODE_ROLES, PREFILL_ROLES, RoutingPolicy

__all__ = ["RoundRobin", "LeastLoaded", "SessionAffinity", "LeastExpectedCompletion", "least_loaded"]


def least_loaded(inflight: tuple, among=None) -> int:
    """The instance (of ``among``, default all) with the fewest queued-or-running calls
    (num_running + num_waiting); ties go to the lower KV utilization, then the lower index."""
    def key(i: int):
        load = inflight[i]
        return (load.num_running + load.num_waiting, load.kv_utilization or 0.0, i)
    return min(range(len(inflight)) if among is None else among, key=key)


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


class LeastExpectedCompletion(RoutingPolicy):
    """Speed-aware: the instance where a new call's queue clears first.

    Expected completion of instance i: ``(num_running + num_waiting + 1) x step_i``, the
    calls ahead of it plus itself, each costing the instance's reference step time
    (``InflightLoad.decode_step_s + prefill_step_s``: a faster device or a larger TP group
    has smaller ones). Ties go to fewer calls, then lower KV utilization, then the lower
    index; without speed facts (0.0) it is ``least-loaded``. In a cluster with
    prefill/decode roles it returns a pair: the prefill-capable instance with the least
    ``(calls + 1) x prefill_step_s`` and the decode-capable one with the least
    ``(calls + 1) x decode_step_s`` (program_layer/roles.py).
    """
    name = "least-ect"

    @staticmethod
    def _best(inflight, among, step):
        def key(i: int):
            load = inflight[i]
            calls = load.num_running + load.num_waiting
            return ((calls + 1) * step(load), calls, load.kv_utilization or 0.0, i)
        return min(among, key=key)

    def select(self, pcb, inflight, now):
        n = range(len(inflight))
        if all(load.role == "both" for load in inflight):
            return self._best(inflight, n, lambda x: x.decode_step_s + x.prefill_step_s)
        p = self._best(inflight, [i for i in n if inflight[i].role in PREFILL_ROLES],
                       lambda x: x.prefill_step_s)
        d = self._best(inflight, [i for i in n if inflight[i].role in DECODE_ROLES],
                       lambda x: x.decode_step_s)
        return (p, d)
