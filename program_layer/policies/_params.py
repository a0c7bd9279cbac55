"""Validation of built-in policy parameters (raise ValueError; the loader adds the key)."""
from __future__ import annotations

import math
import numbers


def real(name: str, value, *, lo: float | None = None, hi: float | None = None,
         lo_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"parameter '{name}' must be a finite number, got {value!r}")
    v = float(value)
    if lo is not None and (v < lo or (lo_open and v == lo)):
        raise ValueError(f"parameter '{name}' must be {'>' if lo_open else '>='} {lo}, got {v}")
    if hi is not None and v > hi:
        raise ValueError(f"parameter '{name}' must be <= {hi}, got {v}")
    return v


def integer(name: str, value, *, lo: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"parameter '{name}' must be an integer, got {value!r}")
    if lo is not None and value < lo:
        raise ValueError(f"parameter '{name}' must be >= {lo}, got {value}")
    return int(value)
