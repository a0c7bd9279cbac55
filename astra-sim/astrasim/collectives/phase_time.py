"""Time of one collective phase on a logical ring, from per-message network delays.

Model (ASTRA-Sim's packet flow with the congestion-unaware backend): every rank starts at its
own start time, first pays one endpoint delay ``E`` (the initial packet hand-off), then for each step
waits until every message addressed to it has arrived (a message leaves its sender when the
sender is ready for that step and takes ``network.send_ns``), and then pays ``E`` again plus,
for a reducing step, the local reduction ``3 * floor(m / M)`` (one write and two reads of the
reduced bytes at ``M = local-mem-bw`` bytes per ns; ASTRA-Sim's double arithmetic).
Each rank finishes at its own time (:func:`phase_finish`); with equal starts and equal message
costs ``c`` every rank takes exactly

    T = K*c + (K+1)*E + R*3*floor(m/M)      (K steps, R reducing steps)

which for ring all-reduce gives docs/formats.md §2's ``2(n-1)*c + (n-1)*3*floor(m/M) + (2n-1)*E``.

On a congestion-aware backend the same rank logic runs as a small event simulation in which
every message is forwarded link by link through FIFO links (:func:`phase_finish_links`), so
messages of one phase that share a link queue behind each other.
"""
from __future__ import annotations

import heapq
from typing import Sequence

from ..network.base import NetworkBackend
from .algorithms import PhasePlan


def reduction_ns(size: int, local_mem_bw_gbs: float) -> int:
    """Local reduction of ``size`` received bytes: write + two reads, each truncated to ns."""
    one = int(float(size) / (local_mem_bw_gbs * 1e9) * 1e9)
    return 3 * one


def phase_finish(plan: PhasePlan, members: Sequence[int], network: NetworkBackend,
                 endpoint_delay_ns: int, local_mem_bw_gbs: float,
                 starts: Sequence[int] | None = None) -> list[int]:
    """Per-member finish times of ``plan`` run by ``members`` (global NPU ids in logical-ring
    order), each member starting at ``starts[i]`` (default: all at 0).

    A message for step k is received when it has arrived *and* the receiver has reached step k
    (it posts the receive when it sends its own step-k message), as upstream.
    """
    n = len(members)
    starts = [0] * n if starts is None else list(starts)
    if n <= 1 or not plan.steps:
        return starts
    if network.congestion_aware:
        return phase_finish_links(plan, members, network, endpoint_delay_ns, local_mem_bw_gbs, starts)
    e = endpoint_delay_ns
    ready = [s + e for s in starts]
    cost_cache: dict[tuple[int, int, int], int] = {}
    send = network.send_ns
    for step in plan.steps:
        size = step.size
        tail = e + (reduction_ns(step.reduce_bytes, local_mem_bw_gbs) if step.reduce_bytes else 0)
        new = [0] * n
        for i in range(n):
            arrive = ready[i]
            dst = members[i]
            for off in step.offsets:
                j = (i ^ off) if step.xor else (i - off) % n
                key = (j, i, size)
                c = cost_cache.get(key)
                if c is None:
                    c = cost_cache[key] = send(members[j], dst, size)
                t = ready[j] + c
                if t > arrive:
                    arrive = t
            new[i] = arrive + tail
        ready = new
    return ready


def phase_ns(plan: PhasePlan, members: Sequence[int], network: NetworkBackend,
             endpoint_delay_ns: int, local_mem_bw_gbs: float) -> int:
    """Duration of ``plan`` when all members start together (the slowest member decides)."""
    return max(phase_finish(plan, members, network, endpoint_delay_ns, local_mem_bw_gbs), default=0)


def phase_finish_links(plan: PhasePlan, members: Sequence[int], network: NetworkBackend,
                       endpoint_delay_ns: int, local_mem_bw_gbs: float, starts: Sequence[int]) -> list[int]:
    """Event-driven version of :func:`phase_finish` with per-link FIFO queueing."""
    n, steps, e = len(members), plan.steps, endpoint_delay_ns
    tails = [e + (reduction_ns(s.reduce_bytes, local_mem_bw_gbs) if s.reduce_bytes else 0) for s in steps]
    got = [[0] * len(steps) for _ in range(n)]
    last = [[0] * len(steps) for _ in range(n)]
    injected: list[list] = [[None] * len(steps) for _ in range(n)]
    finish = [0] * n
    link_free: dict = {}
    events: list = []
    seq = 0

    def push(t, *item):
        nonlocal seq
        heapq.heappush(events, (t, seq) + item)
        seq += 1

    def maybe_done(i, k):
        start = injected[i][k]
        if start is None or got[i][k] < len(steps[k].offsets):
            return
        done = max(start, last[i][k]) + tails[k]
        if k + 1 < len(steps):
            push(done, "inject", i, k + 1)
        else:
            finish[i] = done

    for i in range(n):
        push(starts[i] + e, "inject", i, 0)
    while events:
        t, _, kind, *rest = heapq.heappop(events)
        if kind == "inject":
            i, k = rest
            injected[i][k] = t
            step = steps[k]
            for off in step.offsets:
                j = (i ^ off) if step.xor else (i + off) % n
                push(t, "hop", j, k, network.hop_times(members[i], members[j], step.size), 0)
            maybe_done(i, k)
        elif kind == "hop":
            j, k, hops, h = rest
            link, busy, transit = hops[h]
            start = max(t, link_free.get(link, 0))
            link_free[link] = start + busy
            if h + 1 < len(hops):
                push(start + transit, "hop", j, k, hops, h + 1)
            else:
                push(start + transit, "arrive", j, k)
        else:  # arrive
            j, k = rest
            got[j][k] += 1
            last[j][k] = max(last[j][k], t)
            maybe_done(j, k)
    return finish

