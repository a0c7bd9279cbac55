"""TraceLab round traces (JSONL, one LLM round per line) -> agent programs.

Mapping (one session = one program, rounds ordered by ``round_index``):

- call k: ``input_toks = input_tokens_total``, ``output_toks = output_tokens`` (reasoning
  tokens are counted inside the providers' ``output_tokens``; ``reasoning_output_tokens`` is
  not added again). A round with 0 output tokens gets 1 (the engine generates at least one).
- shared prefix: the engine assumes ``min(input_{k-1} + output_{k-1}, input_k)``. TraceLab's
  ``prefix_tokens`` is the provider's measured cached prefix; when it is smaller (context
  compaction, a cache boundary) call k gets ``reuse_prefix_toks = prefix_tokens``. A larger
  value (a prefix cached from elsewhere) cannot exceed what the previous call shares, so it is
  clamped to the default and omitted. Round 0 has no predecessor: never written.
- tool gap after round k: the wall time during which at least one of its tools was running,
  i.e. the length of the union of the intervals ``[emitted_at, emitted_at +
  tool_wall_latency_ms]``. Sequential tools therefore add up (sum) and tools run in parallel
  count once (max when emitted together). If any tool lacks ``emitted_at`` the gap is the sum of
  ``tool_wall_latency_ms`` (the sequential assumption). ``tool_name`` is the name of the
  first-emitted tool (known when the call completes; which tool finishes last is not).
- a round without tools that is not the session's last is followed by the user's turn: the gap
  is from that round's last timing event to the next round's first, tool name ``"user"``.
- the session's last round: ``tool_duration_ns = 0`` and ``tool_name = ""``.
- arrival: the earliest ``timing_events`` timestamp of round 0 (or, without events, of the
  session), relative to the earliest session, times ``time_scale``. Programs are returned sorted
  by arrival, ties by session id; ``limit`` keeps the first ``limit`` programs in that order.
"""
from __future__ import annotations

from llmservingsim.errors import WorkloadError, iter_lines, parse_json

from ._fields import as_int, need, need_int, need_timestamp, scaled_ns

USER_TOOL = "user"


def import_tracelab(path: str, *, limit: int | None, time_scale: float) -> list[dict]:
    """Read a TraceLab round-trace JSONL file into program dicts (see module docstring)."""
    sessions: dict[str, list[tuple[int, dict]]] = {}
    for line_no, row in _rows(path):
        sid = need(row, "session_id", path, line_no)
        if not isinstance(sid, str) or not sid:
            raise WorkloadError(f"field 'session_id' must be a non-empty string, got {sid!r}",
                                file=path, line=line_no)
        sessions.setdefault(sid, []).append((line_no, row))
    programs = []
    for sid, rows in sessions.items():
        rounds = [_parse_round(row, path, n) for n, row in rows]
        rounds.sort(key=lambda r: r["round_index"])
        for a, b in zip(rounds, rounds[1:]):
            if a["round_index"] == b["round_index"]:
                raise WorkloadError(f"field 'round_index': session {sid!r} repeats round "
                                    f"{b['round_index']}", file=path, line=b["line"])
        programs.append((_arrival(rounds, path), sid, _calls(rounds)))
    if not programs:
        raise WorkloadError("no rounds in trace", file=path)
    programs.sort(key=lambda p: (p[0], p[1]))
    if limit is not None:
        programs = programs[:limit]
    t0 = min(p[0] for p in programs)
    return [{"session_id": sid, "arrival_time_ns": scaled_ns(t - t0, time_scale),
             "sub_requests": calls} for t, sid, calls in programs]


def _rows(path: str):
    for n, line in iter_lines(path, error=WorkloadError, what="trace"):
        if not line.strip():
            continue
        row = parse_json(line, file=path, line=n)
        if not isinstance(row, dict):
            raise WorkloadError("each line must be a JSON object", file=path, line=n)
        yield n, row


def _parse_round(row: dict, path: str, n: int) -> dict:
    """The fields of one round this importer uses, checked; times in ns since the epoch."""
    events = row.get("timing_events") or []
    if not isinstance(events, list):
        raise WorkloadError("field 'timing_events' must be a list", file=path, line=n)
    times = [need_timestamp(need(e, "timestamp", path, n), "timing_events[].timestamp", path, n)
             for e in events]
    tools_raw = row.get("tools") or []
    if not isinstance(tools_raw, list):
        raise WorkloadError("field 'tools' must be a list", file=path, line=n)
    tools = []
    for t in tools_raw:
        latency_ms = need(t, "tool_wall_latency_ms", path, n)
        latency_ns = as_int(latency_ms, "tools[].tool_wall_latency_ms", path, n) * 1_000_000
        name = t.get("tool_name") or ""
        if not isinstance(name, str):
            raise WorkloadError(f"field 'tools[].tool_name' must be a string, got {name!r}",
                                file=path, line=n)
        emitted = t.get("emitted_at")
        start = None if emitted is None else need_timestamp(emitted, "tools[].emitted_at", path, n)
        tools.append((start, latency_ns, name))
    prefix = row.get("prefix_tokens")
    return {
        "line": n,
        "round_index": need_int(row, "round_index", path, n),
        "input": need_int(row, "input_tokens_total", path, n, minimum=1),
        "output": max(1, need_int(row, "output_tokens", path, n)),
        "prefix": None if prefix is None else as_int(prefix, "prefix_tokens", path, n),
        "first_ns": min(times) if times else None,
        "last_ns": max(times) if times else None,
        "tools": tools,
    }


def _arrival(rounds: list[dict], path: str) -> int:
    first = rounds[0]["first_ns"]
    if first is None:
        known = [r["first_ns"] for r in rounds if r["first_ns"] is not None]
        if not known:
            raise WorkloadError("field 'timing_events': session has no timestamps",
                                file=path, line=rounds[0]["line"])
        first = min(known)
    return first


def _calls(rounds: list[dict]) -> list[dict]:
    calls = []
    for k, rnd in enumerate(rounds):
        call = {"input_toks": rnd["input"], "output_toks": rnd["output"]}
        if k > 0 and rnd["prefix"] is not None:
            prev = rounds[k - 1]
            default = min(prev["input"] + prev["output"], rnd["input"])
            if rnd["prefix"] < default:
                call["reuse_prefix_toks"] = rnd["prefix"]
        if k == len(rounds) - 1:
            call["tool_duration_ns"], call["tool_name"] = 0, ""
        elif rnd["tools"]:
            call["tool_duration_ns"], call["tool_name"] = _tool_gap(rnd["tools"])
        else:
            nxt = rounds[k + 1]["first_ns"]
            gap = 0 if nxt is None or rnd["last_ns"] is None else max(0, nxt - rnd["last_ns"])
            call["tool_duration_ns"], call["tool_name"] = gap, USER_TOOL
        calls.append(call)
    return calls


def _tool_gap(tools: list[tuple[int | None, int, str]]) -> tuple[int, str]:
    """(gap ns, tool name): union of tool intervals, or sum without emission times (see module
    docstring). The name is the first-emitted tool's: known when the call completes, unlike
    which tool finishes last (that would leak future durations into per-tool policies)."""
    if any(start is None for start, _, _ in tools):
        return sum(lat for _, lat, _ in tools), tools[0][2]
    intervals = sorted((start, start + lat, name) for start, lat, name in tools)
    total, cur_start, cur_end = 0, intervals[0][0], intervals[0][1]
    for start, end, _ in intervals[1:]:
        if start > cur_end:
            total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    total += cur_end - cur_start
    first_name = min(tools, key=lambda t: t[0])[2]      # earliest emission, list order on ties
    return total, first_name
