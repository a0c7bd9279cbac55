"""Compare a simulation with a real vLLM run (requests.jsonl beside meta.json).

Both sides use vLLM's definitions, measured from the engine's ``queued_ts`` (the moment the
engine loop ingests the request, which is the end of the step in flight when it arrived):

    TTFT = first_token - queued,  TPOT = (last_token - first_token) / (output_toks - 1),
    latency = last_token - queued.

Real and simulated requests are paired by (program_id, call_index) when the real records
carry them (agent replays), otherwise by position (a request stream: line i of
requests.jsonl is call 0 of program i of the workload).
"""
from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from llmservingsim.errors import (ConfigError, WorkloadError, finite_number, iter_lines, load_json,
                                  parse_json)

from .outputs import percentiles

METRICS = ("ttft_s", "tpot_s", "latency_s")
STATS = ("mean", "p50", "p90", "p99")
REQUIRED = ("input_toks", "output_toks", "queued_ts", "first_token_ts", "last_token_ts")


@dataclass
class Record:
    """One request, times in seconds from the run's first ``queued`` (real) or from 0 (sim)."""
    key: tuple
    input_toks: int
    output_toks: int
    queued: float
    first_token: float
    last_token: float

    @property
    def ttft(self) -> float:
        return self.first_token - self.queued

    @property
    def latency(self) -> float:
        return self.last_token - self.queued

    @property
    def tpot(self):
        return (self.last_token - self.first_token) / (self.output_toks - 1) if self.output_toks > 1 else None


@dataclass
class RealRun:
    path: Path
    records: list
    meta: dict = field(default_factory=dict)
    timeseries: list = field(default_factory=list)    # rows of timeseries.csv, when the run has one

    @property
    def keyed(self) -> bool:
        """Records carry (program_id, call_index): pair by them, not by position."""
        return isinstance(self.records[0].key[0], str)


def _number(r: dict, key: str, file: str, line: int):
    v = r.get(key)
    if not finite_number(v):
        raise WorkloadError(f"field {key!r} must be a finite number, got {v!r}", file=file, line=line)
    return v


def load_real(real_dir) -> RealRun:
    """The real run's records (raises one WorkloadError naming file, line and field)."""
    real_dir = Path(real_dir)
    path = real_dir / "requests.jsonl"
    if not path.is_file():
        raise WorkloadError("no requests.jsonl in the real run's folder", file=str(path))
    recs, keyed = [], None
    for lineno, line in iter_lines(path, error=WorkloadError, what="the real run's requests"):
        if not line.strip():
            continue
        r = parse_json(line, file=str(path), line=lineno, problem="not JSON")
        if not isinstance(r, dict):
            raise WorkloadError("a record must be a JSON object", file=str(path), line=lineno)
        vals = {k: _number(r, k, str(path), lineno) for k in REQUIRED}
        has_key = "program_id" in r and "call_index" in r
        keyed = has_key if keyed is None else keyed
        if has_key != keyed:
            raise WorkloadError("program_id/call_index on some records but not on others", file=str(path), line=lineno)
        if not vals["queued_ts"] <= vals["first_token_ts"] <= vals["last_token_ts"]:
            raise WorkloadError("timestamps must satisfy queued_ts <= first_token_ts <= last_token_ts",
                                file=str(path), line=lineno)
        key = (str(r["program_id"]), int(r["call_index"])) if has_key else (len(recs), 0)
        recs.append(Record(key, int(vals["input_toks"]), int(vals["output_toks"]), vals["queued_ts"],
                           vals["first_token_ts"], vals["last_token_ts"]))
    if not recs:
        raise WorkloadError("no request records", file=str(path))
    t0 = min(r.queued for r in recs)
    for r in recs:
        r.queued, r.first_token, r.last_token = r.queued - t0, r.first_token - t0, r.last_token - t0
    meta = {}
    if (real_dir / "meta.json").is_file():
        meta_path = real_dir / "meta.json"
        meta = load_json(meta_path, error=WorkloadError, what="meta.json", problem="cannot read meta.json: not JSON")
    ts = []
    if (real_dir / "timeseries.csv").is_file():
        ts = list(csv.DictReader(line for _, line in iter_lines(real_dir / "timeseries.csv",
                                                                  what="timeseries.csv")))
    return RealRun(real_dir, recs, meta if isinstance(meta, dict) else {}, ts)


