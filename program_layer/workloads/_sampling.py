"""Random-draw helpers shared by the workload generators.

Every function takes the caller's ``numpy.random.Generator`` and returns Python ``int``s (never
numpy scalars, never floats), so a generated program serializes to the same JSON bytes on every
platform. Nothing here owns randomness: same generator state in, same values out.
"""
from __future__ import annotations

import math

import numpy as np

NS_PER_S = 1_000_000_000


def stratified_uniforms(rng: np.random.Generator, n: int) -> list[float]:
    """The ``n`` stratum midpoints ``(i + 0.5) / n`` in random order.

    Used where a few draws dominate a workload statistic (program lengths, slow tool durations):
    feeding them to a quantile function gives a 50-program workload exactly the target
    distribution's shape (median, mean, tail) for every seed, with only the order random. Plain iid draws give the median of 50
    lognormal lengths a ~10% standard error, and one extreme draw of a length moves the summed
    context tokens (which grow with length squared) by ~10%.
    """
    u = (np.arange(n) + 0.5) / n
    rng.shuffle(u)
    return [float(x) for x in u]


def lognormal_int(rng: np.random.Generator, median: float, sigma: float, lo: int, hi: int) -> int:
    """One lognormal draw (given median, log-sigma), rounded and clipped to ``[lo, hi]``."""
    x = median * math.exp(sigma * float(rng.standard_normal()))
    return int(min(hi, max(lo, round(x))))


def seconds_to_ns(seconds: float) -> int:
    """Round a non-negative duration in seconds to integer nanoseconds."""
    return int(round(seconds * NS_PER_S))


def poisson_arrivals_ns(rng: np.random.Generator, n: int, rate_jps: float) -> list[int]:
    """``n`` Poisson arrival times in integer ns; the first program arrives at time 0.

    The first arrival is at 0 (not after one exponential gap) so a run starts with work and the
    arrival span (last minus first) is the sum of ``n - 1`` gaps, as the paper reports it
    (Appendix A: 2,004 s for 50 programs at 0.02 JPS). Gaps are drawn as Exp(1) and divided by
    the rate, so the same seed gives the same arrival *order and proportions* at every rate:
    doubling ``rate_jps`` halves every arrival time (up to ns rounding).
    """
    unit_gaps = rng.standard_exponential(max(0, n - 1))
    times = [0]
    for g in unit_gaps:
        times.append(times[-1] + seconds_to_ns(float(g) / rate_jps))
    return times[:n]

