"""Run outputs: calls.csv, programs.csv, timeseries.csv, summary.json (docs/outputs.md).

Everything is computed from the records, formatted with fixed precision so that the same
run gives byte-identical files. Times are seconds in columns ending ``_s``.
"""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Sequence

NS = 1e9

CALL_COLUMNS = ["program_id", "session_id", "call_index", "request_id", "instance", "release_s",
                "queued_s", "scheduled_s", "first_token_s", "last_token_s", "completion_s", "input_tokens",
                "output_tokens", "cached_tokens", "ttft_s", "tpot_s", "queueing_s", "e2e_s",
                "service_s", "preemptions", "tool_name", "tool_duration_s"]
PROGRAM_COLUMNS = ["program_id", "session_id", "arrival_s", "completion_s", "jct_s", "calls",
                   "preemptions", "attained_service_s"]


def fmt(x: float) -> str:
    return f"{x:.9f}".rstrip("0").rstrip(".") if isinstance(x, float) else str(x)


def percentiles(values: Sequence[float]) -> dict:
    """mean / p50 / p90 / p99 (linear interpolation between order statistics, numpy's default)."""
    if not values:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    v = sorted(values)
    n = len(v)

    def q(p):
        pos = (n - 1) * p
        lo = math.floor(pos)
        hi = min(lo + 1, n - 1)
        return v[lo] + (v[hi] - v[lo]) * (pos - lo)
    return {"mean": round(sum(v) / n, 9), "p50": round(q(0.5), 9), "p90": round(q(0.9), 9),
            "p99": round(q(0.99), 9)}


def call_rows(finished, programs) -> list[dict]:
    """One row per call in workload order (program, then call index)."""
    sessions = {p.program_id: p.session_id for p in programs}
    rows = []
    for f in finished:
        info, call = f.info, f.call
        ttft = (f.first_token_ns - info.arrival_ns) / NS
        n_out = call.output_tokens
        tpot = (f.last_token_ns - f.first_token_ns) / NS / (n_out - 1) if n_out > 1 else 0.0
        rows.append({
            "program_id": info.owner, "session_id": sessions.get(info.owner, ""),
            "call_index": call.call_index, "request_id": info.request_id, "instance": info.instance,
            "release_s": info.arrival_ns / NS, "queued_s": f.queued_ns / NS,
            "scheduled_s": f.first_scheduled_ns / NS,
            "first_token_s": f.first_token_ns / NS, "last_token_s": f.last_token_ns / NS,
            "completion_s": info.completion_ns / NS,
            "input_tokens": call.prompt_tokens, "output_tokens": n_out,
            "cached_tokens": f.num_cached_tokens, "ttft_s": ttft, "tpot_s": tpot,
            "queueing_s": (f.first_scheduled_ns - info.arrival_ns) / NS,
            "e2e_s": (f.last_token_ns - info.arrival_ns) / NS,
            "service_s": (info.completion_ns - f.first_scheduled_ns) / NS,
            "preemptions": f.num_preemptions, "tool_name": call.tool_name or "",
            "tool_duration_s": call.tool_duration_ns / NS,
        })
    rows.sort(key=lambda r: (r["program_id"], r["call_index"]))
    return rows


def program_rows(results) -> list[dict]:
    rows = []
    for r in results:
        done = r.completion_ns is not None
        rows.append({"program_id": r.program_id, "session_id": r.session_id, "arrival_s": r.arrival_ns / NS,
                     "completion_s": r.completion_ns / NS if done else "",
                     "jct_s": (r.completion_ns - r.arrival_ns) / NS if done else "",
                     "calls": r.num_calls, "preemptions": r.num_preemptions,
                     "attained_service_s": r.attained_service_ns / NS})
    return rows


def write_csv(path: Path, columns: list[str], rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(columns)
        for r in rows:
            w.writerow([fmt(r[c]) for c in columns])


def write_json(path: Path, obj) -> None:
    Path(path).write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
