"""Observed tool gaps: an append-only log and the O(1) read-only snapshots policies get.

A PCB view offers a tool's gap history (``tool_gap_history``, ``own_tool_gap_history``) as it
was when the view was made. Copying the histories into tuples for every view costs O(gaps)
per view, so a 100k-call program (one view or more per call) was quadratic. Here a view
costs O(1) whatever the history's length, and the total cost of a run is linear in gaps:

- ``ToolGapLog`` (the writer: the Orchestrator's run-wide log, or one PCB's own) appends each
  gap, in seconds, to its tool's series in O(1). A series is a dict index -> gap seen only
  through ``MappingProxyType``, so nothing a policy can reach can change it.
- ``ToolGapLog.snapshot()`` is a ``GapSnapshot``: the read-only mapping tool -> history of the
  first ``at`` gaps of the log (those observed so far). It is the same object until the next
  gap, so views and the search channel can tell an unchanged snapshot by identity.
- A history is a ``GapHistory``: a read-only, fixed-length, tuple-like prefix of a series
  (len, indexing, slicing to tuples, iteration, ==/< and + with tuples, hash). Histories of
  one length are shared; the tuple behind iteration is built once per history, so only a
  policy that reads a whole history pays for its length.
Invariants: series only grow; a snapshot's histories never change after it is made (later
gaps are beyond their length).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Optional

__all__ = ["ToolGapLog", "GapSnapshot", "GapHistory", "NS_PER_S", "ReadOnly"]

NS_PER_S = 1_000_000_000


class ReadOnly:
    """Attributes are set once, by ``_init`` (or ``object.__setattr__`` in a constructor);
    assigning or deleting one raises. Policies get only such objects (PCBView, EntryView,
    the gap histories), so they cannot change the state they are shown."""
    __slots__ = ()

    def _init(self, **fields) -> None:
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is read-only (tried to set {name!r})")

    def __delattr__(self, name):
        raise AttributeError(f"{type(self).__name__} is read-only (tried to delete {name!r})")


class GapHistory(ReadOnly, Sequence):
    """The first ``len(self)`` gaps (s) of one tool, oldest first: a read-only tuple-like
    sequence that never changes (the series behind it only grows past its length)."""
    __slots__ = ("_values", "_n", "_tuple")

    def __init__(self, values: MappingProxyType, n: int):
        self._init(_values=values, _n=n, _tuple=None)

    def _as_tuple(self) -> tuple:
        t = self._tuple
        if t is None:
            t = tuple(map(self._values.__getitem__, range(self._n)))
            object.__setattr__(self, "_tuple", t)       # memo: the prefix cannot change
        return t

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):        # O(slice length): a tail slice of a long history is cheap
            t = self._tuple
            if t is not None:
                return t[i]
            return tuple(map(self._values.__getitem__, range(self._n)[i]))
        n = self._n
        j = i.__index__()
        if j < 0:
            j += n
        if not 0 <= j < n:
            raise IndexError("gap history index out of range")
        return self._values[j]

    def __iter__(self):
        return iter(self._as_tuple())

    def __reversed__(self):
        return reversed(self._as_tuple())

    def __contains__(self, x) -> bool:
        return x in self._as_tuple()

    def count(self, x) -> int:
        return self._as_tuple().count(x)

    def index(self, x, *args) -> int:
        return self._as_tuple().index(x, *args)

    def _other(self, other):
        if isinstance(other, GapHistory):
            return other._as_tuple()
        return other if isinstance(other, tuple) else None

    def __eq__(self, other):
        o = self._other(other)
        return NotImplemented if o is None else self._as_tuple() == o

    def __lt__(self, other):
        o = self._other(other)
        return NotImplemented if o is None else self._as_tuple() < o

    def __le__(self, other):
        o = self._other(other)
        return NotImplemented if o is None else self._as_tuple() <= o

    def __gt__(self, other):
        o = self._other(other)
        return NotImplemented if o is None else self._as_tuple() > o

    def __ge__(self, other):
        o = self._other(other)
        return NotImplemented if o is None else self._as_tuple() >= o

    def __hash__(self) -> int:
        return hash(self._as_tuple())

    def __add__(self, other):
        o = self._other(other)
        return NotImplemented if o is None else self._as_tuple() + o

    def __radd__(self, other):
        o = self._other(other)
        return NotImplemented if o is None else o + self._as_tuple()

    def __mul__(self, k):
        return self._as_tuple() * k

    __rmul__ = __mul__

    def __array__(self, dtype=None, copy=None):
        import numpy as np
        return np.array(self._as_tuple(), dtype=dtype)

    def __repr__(self) -> str:
        return repr(self._as_tuple())


class _Series(ReadOnly):
    """Read handle on one tool's series: the gaps (index -> s) and, for each, how many gaps
    the whole log held before it (index -> count), both live and read-only."""
    __slots__ = ("_values", "_before", "_latest")

    def __init__(self, values: MappingProxyType, before: MappingProxyType):
        self._init(_values=values, _before=before, _latest=None)

    def length_at(self, at: int) -> int:
        """How many of this tool's gaps are among the log's first ``at``: all of them for the
        newest snapshot (O(1)), else a binary search (counts increase along the series)."""
        n = len(self._values)
        before = self._before
        if n == 0 or before[n - 1] < at:
            return n
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) // 2
            if before[mid] < at:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def history(self, n: int) -> GapHistory:
        latest = self._latest
        if latest is not None and len(latest) == n:
            return latest
        h = GapHistory(self._values, n)
        if n == len(self._values):          # share the newest one between views
            object.__setattr__(self, "_latest", h)
        return h


class GapSnapshot(ReadOnly, Mapping):
    """Read-only mapping tool -> ``GapHistory`` of the gaps among the log's first ``at``
    (tools with none are absent). Made in O(1); a lookup is O(1) on the newest snapshot."""
    __slots__ = ("_series", "_at")

    def __init__(self, series: MappingProxyType, at: int):
        put = object.__setattr__        # not ``_init``: two of these are made per call
        put(self, "_series", series)
        put(self, "_at", at)

    def get(self, tool, default=None):
        s = self._series.get(tool)
        if s is None:
            return default
        n = s.length_at(self._at)
        return s.history(n) if n else default

    def __getitem__(self, tool) -> GapHistory:
        h = self.get(tool)
        if h is None:
            raise KeyError(tool)
        return h

    def __contains__(self, tool) -> bool:
        return self.get(tool) is not None

    def __iter__(self):
        at = self._at
        return iter([tool for tool, s in self._series.items() if s.length_at(at)])

    def __len__(self) -> int:
        at = self._at
        return sum(1 for s in self._series.values() if s.length_at(at))

    def __repr__(self) -> str:
        return f"GapSnapshot({dict(self.items())!r})"


class ToolGapLog:
    """Observed tool gaps per tool name, in observation order. Only grows; ``add`` is O(1)
    and ``snapshot()`` is O(1) (cached until the next ``add``). Only its owner writes it."""
    __slots__ = ("_values", "_before", "_series", "_series_view", "_count", "_snapshot")

    def __init__(self) -> None:
        self._values: dict[Optional[str], dict[int, float]] = {}
        self._before: dict[Optional[str], dict[int, int]] = {}
        self._series: dict[Optional[str], _Series] = {}
        self._series_view = MappingProxyType(self._series)
        self._count = 0
        self._snapshot: Optional[GapSnapshot] = None

    def __len__(self) -> int:
        return self._count

    def add(self, tool: Optional[str], gap_ns: int) -> None:
        values = self._values.get(tool)
        if values is None:
            values = self._values[tool] = {}
            before = self._before[tool] = {}
            self._series[tool] = _Series(MappingProxyType(values), MappingProxyType(before))
        else:
            before = self._before[tool]
        i = len(values)
        values[i] = gap_ns / NS_PER_S
        before[i] = self._count
        self._count += 1
        self._snapshot = None

    def snapshot(self) -> GapSnapshot:
        if self._snapshot is None:
            self._snapshot = GapSnapshot(self._series_view, self._count)
        return self._snapshot
