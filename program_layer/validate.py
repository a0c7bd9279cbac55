"""Compare a simulation with a real vLLM run (formats.md §5).

Real metrics per request from ``requests.jsonl``: TTFT = first_token_ts - queued_ts,
TPOT = (last_token_ts - first_token_ts) / (output_toks - 1), latency = last_token_ts -
queued_ts. The simulated side uses the same definitions on calls.csv (release = queued).
"""
from __future__ import annotations

import json
from pathlib import Path

from llmservingsim.errors import WorkloadError

from .outputs import percentiles

METRICS = ("ttft_s", "tpot_s", "latency_s")


def real_metrics(real_dir: Path) -> dict:
    path = Path(real_dir) / "requests.jsonl"
    if not path.exists():
        raise WorkloadError("missing requests.jsonl of the real run", file=str(path))
    out = {m: [] for m in METRICS}
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
            q, f, l, n = r["queued_ts"], r["first_token_ts"], r["last_token_ts"], r["output_toks"]
            ttft, latency = f - q, l - q
            tpot = (l - f) / (n - 1) if n > 1 else None
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise WorkloadError(f"bad request record ({type(exc).__name__}: {exc})", file=str(path),
                                line=lineno) from None
        out["ttft_s"].append(ttft)
        out["latency_s"].append(latency)
        if tpot is not None:
            out["tpot_s"].append(tpot)
    return out


def sim_metrics(calls: list[dict]) -> dict:
    return {"ttft_s": [r["ttft_s"] for r in calls],
            "tpot_s": [r["tpot_s"] for r in calls if r["output_tokens"] > 1],
            "latency_s": [r["e2e_s"] for r in calls]}


def compare(real: dict, sim: dict) -> dict:
    table = {}
    for m in METRICS:
        r, s = percentiles(real[m]), percentiles(sim[m])
        table[m] = {stat: {"real": r[stat], "sim": s[stat],
                           "error_pct": round(100.0 * (s[stat] - r[stat]) / r[stat], 3)
                           if r[stat] and s[stat] is not None else None}
                    for stat in ("mean", "p50", "p90", "p99")}
    return table


def format_table(table: dict) -> str:
    def num(x, spec):
        return format(x, spec) if x is not None else f"{'-':>12}"
    lines = [f"{'metric':<10} {'stat':<5} {'real':>12} {'sim':>12} {'error':>8}"]
    for m, stats in table.items():
        for stat, v in stats.items():
            err = f"{v['error_pct']:>+7.2f}%" if v["error_pct"] is not None else f"{'-':>8}"
            lines.append(f"{m:<10} {stat:<5} {num(v['real'], '>12.6f')} {num(v['sim'], '>12.6f')} {err}")
    return "\n".join(lines)
