"""Closed forms written independently of astrasim's implementation (used by the tests).

Per-message cost c(m, h) = floor(h*L + m/B), B = bw * 2^30 / 1e9 bytes/ns; local reduction
r(m) = 3*floor(m / M), M = local-mem-bw GB/s (bytes/ns); E = endpoint delay. All chunks of a
one-dimensional collective run back to back (one active chunk): T = chunks * T_chunk.
"""
from __future__ import annotations

import math


def msg(m: int, hops: int, bw: float, lat: float) -> int:
    return math.floor(hops * lat + m / (bw * 2**30 / 1e9))


def red(m: int, mem_bw: float) -> int:
    return 3 * math.floor(m / (mem_bw * 1e9) * 1e9)


def neighbour_hops(topo: str) -> int:
    return 2 if topo == "Switch" else 1


def far_hops(topo: str, n: int) -> int:
    """Largest hop count from one NPU to any other."""
    return {"Ring": n // 2, "FullyConnected": 1, "Switch": 2}[topo]


def offset_hops(topo: str, n: int, off: int) -> int:
    return {"Ring": min(off, n - off), "FullyConnected": 1, "Switch": 2}[topo]


def chunk_time(algo: str, kind: str, topo: str, n: int, d: int, bw: float, lat: float, mem: float, e: int) -> int:
    """One chunk of ``d`` bytes on one dimension of ``n`` NPUs."""
    c = lambda m, h: msg(m, h, bw, lat)  # noqa: E731
    if algo == "ring":
        h = neighbour_hops(topo)
        m = d // n
        if kind == "all-reduce":
            return 2 * (n - 1) * c(m, h) + (n - 1) * red(m, mem) + (2 * n - 1) * e
        if kind == "reduce-scatter":
            return (n - 1) * c(m, h) + (n - 1) * red(m, mem) + n * e
        if kind == "all-gather":
            return (n - 1) * c(d, h) + n * e
    if algo == "direct":
        h = far_hops(topo, n)
        m = d // n
        if kind == "all-reduce":
            # round 2 starts at the first finished reduction at or after the last round-1 arrival;
            # pieces whose reduction finished earlier go out then, the rest as they finish, to
            # offsets 1..n-1 in order (= 2c + r + 3E when every peer is equally far)
            costs = [c(m, offset_hops(topo, n, k)) for k in range(1, n)]
            last = e + max(costs)
            gens = sorted(e + x + e + red(m, mem) for x in costs)
            first = min(g for g in gens if g >= last)
            sends = [max(g, first) for g in gens]
            return max(s + costs[k] for k, s in enumerate(sends)) + e
        if kind == "reduce-scatter":
            return c(m, h) + red(m, mem) + 2 * e
        if kind == "all-gather":
            return c(d, h) + 2 * e
    if algo == "halvingDoubling":
        k = int(math.log2(n))
        offs = [2**i for i in range(k)]
        # halving steps reduce the *next* message: d/4, d/8, ..., d/n (none when n == 2);
        # measured on the upstream binary ("no reduction term" holds for n = 2 only; astra-sim/README.md)
        reds = sum(red(d // (4 * o), mem) for o in offs[:-1])
        if kind == "all-reduce":  # sizes d/2, d/4 .. d/n then back up; d divisible by n here
            return 2 * sum(c(d // (2 * o), offset_hops(topo, n, o)) for o in offs) + reds + (2 * k + 1) * e
        if kind == "reduce-scatter":
            return sum(c(d // (2 * o), offset_hops(topo, n, o)) for o in offs) + reds + (k + 1) * e
        if kind == "all-gather":  # offsets n/2, n/4, ..., 1 with sizes d, 2d, 4d, ...
            return sum(c(d * (2**i), offset_hops(topo, n, n // 2**(i + 1))) for i in range(k)) + (k + 1) * e
    raise ValueError((algo, kind))


def collective_time(algo, kind, topo, n, size, splits, bw, lat, mem, e) -> int:
    chunk = size // splits
    assert chunk >= n  # tests stay clear of the minimum-chunk rule
    chunks = math.ceil(size / chunk)
    return chunks * chunk_time(algo, kind, topo, n, chunk, bw, lat, mem, e)
