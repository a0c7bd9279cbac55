"""Importers on the shipped public traces (exact counts) and their error messages."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmservingsim.errors import ConfigError, WorkloadError
from program_layer.workloads._fields import parse_timestamp_ns
from program_layer.workloads.importers import IMPORTERS, import_trace
from program_layer.workloads.io import dumps_record, workload_stats

REPO = Path(__file__).resolve().parents[2]
TRACES = REPO / "examples" / "traces"
GOLDEN = Path(__file__).parent / "golden"
TRACELAB = str(TRACES / "tracelab_example_round_trace.jsonl")
MOONCAKE = str(TRACES / "mooncake_conversation_trace.jsonl")


def test_registry():
    assert set(IMPORTERS) == {"tracelab", "mooncake", "azure"}
    assert IMPORTERS["tracelab"].kind == "programs"


def test_tracelab_example_matches_golden():
    programs = import_trace("tracelab", TRACELAB, max_idle_s=None)       # the raw mapping
    text = "".join(dumps_record(p) + "\n" for p in programs)
    assert text == (GOLDEN / "tracelab_example.jsonl").read_text()


def test_tracelab_example_mapping():
    programs = import_trace("tracelab", TRACELAB, max_idle_s=None)       # the raw mapping
    assert [p["session_id"][:6] for p in programs] == ["codex:", "claude"]  # by arrival
    assert [len(p["sub_requests"]) for p in programs] == [9, 10]
    codex, claude = programs
    assert codex["arrival_time_ns"] == 0
    # 2026-06-01T05:40:20.151Z - 2026-03-21T10:05:59.328Z
    assert claude["arrival_time_ns"] == 6_204_860_823_000_000
    c0 = claude["sub_requests"][0]
    assert (c0["input_toks"], c0["output_toks"]) == (32272, 931)
    assert "reuse_prefix_toks" not in c0  # round 0 has no predecessor
    # Bash [30.836, 31.696] and WebSearch [31.647, 50.938] overlap: union = 20.102 s, named
    # after the first-emitted tool (known at completion; which finishes last is not)
    assert c0["tool_duration_ns"] == 20_102_000_000 and c0["tool_name"] == "Bash"
    # round 1: prefix 29,380 < default min(32,272 + 931, 35,740) -> written
    assert claude["sub_requests"][1]["reuse_prefix_toks"] == 29380
    # round 4 has no tools: the user's turn until round 5's user_message (19.913 s)
    assert claude["sub_requests"][4]["tool_name"] == "user"
    assert claude["sub_requests"][4]["tool_duration_ns"] == 19_913_000_000
    # codex round 0: three parallel exec_commands, union [05.480, 06.704] = 1.224 s
    assert codex["sub_requests"][0]["tool_duration_ns"] == 1_224_000_000
    assert codex["sub_requests"][3]["reuse_prefix_toks"] == 3456  # context compaction
    for p in programs:
        assert p["sub_requests"][-1]["tool_duration_ns"] == 0
        assert p["sub_requests"][-1]["tool_name"] == ""


def test_tracelab_limit_and_time_scale():
    programs = import_trace("tracelab", TRACELAB, limit=1)
    assert len(programs) == 1 and programs[0]["session_id"].startswith("codex:")
    scaled = import_trace("tracelab", TRACELAB, time_scale=0.5, max_idle_s=None)
    assert scaled[1]["arrival_time_ns"] == 3_102_430_411_500_000
    assert scaled[1]["sub_requests"] == import_trace("tracelab", TRACELAB)[1]["sub_requests"]


def test_mooncake_example():
    reqs = import_trace("mooncake", MOONCAKE)
    s = workload_stats(reqs)
    assert (s["requests"], s["total_input_tokens"], s["total_output_tokens"]) == \
        (12031, 144_793_823, 4_122_048)
    assert s["hash_id_requests"] == 12031 and s["arrival_span_s"] == 3536.999
    first = reqs[0]
    assert first == {"input_toks": 6758, "output_toks": 500, "arrival_time_ns": 0,
                     "hash_ids": list(range(14)), "hash_block_tokens": 512}
    assert reqs[-1]["arrival_time_ns"] == 3_536_999_000_000
    assert len(import_trace("mooncake", MOONCAKE, limit=10)) == 10


@pytest.mark.parametrize("name,rows,inputs,outputs,span_s", [
    ("azure_code_2023.csv", 8819, 18_059_974, 245_896, 3435.948),
    ("azure_conv_2023.csv", 19366, 22_361_870, 4_088_665, 3501.722),
])
def test_azure_examples(name, rows, inputs, outputs, span_s):
    reqs = import_trace("azure", str(TRACES / name))
    s = workload_stats(reqs)
    assert (s["requests"], s["total_input_tokens"], s["total_output_tokens"]) == \
        (rows, inputs, outputs)
    assert s["arrival_span_s"] == span_s
    assert reqs[0]["arrival_time_ns"] == 0


def test_azure_exact_timestamps_and_scale():
    reqs = import_trace("azure", str(TRACES / "azure_code_2023.csv"), limit=3, time_scale=0.5)
    # 18:17:03.9799600, 18:17:04.0319600, 18:17:04.0781490 (7 fractional digits, exact)
    assert [r["arrival_time_ns"] for r in reqs] == [0, 26_000_000, 49_094_500]
    assert reqs[1] == {"input_toks": 3180, "output_toks": 8, "arrival_time_ns": 26_000_000}


def test_parse_timestamp_ns():
    assert parse_timestamp_ns("1970-01-01T00:00:01.5Z") == 1_500_000_000
    assert parse_timestamp_ns("1970-01-01 00:00:00.0000001") == 100
    assert parse_timestamp_ns("1970-01-01T01:00:00+01:00") == 0
    with pytest.raises(ValueError):
        parse_timestamp_ns("yesterday")


def _write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def _tracelab_row(**over):
    row = {"session_id": "s", "round_index": 0, "input_tokens_total": 100, "prefix_tokens": 0,
           "output_tokens": 10, "tools": [], "timing_events": [
               {"event_type": "user_message", "timestamp": "2026-01-01T00:00:00.000Z"}]}
    row.update(over)
    return json.dumps(row)


@pytest.mark.parametrize("fmt,lines,line,field", [
    ("tracelab", [_tracelab_row(), "{not json"], 2, "invalid JSON"),
    ("tracelab", [_tracelab_row(), _tracelab_row(round_index=1, input_tokens_total=None)], 2,
     "input_tokens_total"),
    ("tracelab", [_tracelab_row(output_tokens=-1)], 1, "output_tokens"),
    ("tracelab", [_tracelab_row(), _tracelab_row(round_index=1, tools=[{"tool_name": "x"}])],
     2, "tool_wall_latency_ms"),
    ("tracelab", [_tracelab_row(timing_events=[{"timestamp": "soon"}])], 1, "timestamp"),
    ("tracelab", [_tracelab_row(), _tracelab_row()], 2, "round_index"),
    ("mooncake", ['{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}',
                  '{"timestamp": 5, "input_length": 600, "output_length": 1, "hash_ids": [1]}'],
     2, "hash_ids"),
    ("mooncake", ['{"timestamp": 0, "input_length": 10, "hash_ids": [0]}'], 1, "output_length"),
    ("mooncake", ['{"timestamp": "x", "input_length": 1, "output_length": 1, "hash_ids": [0]}'],
     1, "timestamp"),
    ("azure", ["TIMESTAMP,ContextTokens,GeneratedTokens", "2023-11-16 18:17:03.9,10,2",
               "2023-11-16 18:17:04.0,ten,2"], 3, "ContextTokens"),
    ("azure", ["TIMESTAMP,ContextTokens,GeneratedTokens", "noon,10,2"], 2, "TIMESTAMP"),
    ("azure", ["TIMESTAMP,ContextTokens", "2023-11-16 18:17:03.9,10"], 1, "GeneratedTokens"),
    ("azure", ["TIMESTAMP,ContextTokens,GeneratedTokens", "2023-11-16 18:17:03.9,10"], 2,
     "columns"),
])
def test_malformed_lines_name_file_line_and_field(tmp_path, fmt, lines, line, field):
    path = _write(tmp_path, "trace.txt", lines)
    with pytest.raises(WorkloadError) as err:
        import_trace(fmt, path)
    assert err.value.file == path and err.value.line == line
    assert f"{path}:{line}" in str(err.value) and field in str(err.value)


def test_bad_format_limit_scale_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="workload.format"):
        import_trace("csv", MOONCAKE)
    with pytest.raises(ConfigError, match="workload.limit"):
        import_trace("mooncake", MOONCAKE, limit=0)
    with pytest.raises(ConfigError, match="workload.time_scale"):
        import_trace("mooncake", MOONCAKE, time_scale=0)
    missing = str(tmp_path / "absent.jsonl")
    with pytest.raises(WorkloadError) as err:
        import_trace("mooncake", missing)
    assert err.value.file == missing


def test_zero_output_becomes_one_token(tmp_path):
    """The engine generates at least one token per call (vLLM max_tokens >= 1)."""
    az = _write(tmp_path, "a.csv", ["TIMESTAMP,ContextTokens,GeneratedTokens",
                                    "2023-11-16 18:17:03.9,10,0"])
    assert import_trace("azure", az)[0]["output_toks"] == 1
    mc = _write(tmp_path, "m.jsonl",
                ['{"timestamp": 0, "input_length": 10, "output_length": 0, "hash_ids": [0]}'])
    assert import_trace("mooncake", mc)[0]["output_toks"] == 1
    tl = _write(tmp_path, "t.jsonl", [_tracelab_row(output_tokens=0)])
    assert import_trace("tracelab", tl)[0]["sub_requests"][0]["output_toks"] == 1


def test_idle_stretches_are_shortened_and_in_program_gaps_kept():
    from program_layer.workloads.importers import compress_idle
    day = 86_400 * 10**9
    recs = [{"arrival_time_ns": 0, "sub_requests": [{"tool_duration_ns": 5 * 10**9}, {"tool_duration_ns": 0}]},
            {"arrival_time_ns": 2 * 10**9},                        # inside the first program's span
            {"arrival_time_ns": 72 * day, "sub_requests": [{"tool_duration_ns": 10**9}]},
            {"arrival_time_ns": 72 * day + 3 * 10**9}]
    c = compress_idle(recs, 600 * 10**9)
    assert [r["arrival_time_ns"] for r in recs] == [0, 2 * 10**9, 605 * 10**9, 608 * 10**9]
    assert (c.gaps, c.removed_ns, c.longest_ns) == (1, 72 * day - 605 * 10**9, 72 * day - 5 * 10**9)


def test_tracelab_import_notes_the_shortened_gap(tmp_path):
    import subprocess
    import sys
    from pathlib import Path
    trace = Path(__file__).resolve().parents[2] / "examples" / "traces"
    src = next(trace.glob("tracelab*.jsonl"))
    out = tmp_path / "w.jsonl"
    r = subprocess.run([sys.executable, "-m", "program_layer.cli", "workload", "import", "--format", "tracelab",
                        str(src), "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "shortened 1 idle stretch" in r.stderr
    import json
    arrivals = [json.loads(line)["arrival_time_ns"] for line in out.read_text().splitlines()]
    assert max(arrivals) < 3600 * 10**9                         # not 72 days
    keep = subprocess.run([sys.executable, "-m", "program_layer.cli", "workload", "import", "--format", "tracelab",
                           str(src), "--out", str(out), "--keep-idle-gaps"], capture_output=True, text=True)
    assert keep.returncode == 0 and "shortened" not in keep.stderr
