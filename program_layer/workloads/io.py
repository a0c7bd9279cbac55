"""Workload JSONL writing, reading, and summary statistics.

``write_jsonl`` is deterministic: keys sorted, compact separators, one record per line, ``\\n``
line ends, and integer-valued fields must already be ``int`` (a float where an int belongs is a
bug upstream and raises instead of silently writing ``12.0``).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from llmservingsim.errors import WorkloadError, iter_lines, parse_json

LONG_TOOL_THRESHOLD_NS = 60 * 1_000_000_000  # "calls longer than one minute" (paper §1, TraceLab)

# The schema's fields (docs/workloads.md); any other field is an error, so a misspelt optional
# field ("reuse_prefix_tok") cannot be silently ignored. Keep in sync with the docs' tables.
PROGRAM_FIELDS = frozenset({"session_id", "arrival_time_ns", "sub_requests"})
CALL_FIELDS = frozenset({"input_toks", "output_toks", "tool_duration_ns", "tool_name",
                         "reuse_prefix_toks", "input_tok_ids"})
REQUEST_FIELDS = frozenset({"input_toks", "output_toks", "arrival_time_ns", "request_id",
                            "input_tok_ids", "output_tok_ids", "hash_ids", "hash_block_tokens"})

# Fields that must be integers wherever they appear (top level or in a sub-request).
_INT_FIELDS = frozenset({"input_toks", "output_toks", "arrival_time_ns", "tool_duration_ns",
                         "reuse_prefix_toks", "hash_block_tokens"})


def write_jsonl(path: str | Path, records: Iterable[dict]) -> int:
    """Write ``records`` one per line (sorted keys, no spaces); return the number written."""
    lines = [dumps_record(r) for r in records]
    text = "".join(line + "\n" for line in lines)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)
    return len(lines)


def dumps_record(record: dict) -> str:
    """One record as its canonical JSON line (sorted keys, compact, ints checked)."""
    _check_ints(record)
    for sub in record.get("sub_requests", ()):
        _check_ints(sub)
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False)


def read_jsonl(path: str | Path, *, with_lines: bool = False) -> list:
    """Read and check a workload JSONL file (programs or requests); blank lines are skipped.
    ``with_lines`` returns ``(line number, record)`` pairs, for later errors that name lines.

    Raises WorkloadError naming the file, line and field for an unreadable file (not a
    regular file, not UTF-8, a line over 64 MiB), unparseable JSON, a non-object line, a
    record that breaks the schema (see :func:`check_record`). Duplicate session ids are
    refused where every source's ids are assigned (``workload_io.build_programs``).
    """
    records: list = []
    for n, line in iter_lines(path, error=WorkloadError, what="workload"):
        if not line.strip():
            continue
        obj = parse_json(line, file=str(path), line=n)
        check_record(obj, str(path), n)
        records.append((n, obj) if with_lines else obj)
    return records


def check_record(obj: object, path: str, line: int) -> None:
    """Schema check of one program or request record (docs/workloads.md); WorkloadError naming the
    field. Only the documented fields are allowed (``PROGRAM_FIELDS``, ``CALL_FIELDS``,
    ``REQUEST_FIELDS``). Programs need a non-empty ``sub_requests``; every call's ``input_toks``
    and ``output_toks`` >= 1 (as the engine's loader requires) and any ``reuse_prefix_toks``
    <= its ``input_toks``. Counts and times are JSON integers: NaN, infinities, fractions and
    negative values are refused."""
    if not isinstance(obj, dict):
        raise WorkloadError("each line must be a JSON object", file=path, line=line)
    if "sub_requests" not in obj and "session_id" in obj:
        raise WorkloadError("missing field 'sub_requests' (a record with a session_id is a program)",
                            file=path, line=line)
    _known(obj, PROGRAM_FIELDS if "sub_requests" in obj else REQUEST_FIELDS, path, line)
    _nonneg(obj, "arrival_time_ns", path, line)
    if "sub_requests" not in obj:
        _nonneg(obj, "input_toks", path, line, minimum=1)
        _nonneg(obj, "output_toks", path, line, minimum=1)
        return
    if not isinstance(obj.get("session_id"), str):
        raise WorkloadError("field 'session_id' must be a string", file=path, line=line)
    subs = obj["sub_requests"]
    if not isinstance(subs, list) or not subs:
        raise WorkloadError("field 'sub_requests' must be a non-empty list", file=path, line=line)
    for k, sub in enumerate(subs):
        where = f"sub_requests[{k}]"
        if not isinstance(sub, dict):
            raise WorkloadError(f"field {where!r} must be an object", file=path, line=line)
        _known(sub, CALL_FIELDS, path, line, prefix=where)
        _nonneg(sub, "input_toks", path, line, minimum=1, prefix=where)
        _nonneg(sub, "output_toks", path, line, minimum=1, prefix=where)
        _nonneg(sub, "tool_duration_ns", path, line, prefix=where)
        if "reuse_prefix_toks" in sub:
            _nonneg(sub, "reuse_prefix_toks", path, line, prefix=where)
            if sub["reuse_prefix_toks"] > sub["input_toks"]:
                raise WorkloadError(f"field '{where}.reuse_prefix_toks' exceeds its input_toks",
                                    file=path, line=line)


def _known(obj: dict, fields: frozenset, path: str, line: int, *, prefix: str = "") -> None:
    """WorkloadError naming the first field of ``obj`` (in file order) not in ``fields``."""
    for field in obj:
        if field not in fields:
            name = f"{prefix}.{field}" if prefix else field
            raise WorkloadError(f"unknown field {name!r} (known: {', '.join(sorted(fields))})",
                                file=path, line=line)


def _nonneg(obj: dict, field: str, path: str, line: int, *, minimum: int = 0,
            prefix: str = "") -> None:
    name = f"{prefix}.{field}" if prefix else field
    if field not in obj:
        raise WorkloadError(f"missing field {name!r}", file=path, line=line)
    value = obj[field]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise WorkloadError(f"field {name!r} must be an integer >= {minimum}, got {value!r}",
                            file=path, line=line)


def workload_stats(records: list[dict]) -> dict:
    """Summary of a workload: program statistics if records have ``sub_requests``, else request
    statistics. Context tokens are per call (each prompt counts its whole context); a "tool call"
    is every call except a program's last (each is followed by a tool gap)."""
    if not records:
        return {"kind": "empty", "records": 0}
    if all("sub_requests" in r for r in records):
        return _program_stats(records)
    return _request_stats(records)


def _program_stats(programs: list[dict]) -> dict:
    import statistics          # only `workload stats` needs it, not a run reading a workload
    calls = [c for p in programs for c in p["sub_requests"]]
    per_program = [len(p["sub_requests"]) for p in programs]
    gaps = [c["tool_duration_ns"] for p in programs for c in p["sub_requests"][:-1]]
    names = sorted({c.get("tool_name", "") for c in calls} - {""})
    long_gaps = [g for g in gaps if g > LONG_TOOL_THRESHOLD_NS]
    tool_ns = sum(gaps)
    arrivals = [p["arrival_time_ns"] for p in programs]
    inputs = [c["input_toks"] for c in calls]
    outputs = [c["output_toks"] for c in calls]
    return {
        "kind": "programs",
        "programs": len(programs),
        "calls": len(calls),
        "median_calls_per_program": float(statistics.median(per_program)),
        "mean_calls_per_program": round(len(calls) / len(programs), 3),
        "max_calls_per_program": max(per_program),
        "total_context_tokens": sum(inputs),
        "mean_context_tokens": round(sum(inputs) / len(calls), 1),
        "max_context_tokens": max(inputs),
        "total_output_tokens": sum(outputs),
        "median_output_tokens": float(statistics.median(outputs)),
        "tool_calls": len(gaps),
        "tool_time_s": round(tool_ns / 1e9, 3),
        "long_tool_calls": len(long_gaps),
        "long_tool_call_share": round(len(long_gaps) / len(gaps), 4) if gaps else 0.0,
        "long_tool_time_share": round(sum(long_gaps) / tool_ns, 4) if tool_ns else 0.0,
        "tool_names": names,
        "tool_name_count": len(names),
        "arrival_span_s": round((max(arrivals) - min(arrivals)) / 1e9, 3),
    }


def _request_stats(requests: list[dict]) -> dict:
    arrivals = [r["arrival_time_ns"] for r in requests]
    inputs = [r["input_toks"] for r in requests]
    return {
        "kind": "requests",
        "requests": len(requests),
        "total_input_tokens": sum(inputs),
        "max_input_tokens": max(inputs),
        "total_output_tokens": sum(r["output_toks"] for r in requests),
        "hash_id_requests": sum(1 for r in requests if "hash_ids" in r),
        "arrival_span_s": round((max(arrivals) - min(arrivals)) / 1e9, 3),
    }


def _check_ints(record: dict) -> None:
    for key in _INT_FIELDS.intersection(record):
        value = record[key]
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"field {key!r} must be int, got {type(value).__name__} {value!r}")
