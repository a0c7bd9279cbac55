"""The plots of ``agentservesim validate --out DIR`` (real against simulated):

  validation_cdf.png         CDFs of TTFT, TPOT and latency, real and simulated
  validation_timeseries.png  generation tokens/s, running and waiting requests, KV use over
                             time: the real run's own timeseries.csv (vLLM stat logger) when it
                             has one, else reconstructed from its per-request timestamps
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from program_layer.sweep.plot_io import as_percent, ecdf, label_axes, legend_below, new_figure, read_columns, save
from program_layer.validate import metrics


def _col(rows: list, name: str) -> np.ndarray:
    return np.asarray([float(r[name]) for r in rows if r.get(name) not in (None, "")], dtype=float)


def render(real, pairs: list, out: Path) -> list:
    out = Path(out)
    fig, axes = new_figure(3, 1)
    rm, sm = metrics([r for r, _ in pairs]), metrics([s for _, s in pairs])
    for ax, (m, unit) in zip(axes[0], (("ttft_s", "TTFT (s)"), ("tpot_s", "TPOT (ms)"), ("latency_s", "latency (s)"))):
        scale = 1e3 if m == "tpot_s" else 1.0
        for vals, label, style in ((rm[m], "real vLLM", "-"), (sm[m], "simulated", "--")):
            x, y = ecdf(np.asarray(vals, dtype=float) * scale)
            ax.plot(x, y, style, color="C0" if style == "-" else "C1", label=label)
        label_axes(ax, unit, "fraction of requests", f"{m[:-2].upper()} CDF", ylim=(0, 1.0))
        ax.legend(frameon=False)
    paths = [save(fig, out / "validation_cdf.png")]

    fig, axes = new_figure(3, 1)
    sim = read_columns(out / "timeseries.csv", ["time_s", "running", "waiting", "kv_utilization",
                                                 "generation_tokens_per_s"])
    ts = real.timeseries
    if ts and "gen_throughput" in ts[0]:
        rt = _col(ts, "t")
        real_series = {"gen": _col(ts, "gen_throughput"), "running": _col(ts, "running"),
                       "waiting": _col(ts, "waiting"),
                       "kv": _col(ts, "kv_cache_pct") if "kv_cache_pct" in ts[0] else None}
        rt_shift = rt - 1.0               # vLLM's row t covers (t-1, t]; ours: [t, t+1)
    else:                                  # per-request timestamps: tokens spread over [first, last]
        end = max(r.last_token for r in real.records)
        rt_shift = np.arange(0.0, np.ceil(end) + 1.0)
        gen = np.zeros_like(rt_shift)
        run = np.zeros_like(rt_shift)
        for r in real.records:
            span = max(r.last_token - r.first_token, 1e-9)
            lo, hi = int(r.first_token), int(r.last_token)
            for k in range(lo, hi + 1):
                overlap = min(hi + 1, r.last_token) - max(k, r.first_token)
                gen[k] += max(overlap, 0.0) / span * max(r.output_toks - 1, 0)
            run[int(r.queued):hi + 1] += 1
        real_series = {"gen": gen, "running": run, "waiting": None, "kv": None}
    ax = axes[0][0]
    ax.plot(rt_shift, real_series["gen"], color="C0", label="real vLLM")
    ax.plot(sim["time_s"], sim["generation_tokens_per_s"], "--", color="C1", label="simulated")
    label_axes(ax, "time (s)", "generated tokens/s", "generation throughput")
    legend_below(ax)
    ax = axes[0][1]
    ax.plot(rt_shift, real_series["running"], color="C0", label="real running")
    ax.plot(sim["time_s"], sim["running"], "--", color="C1", label="sim running")
    if real_series["waiting"] is not None:
        ax.plot(rt_shift, real_series["waiting"], color="C2", label="real waiting")
    ax.plot(sim["time_s"], sim["waiting"], "--", color="C3", label="sim waiting")
    label_axes(ax, "time (s)", "requests", "running and waiting")
    legend_below(ax)
    ax = axes[0][2]
    if real_series["kv"] is not None and real_series["kv"].size:
        ax.plot(rt_shift, real_series["kv"], color="C0", label="real vLLM")
    ax.plot(sim["time_s"], as_percent(sim["kv_utilization"]), "--", color="C1", label="simulated")
    label_axes(ax, "time (s)", "KV cache used (%)", "KV use", ylim=(0, 105))
    legend_below(ax)
    paths.append(save(fig, out / "validation_timeseries.png"))
    return paths
