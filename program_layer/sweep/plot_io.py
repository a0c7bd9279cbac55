"""Reading run-folder CSVs for plotting, and the one place that creates matplotlib figures.

Plots are rendered from result files only. matplotlib is imported inside functions (so the
CLI starts fast) and used through ``Figure`` + the Agg canvas, never pyplot: no global figure
state, no display needed, safe in worker processes.
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Sequence

import numpy as np

FIGSIZE = (7.0, 4.5)
DPI = 120


def read_columns(path: str | Path, columns: Sequence[str]) -> dict[str, np.ndarray]:
    """Named numeric columns of a CSV as float arrays (empty arrays for a header-only file).

    Raises FileNotFoundError when the file is missing and KeyError naming the column when the
    header lacks one; blank cells read as NaN.
    """
    path = Path(path)
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader, [])
        index = {}
        for column in columns:
            if column not in header:
                raise KeyError(f"{path}: no column '{column}' (has {', '.join(header)})")
            index[column] = header.index(column)
        data: dict[str, list[float]] = {c: [] for c in columns}
        for row in reader:
            for column, i in index.items():
                cell = row[i] if i < len(row) else ""
                data[column].append(float(cell) if cell.strip() else float("nan"))
    return {c: np.asarray(v, dtype=float) for c, v in data.items()}


def new_figure(ncols: int = 1, nrows: int = 1):
    """A Figure (Agg canvas attached) and its axes array (always 2-D)."""
    from program_layer.extras import require
    FigureCanvasAgg = require("matplotlib.backends.backend_agg", "plot", "plotting").FigureCanvasAgg
    Figure = require("matplotlib.figure", "plot", "plotting").Figure

    width = FIGSIZE[0] if ncols == 1 else 5.0 * ncols
    height = FIGSIZE[1] if nrows == 1 else 3.8 * nrows
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def save(fig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI, bbox_inches="tight")  # keeps legends placed outside the axes
    return path


def legend_below(ax, ncol: int = 2, **kwargs) -> None:
    """Legend under the x-axis label, for time series whose lines fill the whole plot."""
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=ncol, frameon=False, **kwargs)


def ecdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted finite values and their cumulative fractions (1/n ... 1)."""
    values = np.sort(values[np.isfinite(values)])
    return values, np.arange(1, len(values) + 1) / max(1, len(values))


def sum_by_time(time_s: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sum over instances per time point (timeseries has one row per second per instance)."""
    times, inverse = np.unique(time_s, return_inverse=True)
    return times, np.bincount(inverse, weights=np.nan_to_num(values), minlength=len(times))


def mean_by_time(time_s: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    times, inverse = np.unique(time_s, return_inverse=True)
    counts = np.bincount(inverse, minlength=len(times))
    return times, np.bincount(inverse, weights=np.nan_to_num(values), minlength=len(times)) / np.maximum(counts, 1)


NICE_WINDOWS_S = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600)


def smooth(time_s: np.ndarray, values: np.ndarray, target_points: int = 150) -> tuple[np.ndarray, int]:
    """Centred moving mean so that a long per-second series shows its trend (about
    ``target_points`` windows across the run); returns (values, window in seconds; 1 = raw).
    Display only: the CSVs keep every second."""
    n = values.size
    if n < 2 * target_points:
        return values, 1
    dt = float(np.median(np.diff(np.unique(time_s)))) if np.unique(time_s).size > 1 else 1.0
    want = n / target_points * dt
    window_s = next((w for w in NICE_WINDOWS_S if w >= want), NICE_WINDOWS_S[-1])
    width = max(1, int(round(window_s / dt)))
    csum = np.concatenate(([0.0], np.cumsum(np.nan_to_num(values))))
    idx = np.arange(n)
    lo = np.maximum(0, idx - width // 2)
    hi = np.minimum(n, idx - width // 2 + width)
    return (csum[hi] - csum[lo]) / (hi - lo), window_s


def smooth_note(window_s: int) -> str:
    return "" if window_s <= 1 else f"\n({window_s} s moving mean)"


def as_percent(fraction: np.ndarray) -> np.ndarray:
    """KV utilisation to percent; a column already in percent (max > 1) is left as is."""
    finite = fraction[np.isfinite(fraction)]
    return fraction if finite.size and finite.max() > 1.0 + 1e-9 else fraction * 100.0


def label_axes(ax, xlabel: str, ylabel: str, title: str, ylim: tuple | None = None) -> None:
    """Every plot's finish: axis labels with units, title, optional y range, light grid."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_title(title)
    ax.grid(alpha=0.3)


def empty_note(ax, text: str) -> None:
    """Mark an axes that has no data, so an empty plot is never mistaken for a flat line."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")
