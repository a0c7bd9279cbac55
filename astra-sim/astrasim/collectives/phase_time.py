"""Time of one collective phase on a logical ring, from per-message network delays.

Model (ASTRA-Sim's packet flow with the congestion-unaware backend, all ranks starting together):
every rank first pays one endpoint delay ``E`` (the initial packet hand-off), then for each step
waits until every message addressed to it has arrived (a message leaves its sender when the
sender is ready for that step and takes ``network.send_ns``), and then pays ``E`` again plus,
for a reducing step, the local reduction ``3 * floor(m / M)`` (one write and two reads of the
``m`` received bytes at ``M = local-mem-bw`` bytes per ns; ASTRA-Sim's double arithmetic).
The phase ends when the slowest rank is done. With equal message costs ``c`` this is exactly

    T = K*c + (K+1)*E + R*3*floor(m/M)      (K steps, R reducing steps)

which for ring all-reduce gives formats.md's ``2(n-1)*c + (n-1)*3*floor(m/M) + (2n-1)*E``.
"""
from __future__ import annotations

from typing import Sequence

from ..network.base import NetworkBackend
from .algorithms import PhasePlan


def reduction_ns(size: int, local_mem_bw_gbs: float) -> int:
    """Local reduction of ``size`` received bytes: write + two reads, each truncated to ns."""
    one = int(float(size) / (local_mem_bw_gbs * 1e9) * 1e9)
    return 3 * one


def phase_ns(plan: PhasePlan, members: Sequence[int], network: NetworkBackend,
             endpoint_delay_ns: int, local_mem_bw_gbs: float) -> int:
    """Duration of ``plan`` run by ``members`` (global NPU ids in logical-ring order)."""
    n = len(members)
    if n <= 1 or not plan.steps:
        return 0
    e = endpoint_delay_ns
    ready = [e] * n
    cost_cache: dict[tuple[int, int, int], int] = {}
    send = network.send_ns
    for step in plan.steps:
        size = step.size
        tail = e + (reduction_ns(size, local_mem_bw_gbs) if step.reduce else 0)
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
    return max(ready)
