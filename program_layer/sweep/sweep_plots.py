"""Plots of a whole sweep, written to ``DIR/plots/`` from the cell folders and results rows:

  jct_cdf.png         program-JCT CDF, one line per cell; one panel per combination of the
                      non-policy axes (rate, hardware, ...), lines are the policy cells
  jct_vs_rate.png     mean JCT against arrival rate, one line per combination of the other
                      axes (only when an axis ends in ``rate_jps``)
  kv_utilization.png  KV-cache utilisation over time (mean over instances) for the chosen cells

Only cells with status ``ok`` are drawn; each plot names what it skipped in its title.
"""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from program_layer.sweep.grid import Axis, Cell, canonical_json, matches, short_key, value_label
from program_layer.sweep.plot_io import (as_percent, ecdf, empty_note, label_axes, legend_below, mean_by_time,
                                         new_figure, read_columns, save, smooth, smooth_note)
from program_layer.sweep.results import cell_dir
from program_layer.sweep.run_plots import run_latencies

DEFAULT_KV_CELLS = 6  # without a choice, the first cells in grid order
# Colours cycle every 10 lines; dashes cycle too so coinciding lines (policies that do not
# differ in a cell) stay visible under each other.
LINESTYLES = ("-", "--", ":", "-.")


def render_sweep_plots(out_dir: str | Path, axes: Sequence[Axis], cells: Sequence[Cell],
                       results: Sequence[Mapping], *, kv_cells: Sequence = (), name: str = "sweep") -> list[Path]:
    out_dir = Path(out_dir)
    status = {r["cell_id"]: r["status"] for r in results}
    ok = [c for c in sorted(cells, key=lambda c: c.index) if status.get(c.cell_id) == "ok"]
    paths = [_jct_cdf(out_dir, axes, ok, name)]
    rate = next((a for a in axes if a.key.endswith("rate_jps")), None)
    if rate is not None:
        paths.append(_jct_vs_rate(out_dir, axes, rate, results, name))
    paths.append(_kv(out_dir, axes, select_cells(cells, kv_cells, ok), name))
    return paths


def select_cells(cells: Sequence[Cell], selectors: Sequence, ok: Sequence[Cell]) -> list[Cell]:
    """Finished cells named by id or matching an axis-value mapping, in grid order."""
    if not selectors:
        return list(ok[:DEFAULT_KV_CELLS])
    ok_ids = {c.cell_id for c in ok}
    chosen = [c for c in cells if c.cell_id in ok_ids and any(
        c.cell_id == s if isinstance(s, str) else matches(c, s) for s in selectors)]
    return sorted(chosen, key=lambda c: c.index)


def compact_label(cell: Cell, keys: Sequence[str]) -> str:
    """'ttl / plas' - the cell's values on ``keys``; legend_title names the keys in order."""
    return " / ".join(value_label(cell.values[k]) for k in keys) or "base"


def legend_title(keys: Sequence[str]) -> str:
    return " / ".join(short_key(k) for k in keys)


def _line_and_panel_keys(axes: Sequence[Axis]) -> tuple[list[str], list[Axis]]:
    """Policy axes vary within a panel; every other axis splits panels (all in one if none)."""
    policy = [a.key for a in axes if a.key.startswith("policies.")]
    if not policy or len(policy) == len(axes):
        return [a.key for a in axes], []
    return policy, [a for a in axes if a.key not in policy]


def _grid(n: int) -> tuple[int, int]:
    ncols = min(n, 3)
    return ncols, (n + ncols - 1) // ncols


