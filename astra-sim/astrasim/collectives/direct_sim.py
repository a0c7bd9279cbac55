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

On a congestion-aware backend (:func:`direct_chunks_finish_links`) the same rank logic runs
for all chunks of a collective in one event simulation: a message is stored and forwarded
link by link, a link serving one message at a time in arrival order, whatever chunk it
belongs to; a rank works on ``active`` chunks at once and starts its next chunk when one of
them is done there. Windowed direct is not modelled there (the planner refuses it).
"""
from __future__ import annotations

import heapq
from typing import Callable, Optional, Sequence

from ..network.base import NetworkBackend
from .phase_time import reduction_ns


class _Events:
    """One clock: events ``(time, seq, handler, args)`` run in time order, ties in the order
    they were scheduled (as upstream's event lists)."""

    def __init__(self):
        self.heap: list = []
        self.seq = 0

    def push(self, t: int, handler: Callable, *args) -> None:
        heapq.heappush(self.heap, (t, self.seq, handler, args))
        self.seq += 1

    def run(self) -> None:
        heap = self.heap
        while heap:
            t, _, handler, args = heapq.heappop(heap)
            handler(t, *args)


class _FixedDelays:
    """Messages arrive ``network.send_ns`` after they are sent (congestion-unaware)."""

    def __init__(self, events: _Events, network: NetworkBackend, members, msg: int):
        n = len(members)
        self.events = events
        self.cost = [[0 if i == j else network.send_ns(members[i], members[j], msg) for j in range(n)]
                     for i in range(n)]

    def send(self, now: int, i: int, j: int, arrive: Callable) -> None:
        self.events.push(now + self.cost[i][j], arrive, j, i)


class _SharedLinks:
    """Messages are stored and forwarded over FIFO links (``network.hop_times``), shared by
    every message sent through this object."""

    def __init__(self, events: _Events, network: NetworkBackend, members, msg: int,
                 link_free: Optional[dict] = None):
        self.events, self.network, self.members, self.msg = events, network, members, msg
        self.link_free: dict = {} if link_free is None else link_free
        self.paths: dict = {}

    def send(self, now: int, i: int, j: int, arrive: Callable) -> None:
        path = self.paths.get((i, j))
        if path is None:
            path = self.paths[(i, j)] = self.network.hop_times(self.members[i], self.members[j], self.msg)
        self._hop(now, path, 0, arrive, j, i)

    def _hop(self, now: int, path, h: int, arrive: Callable, j: int, i: int) -> None:
        link, busy, transit = path[h]
        begin = max(now, self.link_free.get(link, 0))
        self.link_free[link] = begin + busy
        if h + 1 < len(path):
            self.events.push(begin + transit, self._hop, path, h + 1, arrive, j, i)
        else:
            self.events.push(begin + transit, arrive, j, i)


class _DirectPhase:
    """State of one direct phase (one chunk): per-rank FIFOs, slots and counters. Its events
    run on ``events``; messages travel by ``transport``; ``on_done(rank, time)`` is told when
    a rank has finished. Ranks start when :meth:`start` is called for them."""

    def __init__(self, kind, n, window, local, e, red, events: _Events, transport, on_done=None):
        self.n = n
        self.kind, self.e, self.red = kind, e, red
        self.events, self.transport, self.on_done = events, transport, on_done
        self.w = n - 1 if window <= 0 else min(window, n - 1)
        self.nonzero_block = self.w * (n - 1) if local else self.w
        self.middle = n - 1
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

    def start(self, i, now):
        for _ in range(self.w):
            self.insert(i, now)

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
        self.events.push(now + self.e + (self.red if processed else 0), self.general, i)

    def ready(self, i, now):
        """Send the head packet if a slot is free; post its receive."""
        if self.head[i] >= len(self.fifo[i]) or self.to_send[i] == 0 or self.free[i] == 0:
            return
        dest, src = self.fifo[i][self.head[i]]
        self.head[i] += 1
        self.transport.send(now, i, dest, self.arrive)
        self.to_send[i] -= 1
        self.free[i] -= 1
        self._meet(self.arrived, self.posted, i, src, now)

    def general(self, now, i):
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
            if self.on_done is not None:
                self.on_done(i, now)

    def arrive(self, now, i, src):
        """A message from rank ``src`` reaches rank ``i``."""
        self._meet(self.posted, self.arrived, i, src, now)

    def _meet(self, waiting, pending, i, src, now):
        """Rank ``i``'s receive from ``src`` and the message meet: if the other side is
        ``waiting`` already, consume it and count one message received; else the side that
        came first becomes ``pending``."""
        if waiting[i].get(src, 0):
            waiting[i][src] -= 1
            self.events.push(now, self.received_one, i)
        else:
            pending[i][src] = pending[i].get(src, 0) + 1

    def received_one(self, now, i):
        self.received[i] += 1
        self.insert(i, now)


def _finished(done) -> list[int]:
    if any(d is None for d in done):  # cannot happen for a well-formed phase
        raise AssertionError("direct phase did not finish on every rank")
    return list(done)


def direct_phase_finish(kind: str, members: Sequence[int], network: NetworkBackend, msg: int,
                        window: int, local: bool, endpoint_delay_ns: int, local_mem_bw_gbs: float,
                        starts: Sequence[int] | None = None) -> list[int]:
    """Per-member finish times of one direct phase of ``kind`` (message size ``msg``),
    member i starting at ``starts[i]`` (default 0); ``local``: a communicator-group ring."""
    n = len(members)
    starts = [0] * n if starts is None else list(starts)
    if n <= 1:
        return starts
    events = _Events()
    phase = _DirectPhase(kind, n, window, local, endpoint_delay_ns, reduction_ns(msg, local_mem_bw_gbs),
                         events, _FixedDelays(events, network, members, msg))
    for i in range(n):
        phase.start(i, starts[i])
    events.run()
    return _finished(phase.done)


def direct_chunks_finish_links(kind: str, members: Sequence[int], network: NetworkBackend, msg: int,
                               window: int, local: bool, endpoint_delay_ns: int, local_mem_bw_gbs: float,
                               starts: Sequence[int], chunks: int, active: int,
                               link_free: Optional[dict] = None) -> list[int]:
    """Per-member finish times of ``chunks`` chunks of a direct phase (message size ``msg``,
    ``window`` peers in flight) on a backend with shared FIFO links: member i starts ``active`` chunks at
    ``starts[i]`` and each further chunk when one of its chunks is done there. ``link_free``:
    as in :func:`~astrasim.collectives.phase_time.chunks_finish_links`."""
    n = len(members)
    if n <= 1 or chunks <= 0:
        return list(starts)
    events = _Events()
    links = _SharedLinks(events, network, members, msg, link_free)
    red = reduction_ns(msg, local_mem_bw_gbs)
    finish = list(starts)
    next_chunk = [0] * n

    def start_next(i, now):
        c = next_chunk[i]
        if c < chunks:
            next_chunk[i] = c + 1
            phases[c].start(i, now)

    def done(i, now):
        finish[i] = max(finish[i], now)
        start_next(i, now)

    phases = [_DirectPhase(kind, n, window, local, endpoint_delay_ns, red, events, links, done) for _ in range(chunks)]
    for i in range(n):
        for _ in range(min(active, chunks)):
            start_next(i, starts[i])
    events.run()
    for p in phases:
        _finished(p.done)
    return finish
