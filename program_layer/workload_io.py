"""Workloads -> the Orchestrator's program specs (docs/workloads.md).

A file is request JSONL or program JSONL, detected from its first record (``sub_requests``
means programs). A request workload becomes one-call programs in file order. Every record
is checked; a bad one raises :class:`WorkloadError` naming the file, line and field.

Token identity (``llmservingsim.tokens``): explicit ids when given; Mooncake-style
``hash_ids``; otherwise one context stream per program, so call k+1 shares exactly
``min(input_k + output_k, input_{k+1})`` tokens with call k (or ``reuse_prefix_toks``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

from llmservingsim.errors import WorkloadError, iter_lines
from llmservingsim.request import CallSpec
from llmservingsim.tokens import TokenStream


@dataclass
class ProgramSpec:
    """One program of a workload: its arrival and its calls in order."""
    program_id: int
    session_id: str
    arrival_ns: int
    calls: list


def _int(obj: dict, field: str, where: dict, minimum: int = 0, default: Any = None) -> int:
    if field not in obj:
        if default is not None:
            return default
        raise WorkloadError(f"missing field '{field}'", **where)
    v = obj[field]
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise WorkloadError(f"field '{field}' must be an integer >= {minimum}, got {v!r}", **where)
    return v


_INT_ONLY = frozenset((int,))


def _ids(obj: dict, field: str, where: dict) -> Optional[list]:
    v = obj.get(field)
    if v is None:
        return None
    # exact type check in C (json gives plain int; bool, a subclass of int, is refused)
    if not isinstance(v, list) or not set(map(type, v)) <= _INT_ONLY:
        raise WorkloadError(f"field '{field}' must be a list of integers", **where)
    return v


class _StreamFactory:
    def __init__(self, block_size: int):
        self.block_size = block_size
        self.next_uid = 1

    def new(self, **kw) -> TokenStream:
        uid = self.next_uid
        self.next_uid += 1
        return TokenStream(uid, self.block_size, **kw)


def build_programs(records: Iterable[tuple[int, dict]], source: str, block_size: int = 16) -> list[ProgramSpec]:
    """Program specs from parsed records (request or program schema, decided by the first).
    Every source's session ids are assigned here (a record's ``session_id`` / ``request_id``,
    else ``program-N`` / ``request-N``): a duplicate is an error naming both lines."""
    records = list(records)
    if not records:
        raise WorkloadError("empty workload: no records", file=source)
    is_program = "sub_requests" in records[0][1]
    streams = _StreamFactory(block_size)
    programs = []
    first_line: dict[str, int] = {}       # session id -> the line that took it
    for pid, (lineno, obj) in enumerate(records):
        where = {"file": source, "line": lineno}
        if is_program != ("sub_requests" in obj):
            raise WorkloadError("mixes request and program records", **where)
        arrival = _int(obj, "arrival_time_ns", where)
        if is_program:
            subs = obj["sub_requests"]
            if not isinstance(subs, list) or not subs:
                raise WorkloadError("field 'sub_requests' must be a non-empty list", **where)
            session = str(obj.get("session_id", f"program-{pid}"))
            calls = _program_calls(pid, subs, where, streams)
        else:
            session = str(obj.get("request_id", f"request-{pid}"))
            calls = [_request_call(pid, obj, where, streams)]
        if session in first_line:          # outputs key sessions by id: two would be merged
            field = "session_id" if is_program else "request_id"
            raise WorkloadError(f"duplicate {field} {session!r} (also on line {first_line[session]})", **where)
        first_line[session] = lineno
        programs.append(ProgramSpec(pid, session, arrival, calls))
    return programs


def _request_call(pid: int, obj: dict, where: dict, streams: _StreamFactory) -> CallSpec:
    n_in = _int(obj, "input_toks", where, minimum=1)
    n_out = _int(obj, "output_toks", where, minimum=1)
    ids = _ids(obj, "input_tok_ids", where)
    out_ids = _ids(obj, "output_tok_ids", where)
    if ids is not None:
        if len(ids) != n_in:
            raise WorkloadError(f"input_tok_ids has {len(ids)} ids but input_toks is {n_in}", **where)
        stream = streams.new(ids=ids + (out_ids or []))
    elif obj.get("hash_ids") is not None:
        stream = streams.new(hash_ids=_ids(obj, "hash_ids", where),
                             hash_block_tokens=_int(obj, "hash_block_tokens", where, 1, default=512),
                             prompt_len=n_in)
    else:
        stream = streams.new()
    return CallSpec(pid, 0, n_in, n_out, 0, None, stream, f"{where['file']}:{where['line']}")


def _program_calls(pid: int, subs: list, where: dict, streams: _StreamFactory) -> list[CallSpec]:
    calls = []
    stream = None
    prev_ctx = 0
    for k, sub in enumerate(subs):
        w = dict(where)
        if not isinstance(sub, dict):
            raise WorkloadError(f"sub_requests[{k}] must be an object", **w)
        sw = {"file": w["file"], "line": w["line"]}
        n_in = _int(sub, "input_toks", sw, minimum=1)
        n_out = _int(sub, "output_toks", sw, minimum=1)
        gap = _int(sub, "tool_duration_ns", sw, default=0)
        tool = sub.get("tool_name")
        if tool is not None and not isinstance(tool, str):
            raise WorkloadError(f"sub_requests[{k}].tool_name must be a string", **sw)
        ids = _ids(sub, "input_tok_ids", sw)
        if ids is not None:
            if len(ids) != n_in:
                raise WorkloadError(f"sub_requests[{k}].input_tok_ids has {len(ids)} ids, input_toks {n_in}", **sw)
            stream = streams.new(ids=ids)
        else:
            default_reuse = min(prev_ctx, n_in)
            reuse = _int(sub, "reuse_prefix_toks", sw, default=default_reuse) if k else 0
            if reuse > n_in:
                raise WorkloadError(f"sub_requests[{k}].reuse_prefix_toks {reuse} exceeds input_toks {n_in}", **sw)
            if stream is None or stream._ids is not None:
                stream = streams.new()
            elif reuse < prev_ctx:
                # the prompt does not extend the previous context: fork after the shared part
                stream = streams.new(parent=stream, shared_tokens=reuse)
        calls.append(CallSpec(pid, k, n_in, n_out, gap, tool, stream, f"{w['file']}:{w['line']}"))
        prev_ctx = n_in + n_out
    return calls


def load_workload(wl: dict, base_dir: Path, block_size: int, seed: int) -> tuple[list[ProgramSpec], str]:
    """Programs for a validated ``workload`` config section, and a description of the source."""
    if "generator" in wl:
        from program_layer.workloads import generate_programs
        params = dict(wl.get("params") or {})
        records = generate_programs(wl["generator"], programs=wl.get("programs", 50),
                                    rate_jps=wl.get("rate_jps", 0.02),
                                    seed=wl.get("seed", seed), **params)
        src = f"generator:{wl['generator']}"
        return build_programs(enumerate(records, start=1), src, block_size), src
    path = Path(wl["path"])
    if not path.is_absolute():
        path = Path(base_dir) / path
    if "trace" in wl:
        from program_layer.workloads import import_trace
        from program_layer.workloads.importers import MAX_IDLE_S
        records = import_trace(wl["trace"], str(path), limit=wl.get("limit"),
                               time_scale=wl.get("time_scale", 1.0), max_idle_s=wl.get("max_idle_s", MAX_IDLE_S))
        return build_programs(enumerate(records, start=1), str(path), block_size), str(path)
    from program_layer.workloads.io import read_jsonl
    try:
        records = read_jsonl(path, with_lines=True)
    except WorkloadError as exc:
        hint = _trace_hint(path)
        if hint is None:
            raise
        raise WorkloadError(f"{exc.message}; {hint}", file=exc.file, line=exc.line) from None
    return build_programs(records, str(path), block_size), str(path)


def _trace_hint(path: Path) -> Optional[str]:
    """If ``path`` looks like a raw public trace, how to use it instead."""
    try:       # the same guarded reader: the file may be a FIFO or not UTF-8 after line 1
        first = next(iter_lines(path, what="workload"), (0, ""))[1]
    except WorkloadError:
        return None
    fmt = None
    if first.startswith("TIMESTAMP,") or "ContextTokens" in first:
        fmt = "azure"
    elif '"hash_ids"' in first and '"timestamp"' in first:
        fmt = "mooncake"
    elif '"round_index"' in first or '"prefix_tokens"' in first:
        fmt = "tracelab"
    if fmt is None:
        return None
    return (f"this looks like a raw {fmt} trace: set workload.trace: {fmt} (with workload.path), or "
            f"convert it with `agentservesim workload import --format {fmt} {path} --out FILE.jsonl`")
