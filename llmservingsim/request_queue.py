"""Waiting queues (vLLM ``request_queue.py``): FCFS deque or a (priority, arrival, id) heap.

Preempted requests go back to the front of the FCFS queue; in the priority queue their
(priority, arrival, id) key decides, exactly as in vLLM.
"""
from __future__ import annotations

import heapq
from collections import deque
from typing import Iterator

from .request import Request


class FCFSQueue:
    __slots__ = ("_q",)

    def __init__(self) -> None:
        self._q: deque[Request] = deque()

    def add(self, req: Request) -> None:
        self._q.append(req)

    def prepend(self, req: Request) -> None:
        self._q.appendleft(req)

    def peek(self) -> Request:
        return self._q[0]

    def pop(self) -> Request:
        return self._q.popleft()

    def remove(self, req: Request) -> None:
        self._q.remove(req)

    def __len__(self) -> int:
        return len(self._q)

    def __bool__(self) -> bool:
        return bool(self._q)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._q)


class PriorityQueue:
    __slots__ = ("_h",)

    def __init__(self) -> None:
        self._h: list[Request] = []

    def add(self, req: Request) -> None:
        heapq.heappush(self._h, req)

    prepend = add

    def peek(self) -> Request:
        return self._h[0]

    def pop(self) -> Request:
        return heapq.heappop(self._h)

    def remove(self, req: Request) -> None:
        self._h.remove(req)
        heapq.heapify(self._h)

    def __len__(self) -> int:
        return len(self._h)

    def __bool__(self) -> bool:
        return bool(self._h)

    def __iter__(self) -> Iterator[Request]:
        return iter(sorted(self._h))


def make_queue(policy: str):
    return PriorityQueue() if policy == "priority" else FCFSQueue()