def _jct_cdf(out_dir: Path, axes: Sequence[Axis], ok: Sequence[Cell], name: str) -> Path:
    line_keys, panel_axes = _line_and_panel_keys(axes)
    combos = list(itertools.product(*(a.values for a in panel_axes)))
    ncols, nrows = _grid(len(combos))
    fig, grid = new_figure(ncols, nrows)
    for i, combo in enumerate(combos):
        ax = grid[i // ncols, i % ncols]
        fixed = {a.key: v for a, v in zip(panel_axes, combo)}
        drawn = 0
        for cell in (c for c in ok if matches(c, fixed)):
            values, what = run_latencies(cell_dir(out_dir, cell.cell_id))
            x, y = ecdf(values)
            if x.size:
                ax.step(x, y, where="post", lw=1.4, ls=LINESTYLES[drawn % len(LINESTYLES)],
                        label=f"{compact_label(cell, line_keys)} ({x.mean():.0f} s)")
                drawn += 1
        if drawn:  # CDFs rise to the right: the upper left stays free
            ax.legend(fontsize="small", loc="upper left", title=legend_title(line_keys) + " (mean JCT)",
                      title_fontsize="small")
        else:
            empty_note(ax, "no finished cells")
        panel = ", ".join(f"{short_key(k)}={value_label(v)}" for k, v in fixed.items())
        label_axes(ax, "program JCT (s)", "fraction of programs (CDF)",
                   panel or f"Program JCT CDF per policy - {name}", ylim=(0, 1.02))
    _hide_unused(grid, len(combos))
    if panel_axes:
        fig.suptitle(f"Program JCT CDF per policy - {name}")
    return save(fig, out_dir / "plots" / "jct_cdf.png")


def _jct_vs_rate(out_dir: Path, axes: Sequence[Axis], rate: Axis, results: Sequence[Mapping], name: str) -> Path:
    others = [a for a in axes if a.key != rate.key]
    fig, grid = new_figure()
    ax = grid[0, 0]
    by_values = {canonical_json(dict(sorted(r["values"].items()))): r for r in results}
    for combo in itertools.product(*(a.values for a in others)):
        fixed = {a.key: v for a, v in zip(others, combo)}
        xs, ys = [], []
        for value in rate.values:
            row = by_values.get(canonical_json(dict(sorted({**fixed, rate.key: value}.items()))))
            if row and row["status"] == "ok" and row.get("jct_mean_s") is not None:
                xs.append(float(value))
                ys.append(row["jct_mean_s"])
        if xs:
            label = " / ".join(value_label(v) for v in fixed.values()) or "mean JCT"
            ax.plot(xs, ys, marker="o", ls=LINESTYLES[len(ax.lines) % len(LINESTYLES)], label=label)
    if ax.lines:
        ax.legend(fontsize="small", title=legend_title([a.key for a in others]) or None, title_fontsize="small")
    else:
        empty_note(ax, "no finished cells")
    label_axes(ax, "arrival rate (programs/s)", "mean JCT (s)", f"Mean JCT vs arrival rate - {name}")
    return save(fig, out_dir / "plots" / "jct_vs_rate.png")


def _kv(out_dir: Path, axes: Sequence[Axis], chosen: Sequence[Cell], name: str) -> Path:
    fig, grid = new_figure()
    ax = grid[0, 0]
    keys = [a.key for a in axes]
    note = ""
    for cell in chosen:
        path = cell_dir(out_dir, cell.cell_id) / "timeseries.csv"
        ts = read_columns(path, ["time_s", "kv_utilization"])
        t, util = mean_by_time(ts["time_s"], ts["kv_utilization"])
        if t.size:
            util, window = smooth(t, as_percent(util))
            ax.plot(t, util, lw=1.2, ls=LINESTYLES[len(ax.lines) % len(LINESTYLES)], label=compact_label(cell, keys))
            note = note or smooth_note(window)
    if ax.lines:
        legend_below(ax, ncol=2 if len(ax.lines) > 3 else 1, fontsize="small", title=legend_title(keys) or None,
                     title_fontsize="small")
    else:
        empty_note(ax, "no finished cells chosen")
    label_axes(ax, "simulated time (s)", "KV-cache utilisation, mean over instances (%)",
               f"KV-cache utilisation over time - {name}{note}", ylim=(0, 105))
    return save(fig, out_dir / "plots" / "kv_utilization.png")


def _hide_unused(grid: np.ndarray, used: int) -> None:
    for i in range(used, grid.size):
        grid.flat[i].set_visible(False)
