"""The one event queue and clock of a simulation (SimPy-style core).

``EventLoop`` alone owns ``now``: every other component reads ``loop.now`` and asks for
work to happen later with ``schedule(time_ns, callback)``. Events at equal times run in
insertion order (a per-loop sequence number breaks ties), so runs are deterministic.

An event can be cancelled while it is pending (``cancel``, with the number ``schedule``
returned): it is dropped unrun when its time comes, and ``peek`` looks past it, so the run
goes on as if it had never been scheduled (other events keep their order: the sequence
numbers of the rest are unchanged).

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

    __slots__ = ("_now", "_queue", "_seq", "_watch_ns", "_watcher", "_cancelled")

    def __init__(self) -> None:
        self._now = 0
        self._queue: list = []
        self._seq = 0
        self._watch_ns = math.inf       # no observer: the comparison below is always False
        self._watcher: Optional[Callable[[int], float]] = None
        self._cancelled: set = set()    # sequence numbers of pending events that will not run

    @property
    def now(self) -> int:
        return self._now

    def schedule(self, time_ns: int, callback: Callable[[], None]) -> int:
        """Run ``callback`` at absolute simulated time ``time_ns`` (not before now). Returns
        the event's sequence number (what ``cancel`` takes)."""
        if time_ns < self._now:
            raise ValueError(f"cannot schedule at {time_ns} ns, before now ({self._now} ns)")
        self._seq += 1
        heapq.heappush(self._queue, (time_ns, self._seq, callback))
        return self._seq

    def cancel(self, seq: int) -> None:
        """The pending event ``seq`` will not run: when its time comes it is dropped without
        moving the clock or calling the watcher. Only a pending event may be cancelled (a
        number that never comes up would be kept for ever)."""
        self._cancelled.add(seq)

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
        """Time of the next event that will run, or None when there is none."""
        queue = self._queue
        cancelled = self._cancelled
        while cancelled and queue and queue[0][1] in cancelled:     # drop the ones that will not run
            cancelled.discard(heapq.heappop(queue)[1])
        return queue[0][0] if queue else None

    def step(self) -> None:
        """Run the next event (a cancelled one is dropped instead)."""
        time_ns, seq, callback = heapq.heappop(self._queue)
        if self._cancelled and seq in self._cancelled:
            self._cancelled.discard(seq)
            return
        if time_ns > self._watch_ns:
            self._watch_ns = self._watcher(time_ns)
        self._now = time_ns
        callback()

    def run(self, until_ns: int | None = None) -> None:
        queue = self._queue
        cancelled = self._cancelled
        while queue and (until_ns is None or queue[0][0] <= until_ns):
            time_ns, seq, callback = heapq.heappop(queue)
            if cancelled and seq in cancelled:
                cancelled.discard(seq)
                continue
            if time_ns > self._watch_ns:
                self._watch_ns = self._watcher(time_ns)
            self._now = time_ns
            callback()

    def __len__(self) -> int:
        """Pending events that will run."""
        return len(self._queue) - len(self._cancelled)
