"""Search history: ``history.csv`` and the best-fitness-by-iteration plot.

Rows come from OpenEvolve's evolution trace (one per evaluated child, with its metrics and
our artifacts) and its failure log (iterations that produced no candidate, e.g. a diff that
did not apply or an LLM error), plus iteration 0 for the seed. Columns::

    iteration, candidate, fitness, mean_jct_s, status, error

``status`` is ok | error | timeout for evaluated candidates and ``no_candidate`` for
iterations that never reached the simulator (fitness empty). The plot is rendered from the
CSV rows, never from live state.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Iterable, Optional

COLUMNS = ("iteration", "candidate", "fitness", "mean_jct_s", "status", "error")


def _read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue    # a line cut short by an interrupted run
    return rows


def failures_path(trace_path: Path) -> Path:
    """Where OpenEvolve writes failed iterations next to the trace (``<stem>_failures.jsonl``)."""
    return trace_path.with_name(f"{trace_path.stem}_failures{trace_path.suffix}")


def collect_rows(trace_path: Path, seed_row: dict) -> list[dict]:
    """History rows ordered by iteration (seed first); ties keep trace order."""
    rows = [seed_row]
    for entry in _read_jsonl(trace_path):
        metrics = entry.get("child_metrics") or {}
        artifacts = entry.get("artifacts") or {}
        status = artifacts.get("status") or ("ok" if metrics.get("combined_score") else "error")
        if metrics.get("timeout") is True:
            status = "timeout"
        rows.append({"iteration": int(entry.get("iteration", 0)), "candidate": entry.get("child_id", ""),
                     "fitness": float(metrics.get("combined_score", 0.0)),
                     "mean_jct_s": metrics.get("mean_jct_s") if status == "ok" else None,
                     "status": status, "error": _one_line(artifacts.get("error"))})
    for entry in _read_jsonl(failures_path(trace_path)):
        rows.append({"iteration": int(entry.get("iteration", 0)), "candidate": "",
                     "fitness": None, "mean_jct_s": None, "status": "no_candidate",
                     "error": _one_line(entry.get("error"))})
    rows.sort(key=lambda r: r["iteration"])     # stable: equal iterations keep their order
    return rows


def _one_line(text: Optional[str]) -> str:
    return " ".join(str(text).split())[:500] if text else ""


def write_csv(rows: Iterable[dict], path: Path) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in COLUMNS})


def best_by_iteration(rows: list[dict]) -> tuple[list[int], list[float]]:
    """Running maximum of fitness after each iteration that has any row."""
    best, xs, ys = None, [], []
    for row in rows:
        fit = row.get("fitness")
        if fit is not None:
            best = fit if best is None else max(best, fit)
        if best is None:
            continue
        if xs and xs[-1] == row["iteration"]:
            ys[-1] = best
        else:
            xs.append(row["iteration"])
            ys.append(best)
    return xs, ys


def plot(rows: list[dict], path: Path, title: str) -> None:
    """PNG: best fitness so far (step line) and each candidate's fitness (points; failures
    at 0 in red)."""
    from program_layer.extras import require
    matplotlib = require("matplotlib", "plot", "the search history plot")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    xs, ys = best_by_iteration(rows)
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    ok = [(r["iteration"], r["fitness"]) for r in rows if r.get("fitness") is not None and r["status"] == "ok"]
    bad = [(r["iteration"], 0.0) for r in rows if r["status"] in ("error", "timeout")]
    if ok:
        ax.scatter(*zip(*ok), s=18, color="tab:gray", alpha=0.7, label="candidate", zorder=2)
    if bad:
        ax.scatter(*zip(*bad), s=22, marker="x", color="tab:red", label="failed (fitness 0)", zorder=2)
    if xs:
        ax.step(xs, ys, where="post", color="tab:blue", linewidth=2, label="best so far", zorder=3)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--", label="seed (1.0)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("iteration")
    ax.set_ylabel("fitness (seed mean JCT / candidate mean JCT)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
