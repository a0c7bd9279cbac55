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
from typing import Optional, Sequence

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


def chunks_finish_links(plan: PhasePlan, members: Sequence[int], network: NetworkBackend,
                        endpoint_delay_ns: int, local_mem_bw_gbs: float, starts: Sequence[int],
                        chunks: int = 1, active: int = 1, link_free: Optional[dict] = None) -> list[int]:
    """Per-member finish times of ``chunks`` chunks, each running ``plan``, on a backend whose
    links are shared (``network.hop_times``): one event simulation for all of them.

    ``link_free`` (link -> time it is next free) is the link state to start from and leave
    behind: a caller passes its own to make this collective queue behind, and reserve links
    ahead of, other traffic it has timed (starts are then absolute times); default: idle links.

    Every member works on at most ``active`` chunks at once (upstream's
    active-chunks-per-dimension): it starts chunks 0..active-1 at its start time, and the next
    chunk whenever one of its chunks has finished there. A chunk runs the per-rank step logic of
    :func:`phase_finish` (pay E, send, wait for the step's messages, pay E + reduction), but
    every message is stored and forwarded link by link, and a link serves one message at a time
    in the order messages reach it, whatever chunk they belong to: concurrent chunks slow each
    other down where they share links. Events at equal times run in the order they were
    scheduled (upstream's event lists do the same), so the result is deterministic.
    """
    n, steps, e = len(members), plan.steps, endpoint_delay_ns
    if n <= 1 or not steps or chunks <= 0:
        return list(starts)
    nsteps = len(steps)
    tails = [e + (reduction_ns(s.reduce_bytes, local_mem_bw_gbs) if s.reduce_bytes else 0) for s in steps]
    # per (member, chunk, step): messages received, last arrival, injection time
    got: dict = {}
    last: dict = {}
    injected: dict = {}
    finish = list(starts)
    next_chunk = [0] * n
    if link_free is None:
        link_free = {}
    hop_cache: dict = {}
    events: list = []
    seq = 0

    def push(t, *item):
        nonlocal seq
        heapq.heappush(events, (t, seq) + item)
        seq += 1

    def start_chunk(i, t):
        c = next_chunk[i]
        if c < chunks:
            next_chunk[i] = c + 1
            push(t + e, 0, i, c, 0)

    def maybe_done(i, c, k):
        key = (i, c, k)
        start = injected.get(key)
        if start is None or got.get(key, 0) < len(steps[k].offsets):
            return
        done = max(start, last.get(key, 0)) + tails[k]
        if k + 1 < nsteps:
            push(done, 0, i, c, k + 1)
        else:
            finish[i] = max(finish[i], done)
            start_chunk(i, done)

    for i in range(n):
        for _ in range(min(active, chunks)):
            start_chunk(i, starts[i])
    while events:
        t, _, kind, a, c, k, *rest = heapq.heappop(events)
        if kind == 0:            # member a injects step k of chunk c
            injected[(a, c, k)] = t
            step = steps[k]
            for off in step.offsets:
                j = (a ^ off) if step.xor else (a + off) % n
                hk = (a, j, step.size)
                hops = hop_cache.get(hk)
                if hops is None:
                    hops = hop_cache[hk] = network.hop_times(members[a], members[j], step.size)
                push(t, 1, j, c, k, hops, 0)
            maybe_done(a, c, k)
        elif kind == 1:          # a message for member a reaches link h of its path
            hops, h = rest
            link, busy, transit = hops[h]
            begin = max(t, link_free.get(link, 0))
            link_free[link] = begin + busy
            if h + 1 < len(hops):
                push(begin + transit, 1, a, c, k, hops, h + 1)
            else:
                push(begin + transit, 2, a, c, k)
        else:                    # the message is at member a
            key = (a, c, k)
            got[key] = got.get(key, 0) + 1
            if t > last.get(key, 0):
                last[key] = t
            maybe_done(a, c, k)
    return finish


def phase_finish_links(plan: PhasePlan, members: Sequence[int], network: NetworkBackend,
                       endpoint_delay_ns: int, local_mem_bw_gbs: float, starts: Sequence[int]) -> list[int]:
    """Event-driven version of :func:`phase_finish` with per-link FIFO queueing (one chunk)."""
    return chunks_finish_links(plan, members, network, endpoint_delay_ns, local_mem_bw_gbs, starts)
