"""Piecewise-linear interpolation on measured grids (integer-free, float µs in and out).

Outside the measured range a table extrapolates linearly from its last two points above
the top and clamps at the first point below the bottom (times measured at the smallest
size are already dominated by fixed costs; extrapolating down would invent savings).
"""
from __future__ import annotations

import bisect
import math
from typing import Sequence


def bracket(xs: Sequence[float], x: float) -> tuple[int, float]:
    """Index i and weight w such that value = (1-w)*v[i] + w*v[i+1]."""
    n = len(xs)
    if n == 1 or x <= xs[0]:
        return 0, 0.0
    if x >= xs[-1]:
        i = n - 2
    else:
        i = bisect.bisect_right(xs, x) - 1
    return i, (x - xs[i]) / (xs[i + 1] - xs[i])


class Table1D:
    """``clamp=True`` holds the end values outside the range instead of extrapolating."""
    __slots__ = ("xs", "ys", "_cache", "clamp")

    def __init__(self, xs: Sequence[float], ys: Sequence[float], clamp: bool = False):
        order = sorted(range(len(xs)), key=lambda i: float(xs[i]))     # stable, as argsort's
        self.xs = [float(xs[i]) for i in order]
        self.ys = [float(ys[i]) for i in order]
        self._cache: dict = {}
        self.clamp = clamp

    def __call__(self, x: float) -> float:
        v = self._cache.get(x)
        if v is None:
            if len(self.xs) == 1:
                v = self.ys[0]
            elif self.clamp and x >= self.xs[-1]:
                v = self.ys[-1]
            else:
                i, w = bracket(self.xs, x)
                v = self.ys[i] + w * (self.ys[i + 1] - self.ys[i])
            self._cache[x] = v
        return v


class WeightedSum:
    """``x -> sum(mult * table(x) for mult, table in terms)`` (the same float, added in the
    same order by ``sum``), for ``Table1D`` terms: when every table has the same x grid and
    clamping (a profile's dense ops, all measured at the same token counts) the bracket is
    looked up once for all of them instead of once per table (a mixed step's token count is
    usually new, so the per-table caches miss)."""
    __slots__ = ("terms", "_xs", "_clamp", "_rows")

    def __init__(self, terms: Sequence[tuple[float, "Table1D"]]):
        self.terms = list(terms)
        tables = [t for _, t in self.terms]
        shared = (tables and all(type(t) is Table1D for t in tables) and len(tables[0].xs) > 1
                  and all(t.xs == tables[0].xs and t.clamp == tables[0].clamp for t in tables))
        self._xs = tables[0].xs if shared else None
        self._clamp = tables[0].clamp if shared else False
        self._rows = [(m, t.ys) for m, t in self.terms]

    def __call__(self, x: float) -> float:
        xs = self._xs
        if xs is None:
            return sum(mult * table(x) for mult, table in self.terms)
        if self._clamp and x >= xs[-1]:
            return sum(mult * ys[-1] for mult, ys in self._rows)
        i, w = bracket(xs, x)
        return sum(mult * (ys[i] + w * (ys[i + 1] - ys[i])) for mult, ys in self._rows)


