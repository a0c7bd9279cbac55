"""A tiny progress bar for sweeps and long runs (no dependency).

    for step in progress(steps, "simulating", quiet=args.quiet): ...
    with progress(len(cells), "sweep") as bar: bar.update(note="cell 3 ok")

The bar draws on stderr only when it is a terminal and ``quiet`` is false; otherwise every
call is a no-op, so logs and pipes stay clean. Redraws are throttled to ``min_interval_s``
(wall clock; this is UI, never simulated state).
"""
from __future__ import annotations

import sys
import time
from typing import IO, Iterable, Iterator, TypeVar

T = TypeVar("T")
BAR_WIDTH = 24


class Progress:
    """Counts ``n`` of ``total`` items and redraws one status line. Owns only its counters."""

    def __init__(self, total: int | None, desc: str = "", *, quiet: bool = False,
                 stream: IO[str] | None = None, enabled: bool | None = None,
                 min_interval_s: float = 0.1, iterable: Iterable | None = None):
        self.total = total
        self.desc = desc
        self.n = 0
        self.note = ""
        self._stream = sys.stderr if stream is None else stream
        if enabled is None:
            isatty = getattr(self._stream, "isatty", None)
            enabled = (not quiet) and bool(isatty and isatty())
        self.enabled = enabled
        self._iterable = iterable
        self._start = time.monotonic()
        self._last_draw = -1.0
        self._min_interval_s = min_interval_s
        self._closed = False
        self._width = 0
        self._draw(force=True)

    def __iter__(self) -> Iterator:
        if self._iterable is None:
            raise TypeError("this Progress counts a total; call update() instead of iterating")
        try:
            for item in self._iterable:
                yield item
                self.update()
        finally:
            self.close()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def update(self, n: int = 1, note: str | None = None) -> None:
        """Advance by ``n`` items; ``note`` replaces the text shown after the counts."""
        self.n += n
        if note is not None:
            self.note = note
        self._draw(force=self.total is not None and self.n >= self.total)

    def close(self) -> None:
        """Draw the final state and end the line (idempotent)."""
        if self._closed:
            return
        self._draw(force=True)
        if self.enabled:
            self._stream.write("\n")
            self._stream.flush()
        self._closed = True

    def render(self) -> str:
        """The status line text (also used by tests)."""
        elapsed = time.monotonic() - self._start
        head = f"{self.desc}: " if self.desc else ""
        if self.total:
            frac = min(1.0, self.n / self.total)
            filled = int(round(frac * BAR_WIDTH))
            bar = "#" * filled + "." * (BAR_WIDTH - filled)
            eta = _clock(elapsed / self.n * (self.total - self.n)) if 0 < self.n < self.total else "--:--"
            text = f"{head}[{bar}] {self.n}/{self.total} {frac:4.0%} {_clock(elapsed)} eta {eta}"
        else:
            text = f"{head}{self.n} {_clock(elapsed)}"
        return f"{text}  {self.note}" if self.note else text

    def _draw(self, force: bool = False) -> None:
        if not self.enabled or self._closed:
            return
        now = time.monotonic()
        if not force and now - self._last_draw < self._min_interval_s:
            return
        self._last_draw = now
        text = self.render()
        pad = " " * max(0, self._width - len(text))  # erase leftovers of a longer previous line
        self._width = len(text)
        self._stream.write("\r" + text + pad)
        self._stream.flush()


def progress(iterable_or_total: Iterable[T] | int | None, desc: str = "", quiet: bool = False,
             **kwargs) -> Progress:
    """A Progress over an iterable (iterate it) or a total count (call ``update``).

    Quiet (a no-op) under ``quiet=True`` or when stderr is not a terminal; pass
    ``enabled=True`` to force drawing, ``stream=`` to draw elsewhere.
    """
    if isinstance(iterable_or_total, int) or iterable_or_total is None:
        return Progress(iterable_or_total, desc, quiet=quiet, **kwargs)
    try:
        total = len(iterable_or_total)  # type: ignore[arg-type]
    except TypeError:
        total = None
    return Progress(total, desc, quiet=quiet, iterable=iterable_or_total, **kwargs)


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60:02d}:{rest % 60:02d}"
