"""Exact timing of the "direct" algorithm (upstream ``AllToAll``) by a small event simulation.

The direct algorithm is self-clocking, so its time is not a simple sum. Each rank keeps a FIFO
of packets and a count of free send slots (the window w = min(window, n-1), all peers when no
window is given):

- At the start it inserts w packets. Every insert is *released* after ``E`` (plus the local
  reduction ``3*floor(m/M)`` when the packet is marked "processed"); a release frees one send
  slot and lets the rank send the packet at the head of its FIFO, if any.
- Packets go to peers at offsets 1, 2, ..., n-1, 1, 2, ... (in insertion order); the receive
  for the k-th send is posted when it is sent, from the peer at offset -k. Each arriving
  message inserts one more packet.
- Packets alternate in blocks: w "zero-latency" packets (never processed) then w (w*(n-1) for
  a communicator-group ring) "non-zero" packets, processed for reduce-scatter, and for
  all-reduce in every other block starting with the first.
- All-reduce sends 2(n-1) messages; the second n-1 wait until all first-round messages have
  arrived, then the rank sends as many as it has free slots. Other collectives send n-1.
- A rank is done when it has sent everything and all its slots are free again.

Events at the same instant run in the order they were scheduled. The phase lasts until the
slowest rank is done. Checked against the upstream binary for windows 2, 4 and all peers.
"""
from __future__ import annotations

import heapq
from typing import Sequence

from ..network.base import NetworkBackend
from .phase_time import reduction_ns


class _DirectPhase:
    """State of one direct phase: per-rank FIFOs, slots, counters and the event heap.
    Owned by :func:`direct_phase_finish` for the duration of one evaluation."""

    def __init__(self, kind, members, network, msg, window, local, e, red):
        n = self.n = len(members)
        self.kind, self.e, self.red = kind, e, red
        self.w = n - 1 if window <= 0 else min(window, n - 1)
        self.nonzero_block = self.w * (n - 1) if local else self.w
        self.middle = n - 1
        self.cost = [[0 if i == j else network.send_ns(members[i], members[j], msg) for j in range(n)]
                     for i in range(n)]
        self.fifo = [[] for _ in range(n)]       # (dest, src) packets in insertion order
        self.head = [0] * n
        self.inserted = [0] * n
        self.free = [0] * n
        self.to_send = [2 * (n - 1) if kind == "all-reduce" else n - 1] * n
        self.received = [0] * n
        self.zero = [0] * n
        self.nonzero = [0] * n
        self.toggle = [False] * n
        self.posted = [dict() for _ in range(n)]    # src -> receives waiting for a message
        self.arrived = [dict() for _ in range(n)]   # src -> messages waiting for a receive
        self.done = [None] * n
        self.events: list = []
        self.seq = 0

    def push(self, t, what, rank, arg=0):
        heapq.heappush(self.events, (t, self.seq, what, rank, arg))
        self.seq += 1

    def insert(self, i, now):
        """A new packet; its release takes E (+ the reduction when it is "processed")."""
        if self.zero[i] == 0 and self.nonzero[i] == 0:
            self.zero[i], self.nonzero[i] = self.w, self.nonzero_block
            self.toggle[i] = not self.toggle[i]
        if self.zero[i] > 0:
            self.zero[i] -= 1
            processed = False
        else:
            self.nonzero[i] -= 1
            processed = self.kind == "reduce-scatter" or (self.kind == "all-reduce" and self.toggle[i])
        off = 1 + self.inserted[i] % (self.n - 1)
        self.inserted[i] += 1
        self.fifo[i].append(((i + off) % self.n, (i - off) % self.n))
        self.push(now + self.e + (self.red if processed else 0), "general", i)

    def ready(self, i, now):
        """Send the head packet if a slot is free; post its receive."""
        if self.head[i] >= len(self.fifo[i]) or self.to_send[i] == 0 or self.free[i] == 0:
            return
        dest, src = self.fifo[i][self.head[i]]
        self.head[i] += 1
        self.push(now + self.cost[i][dest], "arrive", dest, i)
        self.to_send[i] -= 1
        self.free[i] -= 1
        if self.arrived[i].get(src, 0):
            self.arrived[i][src] -= 1
            self.push(now, "received", i)
        else:
            self.posted[i][src] = self.posted[i].get(src, 0) + 1

    def general(self, i, now):
        """A release finished: one more free slot; maybe send; maybe done."""
        self.free[i] += 1
        if self.kind == "all-reduce" and self.to_send[i] <= self.middle:
            if self.received[i] < self.middle:
                return
            for _ in range(self.w):
                self.ready(i, now)
        else:
            self.ready(i, now)
        if self.to_send[i] == 0 and self.free[i] == self.w and self.done[i] is None:
            self.done[i] = now

    def run(self, starts) -> list[int]:
        for i in range(self.n):
            for _ in range(self.w):
                self.insert(i, starts[i])
        while self.events:
            now, _, what, i, src = heapq.heappop(self.events)
            if what == "general":
                self.general(i, now)
            elif what == "arrive":           # message from rank src reaches rank i
                if self.posted[i].get(src, 0):
                    self.posted[i][src] -= 1
                    self.push(now, "received", i)
                else:
                    self.arrived[i][src] = self.arrived[i].get(src, 0) + 1
            else:                            # received
                self.received[i] += 1
                self.insert(i, now)
        if any(d is None for d in self.done):  # cannot happen for a well-formed phase
            raise AssertionError("direct phase did not finish on every rank")
        return self.done


def direct_phase_finish(kind: str, members: Sequence[int], network: NetworkBackend, msg: int,
                        window: int, local: bool, endpoint_delay_ns: int, local_mem_bw_gbs: float,
                        starts: Sequence[int] | None = None) -> list[int]:
    """Per-member finish times of one direct phase of ``kind`` (message size ``msg``),
    member i starting at ``starts[i]`` (default 0); ``local``: a communicator-group ring."""
    n = len(members)
    starts = [0] * n if starts is None else list(starts)
    if n <= 1:
        return starts
    phase = _DirectPhase(kind, members, network, msg, window, local, endpoint_delay_ns,
                         reduction_ns(msg, local_mem_bw_gbs))
    return phase.run(starts)
