"""The one event queue and clock of a simulation (SimPy-style core).

``EventLoop`` alone owns ``now``: every other component reads ``loop.now`` and asks for
work to happen later with ``schedule(time_ns, callback)``. Events at equal times run in
insertion order (a per-loop sequence number breaks ties), so runs are deterministic.
"""
from __future__ import annotations

import heapq
from typing import Callable


class EventLoop:
    """Heap of ``(time_ns, seq, callback)``. ``now`` only moves forward."""

    __slots__ = ("_now", "_queue", "_seq")

    def __init__(self) -> None:
        self._now = 0
        self._queue: list = []
        self._seq = 0

    @property
    def now(self) -> int:
        return self._now

    def schedule(self, time_ns: int, callback: Callable[[], None]) -> None:
        """Run ``callback`` at absolute simulated time ``time_ns`` (not before now)."""
        if time_ns < self._now:
            raise ValueError(f"cannot schedule at {time_ns} ns, before now ({self._now} ns)")
        self._seq += 1
        heapq.heappush(self._queue, (time_ns, self._seq, callback))

    def peek(self) -> int | None:
        """Time of the next event, or None when the queue is empty."""
        return self._queue[0][0] if self._queue else None

    def step(self) -> None:
        time_ns, _, callback = heapq.heappop(self._queue)
        self._now = time_ns
        callback()

    def run(self, until_ns: int | None = None) -> None:
        queue = self._queue
        while queue and (until_ns is None or queue[0][0] <= until_ns):
            time_ns, _, callback = heapq.heappop(queue)
            self._now = time_ns
            callback()

    def __len__(self) -> int:
        return len(self._queue)
