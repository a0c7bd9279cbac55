"""Plots of one run folder (``agentservesim plot RUN_DIR``), written to ``RUN_DIR/plots/``:

  jct_cdf.png         CDF of program JCT (programs.csv; request latency from calls.csv when the
                      run has no programs)
  throughput.png      prompt and generation tokens/s over simulated time, all instances summed
  kv_utilization.png  KV-cache utilisation over time, one line per instance
  queues.png          running and waiting sequences over time, all instances summed

Inputs are the run's CSV files only.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from llmservingsim.errors import ConfigError
from program_layer.sweep.grid import short_key, value_label
from program_layer.sweep.plot_io import (as_percent, ecdf, empty_note, label_axes, legend_below, new_figure,
                                         read_columns, save, smooth, smooth_note, sum_by_time)

RUN_PLOTS = ("jct_cdf.png", "throughput.png", "kv_utilization.png", "queues.png")


def render_run_plots(run_dir: str | Path, out_dir: str | Path | None = None, *, title: str | None = None) -> list[Path]:
    """Render the four plots of one run; returns the PNG paths. Missing files -> ConfigError."""
    run_dir = Path(run_dir)
    out_dir = Path(out_dir) if out_dir else run_dir / "plots"
    title = title or run_title(run_dir)
    for name in ("timeseries.csv",):
        if not (run_dir / name).is_file():
            raise ConfigError(f"not a run folder: {name} is missing", file=str(run_dir))
    try:
        ts = read_columns(run_dir / "timeseries.csv",
                          ["time_s", "instance", "running", "waiting", "kv_utilization",
                           "prompt_tokens_per_s", "generation_tokens_per_s"])
        values, what = run_latencies(run_dir)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0]), file=str(run_dir)) from None
    return [
        _jct_cdf(values, what, title, out_dir / RUN_PLOTS[0]),
        _throughput(ts, title, out_dir / RUN_PLOTS[1]),
        _kv(ts, title, out_dir / RUN_PLOTS[2]),
        _queues(ts, title, out_dir / RUN_PLOTS[3]),
    ]


def run_title(run_dir: Path) -> str:
    """The folder name, plus the axis values when it is a sweep cell (cell.json)."""
    try:
        values = json.loads((run_dir / "cell.json").read_text(encoding="utf-8"))["values"]
    except (OSError, ValueError, KeyError, TypeError):
        return run_dir.name
    return ", ".join(f"{short_key(k)}={value_label(v)}" for k, v in values.items()) or run_dir.name


def run_latencies(run_dir: Path) -> tuple[np.ndarray, str]:
    """Program JCTs, or per-call end-to-end latencies when the run had no programs."""
    if (run_dir / "programs.csv").is_file():
        jct = read_columns(run_dir / "programs.csv", ["jct_s"])["jct_s"]
        if jct.size:
            return jct, "program JCT"
    if (run_dir / "calls.csv").is_file():
        return read_columns(run_dir / "calls.csv", ["e2e_s"])["e2e_s"], "request latency"
    return np.array([]), "program JCT"


def _jct_cdf(values: np.ndarray, what: str, title: str, path: Path) -> Path:
    fig, axes = new_figure()
    ax = axes[0, 0]
    x, y = ecdf(values)
    if x.size:
        ax.step(x, y, where="post", label=f"{what} (n={x.size}, mean {x.mean():.1f} s)")
        ax.legend(loc="lower right")
    else:
        empty_note(ax, "no completed programs")
    label_axes(ax, f"{what} (s)", f"fraction of {'programs' if what == 'program JCT' else 'requests'} (CDF)",
               f"{what[0].upper()}{what[1:]} CDF - {title}", ylim=(0, 1.02))
    return save(fig, path)


def _throughput(ts: dict, title: str, path: Path) -> Path:
    fig, axes = new_figure()
    ax = axes[0, 0]
    if ts["time_s"].size:
        t, prompt = sum_by_time(ts["time_s"], ts["prompt_tokens_per_s"])
        _, gen = sum_by_time(ts["time_s"], ts["generation_tokens_per_s"])
        prompt, window = smooth(t, prompt)
        gen, _ = smooth(t, gen)
        ax.plot(t, prompt, label="prompt (prefill)", lw=1)
        ax.plot(t, gen, label="generation (decode)", lw=1)
        legend_below(ax)
        title += smooth_note(window)
    else:
        empty_note(ax, "empty timeseries")
    label_axes(ax, "simulated time (s)", "throughput (tokens/s)", f"Throughput, all instances - {title}")
    return save(fig, path)


def _kv(ts: dict, title: str, path: Path) -> Path:
    fig, axes = new_figure()
    ax = axes[0, 0]
    note = ""
    util = as_percent(ts["kv_utilization"])
    for instance in np.unique(ts["instance"]):
        mask = ts["instance"] == instance
        values, window = smooth(ts["time_s"][mask], util[mask])
        ax.plot(ts["time_s"][mask], values, lw=1, label=f"instance {int(instance)}")
        note = smooth_note(window)
    if ts["time_s"].size:
        legend_below(ax, ncol=min(4, len(ax.lines)))
    else:
        empty_note(ax, "empty timeseries")
    label_axes(ax, "simulated time (s)", "KV-cache utilisation (%)", f"KV-cache utilisation - {title}{note}",
               ylim=(0, 105))
    return save(fig, path)


def _queues(ts: dict, title: str, path: Path) -> Path:
    fig, axes = new_figure()
    ax = axes[0, 0]
    if ts["time_s"].size:
        t, running = sum_by_time(ts["time_s"], ts["running"])
        _, waiting = sum_by_time(ts["time_s"], ts["waiting"])
        ax.plot(t, running, label="running", lw=1)
        ax.plot(t, waiting, label="waiting", lw=1)
        legend_below(ax)
    else:
        empty_note(ax, "empty timeseries")
    label_axes(ax, "simulated time (s)", "calls (count)", f"Running and waiting calls, all instances - {title}")
    return save(fig, path)
