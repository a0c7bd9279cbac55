"""The one event queue and clock of a simulation (SimPy-style core).

``EventLoop`` alone owns ``now``: every other component reads ``loop.now`` and asks for
work to happen later with ``schedule(time_ns, callback)``. Events at equal times run in
insertion order (a per-loop sequence number breaks ties), so runs are deterministic.

One observer may ``watch`` the clock: it is told before time moves past a point it chose,
so it can sample state at fixed times without an event per sample (the metrics' time
series: a long idle stretch costs one call, not one per sample).
"""
from __future__ import annotations

import heapq
import math
from typing import Callable, Optional


class EventLoop:
    """Heap of ``(time_ns, seq, callback)``. ``now`` only moves forward."""

    __slots__ = ("_now", "_queue", "_seq", "_watch_ns", "_watcher")

    def __init__(self) -> None:
        self._now = 0
        self._queue: list = []
        self._seq = 0
        self._watch_ns = math.inf       # no observer: the comparison below is always False
        self._watcher: Optional[Callable[[int], float]] = None

    @property
    def now(self) -> int:
        return self._now

    def schedule(self, time_ns: int, callback: Callable[[], None]) -> None:
        """Run ``callback`` at absolute simulated time ``time_ns`` (not before now)."""
        if time_ns < self._now:
            raise ValueError(f"cannot schedule at {time_ns} ns, before now ({self._now} ns)")
        self._seq += 1
        heapq.heappush(self._queue, (time_ns, self._seq, callback))

    def watch(self, callback: Callable[[int], float], after_ns: float) -> None:
        """Call ``callback(next_ns)`` before the first event later than ``after_ns`` runs (the
        clock still reads the previous event's time; ``next_ns`` is the time about to be
        reached). It returns the next such point (``math.inf``: no more calls). The state it
        can read then is the state after every event at times <= ``after_ns``. The callback
        observes only: it must not schedule events. One watcher per loop."""
        if self._watcher is not None and self._watcher is not callback:
            raise RuntimeError("the event loop already has a watcher")
        self._watcher = callback
        self._watch_ns = after_ns

    def peek(self) -> int | None:
        """Time of the next event, or None when the queue is empty."""
        return self._queue[0][0] if self._queue else None

    def step(self) -> None:
        time_ns, _, callback = heapq.heappop(self._queue)
        if time_ns > self._watch_ns:
            self._watch_ns = self._watcher(time_ns)
        self._now = time_ns
        callback()

    def run(self, until_ns: int | None = None) -> None:
        queue = self._queue
        while queue and (until_ns is None or queue[0][0] <= until_ns):
            time_ns, _, callback = heapq.heappop(queue)
            if time_ns > self._watch_ns:
                self._watch_ns = self._watcher(time_ns)
            self._now = time_ns
            callback()

    def __len__(self) -> int:
        return len(self._queue)
