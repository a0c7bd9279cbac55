"""Empirical quantile of observed gaps (Continuum's per-tool TTL, min-waste's predicted gap)."""
from __future__ import annotations

import math
from typing import Optional, Sequence

__all__ = ["empirical_quantile", "GapQuantile"]


def empirical_quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile of a non-empty sample (numpy's default, Hyndman-Fan
    type 7): sorted x, h = (n-1)q, x[floor h] + (h - floor h)(x[floor h + 1] - x[floor h])."""
    xs = sorted(values)
    h = (len(xs) - 1) * q
    lo = math.floor(h)
    if lo + 1 >= len(xs):
        return float(xs[-1])
    return float(xs[lo] + (h - lo) * (xs[lo + 1] - xs[lo]))


class GapQuantile:
    """Per-tool quantile of a PCB view's gap history with a default for unseen tools.

    Histories only grow, so a (tool, length) pair identifies the sample; the last value per
    tool is cached to avoid re-sorting on every completion.
    """
    __slots__ = ("quantile", "default_s", "_cache")

    def __init__(self, quantile: float, default_s: float):
        self.quantile = quantile
        self.default_s = default_s
        self._cache: dict[Optional[str], tuple[int, float]] = {}

    def predict(self, pcb, tool: Optional[str]) -> float:
        history = pcb.tool_gap_history(tool)
        if not history:
            return self.default_s
        hit = self._cache.get(tool)
        if hit is not None and hit[0] == len(history):
            return hit[1]
        value = empirical_quantile(history, self.quantile)
        self._cache[tool] = (len(history), value)
        return value