class GridND:
    """Multilinear interpolation on a full rectangular grid ``values[axis0, axis1, ...]``.

    ``values`` are nested sequences (one level per axis); the grid keeps them as nested lists
    of Python floats (no numpy scalar per lookup, and no numpy import on a run's path)."""

    __slots__ = ("axes", "_nested", "_heads")

    #: ``line``'s memo of the corners over all its leading axes but the last, by their
    #: coordinates, is emptied when it reaches this size (a bound on memory, not on results)
    HEADS_MAX = 1 << 14

    def __init__(self, axes: Sequence[Sequence[float]], values):
        self.axes = [list(map(float, a)) for a in axes]
        self._nested = _float_lists(values, len(self.axes))
        self._heads: dict = {}

    def __call__(self, *point: float) -> float:
        if len(point) == 2:
            return self._call2(point[0], point[1])
        return self.line(*point[:-1])(point[-1])

    def line(self, *lead: float):
        """``x -> self(*lead, x)``: the grid along its last axis with the leading coordinates
        held, their brackets looked up once (a mixed step's attention is read at two decode
        KV lengths). The corners are summed in the order of the full multilinear formula
        (the last axis's lower corners first), each weight the product of its axes' weights
        in axis order, so every value is the same float."""
        axes = self.axes
        # (weight over the leading axes, the values along the last axis) in corner order
        # (axis k is bit k of the corner's index): axis k doubles the list, its lower corners
        # first, each weight multiplied by the axes' weights in axis order. A corner of zero
        # weight is dropped: ``at`` skips it anyway (its product with any finite u-weight is zero).
        # The list after all leading axes but the last depends on their coordinates alone
        # (a mixed step's prefill chunk and context recur with other decode counts): memoised.
        n = len(lead) - 1
        head = lead[:n]
        corners = self._heads.get(head)
        if corners is None:
            corners = [(1.0, self._nested)]
            for a, x in zip(axes, head):
                corners = _doubled(corners, a, x)
            if len(self._heads) >= self.HEADS_MAX:
                self._heads.clear()
            self._heads[head] = corners
        if n >= 0:
            corners = _doubled(corners, axes[n], lead[n])
        corners = [c for c in corners if c[0]]
        last = axes[-1]

        def at(x: float) -> float:
            j, u = bracket(last, x)
            j1 = j + 1 if len(last) > 1 else j
            total = 0.0
            for weight, v in corners:
                weight *= 1.0 - u
                if weight:
                    total += weight * v[j]
            for weight, v in corners:
                weight *= u
                if weight:
                    total += weight * v[j1]
            return total
        return at

    def _call2(self, x0: float, x1: float) -> float:
        return self.along(self.row(x0), x1)

    def row(self, x0: float) -> tuple:
        """A 2-D grid's interpolation at ``x0`` on its first axis, as ``along`` takes it: a
        caller that holds ``x0`` fixed (a decode batch's size) looks it up once."""
        a0 = self.axes[0]
        i, w = bracket(a0, x0)
        r0 = self._nested[i]
        return w, r0, (self._nested[i + 1] if len(a0) > 1 else r0)

    def at_row(self, x0: float):
        """``x1 -> self.along(self.row(x0), x1)`` of a 2-D grid, with ``bracket`` on the last
        axis and ``along`` written out (the same operations in the same order, so the same
        floats) and what ``x0`` fixes looked up once: the decode time of a batch size, read
        at every step."""
        w, r0, r1 = self.row(x0)
        a1 = self.axes[1]
        n1 = len(a1)
        first, last, top = a1[0], a1[-1], n1 - 2
        bisect_right = bisect.bisect_right

        def at(x1: float) -> float:
            if n1 == 1 or x1 <= first:
                j, u = 0, 0.0
            else:
                j = top if x1 >= last else bisect_right(a1, x1) - 1
                u = (x1 - a1[j]) / (a1[j + 1] - a1[j])
            j1 = j + 1 if n1 > 1 else j
            lo = r0[j] + u * (r0[j1] - r0[j])
            hi = r1[j] + u * (r1[j1] - r1[j])
            return lo + w * (hi - lo)
        return at

    def row_piece(self, row: tuple, x1: float) -> tuple:
        """The piece of a 2-D grid's row (``row(x0)``) that holds ``x1``: ``(lo, hi, a, span,
        p0, d0, p1, d1)`` such that for every x with ``lo <= x < hi``, with w = ``row[0]``::

            u = (x - a) / span;  l = p0 + u * d0;  value = l + w * ((p1 + u * d1) - l)

        is ``along(row, x)``, the same float: the same operations in the same order
        (``d0``, ``d1`` are ``along``'s differences of neighbouring values, computed once).
        Pieces: below the first grid point (``along`` clamps: u = 0.0) the clamped ends with
        d0 = d1 = 0.0 and a = the first point, so u < 0 and ``p + u * 0.0`` is p exactly;
        then [a_j, a_j+1) per grid interval, the last one open above (``along`` extrapolates
        it). A caller whose x moves little from call to call (a decode run's KV lengths grow
        by one a step) evaluates the formula inline and looks a piece up only when x leaves
        it."""
        w, r0, r1 = row
        a1 = self.axes[1]
        n1 = len(a1)
        if n1 == 1 or x1 < a1[0]:
            lo = r0[0] + 0.0 * (r0[0 if n1 == 1 else 1] - r0[0])
            hi = r1[0] + 0.0 * (r1[0 if n1 == 1 else 1] - r1[0])
            if n1 == 1:         # lo, hi are never -0.0 (x + 0.0), so u's sign is free
                return -math.inf, math.inf, 0.0, 1.0, lo, 0.0, hi, 0.0
            return -math.inf, a1[0], a1[0], 1.0, lo, 0.0, hi, 0.0
        j = n1 - 2 if x1 >= a1[-1] else bisect.bisect_right(a1, x1) - 1
        return (a1[j], a1[j + 1] if j < n1 - 2 else math.inf, a1[j], a1[j + 1] - a1[j],
                r0[j], r0[j + 1] - r0[j], r1[j], r1[j + 1] - r1[j])

    def along(self, row: tuple, x1: float) -> float:
        """The value at (x0, x1) of a 2-D grid, given ``row(x0)``."""
        w, r0, r1 = row
        a1 = self.axes[1]
        j, u = bracket(a1, x1)
        j1 = j + 1 if len(a1) > 1 else j
        lo = r0[j] + u * (r0[j1] - r0[j])
        hi = r1[j] + u * (r1[j1] - r1[j])
        return lo + w * (hi - lo)


def _doubled(corners: list, a: list, x: float) -> list:
    """``GridND.line``'s corners after one more axis ``a`` at ``x``: its lower corners
    first, each weight times that axis's weight."""
    i, w = bracket(a, x)
    i1 = i + 1 if len(a) > 1 else i
    lo = 1.0 - w
    return [(cw * lo, v[i]) for cw, v in corners] + [(cw * w, v[i1]) for cw, v in corners]


def _float_lists(values, depth: int) -> list:
    """``values`` (nested sequences ``depth`` deep) as nested lists of floats."""
    if depth == 1:
        return [float(v) for v in values]
    return [_float_lists(v, depth - 1) for v in values]
