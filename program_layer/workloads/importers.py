"""Readers for public traces -> workload records (docs/workloads.md).

``import_trace(fmt, path, limit=None, time_scale=1.0)``:

- ``tracelab``: TraceLab agent round traces -> agent programs (see ``tracelab.py``).
- ``mooncake``: Mooncake traces (``timestamp`` ms, ``input_length``, ``output_length``,
  ``hash_ids``) -> requests carrying ``hash_ids`` and ``hash_block_tokens = 512``; the engine gives
  the token at offset o of hash block h the identity (h, o), so requests with equal leading
  hash ids share that prefix. ``len(hash_ids)`` must be ``ceil(input_length / 512)``.
- ``azure``: Azure LLM inference trace 2023 CSVs (``TIMESTAMP,ContextTokens,GeneratedTokens``)
  -> requests.

Request arrivals are relative to the earliest kept row (for these traces, the first row),
multiplied by ``time_scale`` (0.5 = the same requests twice as fast); tool durations of programs
are never scaled. ``limit`` keeps the first ``limit`` rows of a request trace (file order) or the
first ``limit`` programs by arrival. Output is sorted by arrival (stable, so file order breaks
ties). A zero output length becomes 1: the engine (like vLLM, ``max_tokens >= 1``) generates at
least one token per request, and a prefill-only row still costs that first token.

Malformed input raises ``WorkloadError(..., file=path, line=n)`` naming the field; a bad
``limit``/``time_scale`` raises ``ConfigError`` naming ``workload.limit``/``workload.time_scale``.
"""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from typing import Callable, Iterator

from llmservingsim.errors import ConfigError, WorkloadError, finite_number, iter_lines, parse_json

from ._fields import (MAX_IDLE_S, check_limit, check_max_idle_s, check_time_scale, need, need_int,
                      need_timestamp, scaled_ns)
from .tracelab import import_tracelab

MOONCAKE_BLOCK_TOKENS = 512  # Mooncake hashes prompts in 512-token blocks (Mooncake trace README)
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_CSV_INT = re.compile(r"-?[0-9]+\Z")


@dataclass(frozen=True)
class ImporterSpec:
    """One trace format: description, record kind (``programs`` or ``requests``), reader."""

    description: str
    kind: str
    read: Callable[..., list[dict]]