def sim_records(call_rows: list, keyed: bool) -> list:
    """Records of a simulation from its calls.csv rows (``outputs.call_rows``)."""
    out = []
    for i, c in enumerate(call_rows):
        key = (str(c["session_id"]), int(c["call_index"])) if keyed else (i, 0)
        out.append(Record(key, int(c["input_tokens"]), int(c["output_tokens"]), float(c["queued_s"]),
                          float(c["first_token_s"]), float(c["last_token_s"])))
    return out


def pair(real: RealRun, sim: list, config: str = None) -> list:
    """(real, sim) record pairs; the simulation must cover exactly the real run's requests."""
    by_key = {r.key: r for r in sim}
    missing = [r.key for r in real.records if r.key not in by_key]
    if missing or len(sim) != len(real.records):
        raise ConfigError(f"the config does not simulate this run's workload ({len(real.records)} real requests "
                          f"vs {len(sim)} simulated calls" + (f"; e.g. {missing[0]} is missing" if missing else "")
                          + ")", file=config, key="workload")
    pairs = []
    for r in real.records:
        s = by_key[r.key]
        if (s.input_toks, s.output_toks) != (r.input_toks, r.output_toks):
            raise ConfigError(f"request {r.key} has {r.input_toks}/{r.output_toks} prompt/output tokens in the real "
                              f"run but {s.input_toks}/{s.output_toks} in the simulation", file=config, key="workload")
        pairs.append((r, s))
    return pairs


def compare_calls(real: RealRun, call_rows: list, config: str = None) -> tuple:
    """(table, pairs): a simulation's calls (``outputs.call_rows`` or calls.csv rows) paired
    with the real run's requests and compared metric by metric."""
    pairs = pair(real, sim_records(call_rows, real.keyed), config)
    return compare(metrics([r for r, _ in pairs]), metrics([s for _, s in pairs])), pairs


def metrics(records) -> dict:
    return {"ttft_s": [r.ttft for r in records],
            "tpot_s": [r.tpot for r in records if r.tpot is not None],
            "latency_s": [r.latency for r in records]}


def compare(real: dict, sim: dict) -> dict:
    """metric -> stat -> {real, sim, error_pct} (sim relative to real, in %)."""
    table = {}
    for m in METRICS:
        r, s = percentiles(real[m]), percentiles(sim[m])
        table[m] = {stat: {"real": r[stat], "sim": s[stat],
                           "error_pct": round(100.0 * (s[stat] - r[stat]) / r[stat], 3)
                           if r[stat] and s[stat] is not None else None}
                    for stat in STATS}
    return table


def violations(table: dict, max_mean_err: float = None, max_pct_err: float = None) -> list:
    """Stats whose |error| exceeds the tolerance (means and percentiles separately)."""
    bad = []
    for m, stats in table.items():
        for stat, v in stats.items():
            limit = max_mean_err if stat == "mean" else max_pct_err
            if limit is not None and v["error_pct"] is not None and abs(v["error_pct"]) > limit:
                bad.append(f"{m} {stat} {v['error_pct']:+.2f}% (limit {limit}%)")
    return bad


def format_table(table: dict) -> str:
    def num(x, spec):
        return format(x, spec) if x is not None else f"{'-':>12}"
    lines = [f"{'metric':<10} {'stat':<5} {'real':>12} {'sim':>12} {'error':>8}"]
    for m, stats in table.items():
        for stat, v in stats.items():
            err = f"{v['error_pct']:>+7.2f}%" if v["error_pct"] is not None else f"{'-':>8}"
            lines.append(f"{m:<10} {stat:<5} {num(v['real'], '>12.6f')} {num(v['sim'], '>12.6f')} {err}")
    return "\n".join(lines)


def markdown_table(table: dict) -> str:
    lines = ["| metric | " + " | ".join(STATS) + " |", "|---|" + "---:|" * len(STATS)]
    for m, stats in table.items():
        cells = [f"{v['error_pct']:+.2f}%" if v["error_pct"] is not None else "-" for v in stats.values()]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
