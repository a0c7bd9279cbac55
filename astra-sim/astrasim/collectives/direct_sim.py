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


def direct_phase_finish(kind: str, members: Sequence[int], network: NetworkBackend, msg: int,
                        window: int, local: bool, endpoint_delay_ns: int, local_mem_bw_gbs: float,
                        starts: Sequence[int] | None = None) -> list[int]:
    """Per-member finish times of one direct phase of ``kind`` (message size ``msg``),
    member i starting at ``starts[i]`` (default 0)."""
    n = len(members)
    starts = [0] * n if starts is None else list(starts)
    if n <= 1:
        return starts
    w = n - 1 if window <= 0 else min(window, n - 1)
    e = endpoint_delay_ns
    red = reduction_ns(msg, local_mem_bw_gbs)
    total_sends = 2 * (n - 1) if kind == "all-reduce" else n - 1
    middle = n - 1
    cost = [[0 if i == j else network.send_ns(members[i], members[j], msg) for j in range(n)]
            for i in range(n)]
    nonzero_block = w * (n - 1) if local else w

    fifo = [[] for _ in range(n)]           # per rank: list of (dest, src) packets, head at index [0]
    head = [0] * n
    inserted = [0] * n
    free = [0] * n
    to_send = [total_sends] * n
    received = [0] * n
    zero = [0] * n
    nonzero = [0] * n
    toggle = [False] * n
    posted: list[dict[int, int]] = [dict() for _ in range(n)]   # rank -> src -> recvs waiting
    arrived: list[dict[int, int]] = [dict() for _ in range(n)]  # rank -> src -> messages waiting
    done = [None] * n
    events: list = []
    seq = 0

    def push(t, kind_, rank, arg=0):
        nonlocal seq
        heapq.heappush(events, (t, seq, kind_, rank, arg))
        seq += 1

    def insert(i, now):
        if zero[i] == 0 and nonzero[i] == 0:
            zero[i], nonzero[i] = w, nonzero_block
            toggle[i] = not toggle[i]
        if zero[i] > 0:
            zero[i] -= 1
            processed = False
        else:
            nonzero[i] -= 1
            processed = kind == "reduce-scatter" or (kind == "all-reduce" and toggle[i])
        q = inserted[i]
        inserted[i] += 1
        off = 1 + q % (n - 1)
        fifo[i].append(((i + off) % n, (i - off) % n))
        push(now + e + (red if processed else 0), "general", i)

    def ready(i, now):
        if head[i] >= len(fifo[i]) or to_send[i] == 0 or free[i] == 0:
            return
        dest, src = fifo[i][head[i]]
        head[i] += 1
        push(now + cost[i][dest], "arrive", dest, i)
        to_send[i] -= 1
        free[i] -= 1
        if arrived[i].get(src, 0):
            arrived[i][src] -= 1
            push(now, "received", i)
        else:
            posted[i][src] = posted[i].get(src, 0) + 1

    def iterate(i, now):
        if to_send[i] == 0 and free[i] == w and done[i] is None:
            done[i] = now

    for i in range(n):
        for _ in range(w):
            insert(i, starts[i])
    while events:
        now, _, what, i, arg = heapq.heappop(events)
        if what == "general":
            free[i] += 1
            if kind == "all-reduce" and to_send[i] <= middle:
                if received[i] < middle:
                    continue
                for _ in range(w):
                    ready(i, now)
            else:
                ready(i, now)
            iterate(i, now)
        elif what == "arrive":           # message from rank arg reaches rank i
            if posted[i].get(arg, 0):
                posted[i][arg] -= 1
                push(now, "received", i)
            else:
                arrived[i][arg] = arrived[i].get(arg, 0) + 1
        else:                            # received
            received[i] += 1
            insert(i, now)
    if any(d is None for d in done):  # cannot happen for a well-formed phase
        raise AssertionError("direct phase did not finish on every rank")
    return done