def import_mooncake(path: str, *, limit: int | None, time_scale: float) -> list[dict]:
    """Mooncake JSONL -> request dicts with ``hash_ids`` (see module docstring)."""
    rows = []
    for n, line in _lines(path, limit):
        row = parse_json(line, file=path, line=n)
        if not isinstance(row, dict):
            raise WorkloadError("each line must be a JSON object", file=path, line=n)
        ts = need(row, "timestamp", path, n)
        if not finite_number(ts) or ts < 0:       # inf or an int beyond float: scaling would raise
            raise WorkloadError(f"field 'timestamp' must be a non-negative number of ms, got "
                                f"{ts!r}", file=path, line=n)
        arrival_ns = ts * 1_000_000 if isinstance(ts, int) else int(round(ts * 1_000_000))
        input_toks = need_int(row, "input_length", path, n, minimum=1)
        output_toks = max(1, need_int(row, "output_length", path, n))
        hash_ids = need(row, "hash_ids", path, n)
        if not isinstance(hash_ids, list) or any(
                isinstance(h, bool) or not isinstance(h, int) or h < 0 for h in hash_ids):
            raise WorkloadError("field 'hash_ids' must be a list of non-negative integers",
                                file=path, line=n)
        blocks = -(-input_toks // MOONCAKE_BLOCK_TOKENS)
        if len(hash_ids) != blocks:
            raise WorkloadError(f"field 'hash_ids' has {len(hash_ids)} ids but input_length "
                                f"{input_toks} needs {blocks} blocks of "
                                f"{MOONCAKE_BLOCK_TOKENS}", file=path, line=n)
        rows.append({"input_toks": input_toks, "output_toks": output_toks,
                     "arrival_time_ns": arrival_ns, "hash_ids": hash_ids,
                     "hash_block_tokens": MOONCAKE_BLOCK_TOKENS})
    return _relative(rows, path, time_scale)


def import_azure(path: str, *, limit: int | None, time_scale: float) -> list[dict]:
    """Azure LLM inference 2023 CSV -> request dicts (see module docstring)."""
    rows = []
    header: list[str] | None = None
    for n, line in _lines(path, None if limit is None else limit + 1):
        try:
            fields = next(csv.reader([line]))
        except csv.Error as exc:      # e.g. a field over csv's 128 KiB field limit
            raise WorkloadError(f"not valid CSV ({exc})", file=path, line=n) from None
        if header is None:
            header = [f.strip() for f in fields]
            missing = [c for c in AZURE_COLUMNS if c not in header]
            if missing:
                raise WorkloadError(f"missing column {missing[0]!r} (need "
                                    f"{','.join(AZURE_COLUMNS)})", file=path, line=n)
            col = {c: header.index(c) for c in AZURE_COLUMNS}
            continue
        if len(fields) != len(header):
            raise WorkloadError(f"expected {len(header)} columns, got {len(fields)}",
                                file=path, line=n)
        record = {c: fields[col[c]].strip() for c in AZURE_COLUMNS}
        arrival_ns = need_timestamp(record["TIMESTAMP"], "TIMESTAMP", path, n)
        rows.append({"input_toks": _csv_int(record, "ContextTokens", path, n, 1),
                     "output_toks": max(1, _csv_int(record, "GeneratedTokens", path, n, 0)),
                     "arrival_time_ns": arrival_ns})
    if header is None:
        raise WorkloadError("empty file (no header)", file=path)
    return _relative(rows, path, time_scale)


IMPORTERS: dict[str, ImporterSpec] = {
    "tracelab": ImporterSpec("TraceLab agent round traces (JSONL) -> agent programs",
                             "programs", import_tracelab),
    "mooncake": ImporterSpec("Mooncake traces (JSONL, 512-token hash blocks) -> requests "
                             "with hash_ids", "requests", import_mooncake),
    "azure": ImporterSpec("Azure LLM inference 2023 CSV (TIMESTAMP,ContextTokens,"
                          "GeneratedTokens) -> requests", "requests", import_azure),
}



def import_trace(fmt: str, path: str, *, limit: int | None = None,
                 time_scale: float = 1.0, max_idle_s: float | None = MAX_IDLE_S) -> list[dict]:
    """Read trace ``path`` of format ``fmt`` into workload records sorted by arrival, with
    idle stretches longer than ``max_idle_s`` shortened to it (``compress_idle``; None keeps
    them; the CLI calls ``compress_idle`` itself to report what it removed)."""
    spec = IMPORTERS.get(fmt)
    if spec is None:
        raise ConfigError(f"unknown trace format {fmt!r} (known: {', '.join(IMPORTERS)})",
                          key="workload.format")
    max_idle_s = None if max_idle_s is None else check_max_idle_s(max_idle_s)   # before reading
    records = spec.read(str(path), limit=check_limit(limit), time_scale=check_time_scale(time_scale))
    if max_idle_s is not None:
        compress_idle(records, round(max_idle_s * 1e9))
    return records


@dataclass(frozen=True)
class IdleCompression:
    gaps: int             # idle stretches shortened
    removed_ns: int       # simulated time taken out in all
    longest_ns: int       # the longest stretch before shortening


def compress_idle(records: list[dict], max_idle_ns: int) -> IdleCompression:
    """Shorten every stretch in which no record is active to ``max_idle_ns`` (in place).

    A request is active at its arrival; a program from its arrival for the sum of its tool
    durations (a lower bound of its span: its calls take time too, so no gap is shortened
    while the program could still be running its calls... within that bound). Arrivals after
    a long stretch move earlier by the excess; order and every in-program gap are kept, so a
    trace with 72 days between two sessions simulates as two sessions ten minutes apart."""
    busy_until = None
    shift = gaps = removed = longest = 0
    for r in records:                          # sorted by arrival
        t = r["arrival_time_ns"] - shift
        if busy_until is not None and t - busy_until > max_idle_ns:
            excess = t - busy_until - max_idle_ns
            longest = max(longest, t - busy_until)
            shift += excess
            removed += excess
            gaps += 1
            t -= excess
        r["arrival_time_ns"] = t
        end = t + sum(c.get("tool_duration_ns", 0) for c in r.get("sub_requests", ()))
        busy_until = end if busy_until is None else max(busy_until, end)
    return IdleCompression(gaps, removed, longest)


def _lines(path: str, limit: int | None) -> Iterator[tuple[int, str]]:
    """Non-blank lines with 1-based line numbers, at most ``limit`` of them (the file is read
    by ``iter_lines``: a regular UTF-8 file, each line at most 64 MiB)."""
    kept = 0
    for n, line in iter_lines(path, error=WorkloadError, what="trace"):
        if limit is not None and kept >= limit:
            return
        if line.strip():
            kept += 1
            yield n, line.rstrip("\r\n")


def _csv_int(record: dict, field: str, path: str, n: int, minimum: int) -> int:
    text = record[field]
    if not _CSV_INT.match(text):      # not str.isdigit: it accepts "²", which int() refuses
        raise WorkloadError(f"field {field!r} must be an integer, got {text!r}",
                            file=path, line=n)
    value = int(text)
    if value < minimum:
        raise WorkloadError(f"field {field!r} must be >= {minimum}, got {value}",
                            file=path, line=n)
    return value


def _relative(rows: list[dict], path: str, time_scale: float) -> list[dict]:
    if not rows:
        raise WorkloadError("no records in trace", file=path)
    t0 = min(r["arrival_time_ns"] for r in rows)
    for r in rows:
        r["arrival_time_ns"] = scaled_ns(r["arrival_time_ns"] - t0, time_scale)
    rows.sort(key=lambda r: r["arrival_time_ns"])  # stable: file order breaks ties
    return rows
