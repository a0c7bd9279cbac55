"""``--max-concurrency``: a first-come-first-served bound on requests in flight.

Invariants: at most ``n`` slots are held at once; waiters get slots in the order they asked
(a released call never overtakes one released earlier that is still waiting); a waiter
gives up, holding nothing, once ``stop`` is set.
"""
from __future__ import annotations

import threading
from collections import deque


class FifoSlots:
    def __init__(self, n: int):
        self._free = n
        self._cond = threading.Condition()
        self._queue: deque = deque()

    def acquire(self, stop: threading.Event) -> bool:
        """Block until this caller's turn and a free slot; False (no slot) if stopped."""
        ticket = object()
        with self._cond:
            self._queue.append(ticket)
            while not (self._queue[0] is ticket and self._free > 0):
                if stop.is_set():
                    self._queue.remove(ticket)
                    self._cond.notify_all()
                    return False
                self._cond.wait(0.1)
            self._queue.popleft()
            self._free -= 1
            self._cond.notify_all()     # the next in line may find a slot too
            return True

    def release(self) -> None:
        with self._cond:
            self._free += 1
            self._cond.notify_all()
