"""JSONL writing/reading, stats, golden bytes, and the ``agentservesim workload`` CLI."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmservingsim.errors import WorkloadError
from program_layer.cli import main as cli_main
from program_layer.workloads.generators import generate_programs
from program_layer.workloads.io import read_jsonl, workload_stats, write_jsonl

GOLDEN = Path(__file__).parent / "golden"
TRACES = Path(__file__).resolve().parents[2] / "examples" / "traces"


def test_bfcl_golden_bytes(tmp_path):
    out = tmp_path / "b.jsonl"
    write_jsonl(out, generate_programs("bfcl", programs=3, rate_jps=0.1, seed=0))
    assert out.read_bytes() == (GOLDEN / "bfcl_seed0_3programs.jsonl").read_bytes()


def test_write_is_canonical_and_round_trips(tmp_path):
    recs = [{"output_toks": 2, "input_toks": 5, "arrival_time_ns": 0}]
    out = tmp_path / "r.jsonl"
    assert write_jsonl(out, recs) == 1
    assert out.read_text() == '{"arrival_time_ns":0,"input_toks":5,"output_toks":2}\n'
    assert read_jsonl(out) == recs


def test_write_rejects_floats_where_ints_belong(tmp_path):
    with pytest.raises(TypeError, match="input_toks"):
        write_jsonl(tmp_path / "x.jsonl", [{"input_toks": 5.0, "output_toks": 1,
                                            "arrival_time_ns": 0}])
    prog = {"session_id": "p", "arrival_time_ns": 0, "sub_requests": [
        {"input_toks": 5, "output_toks": 1, "tool_duration_ns": 1.5, "tool_name": ""}]}
    with pytest.raises(TypeError, match="tool_duration_ns"):
        write_jsonl(tmp_path / "x.jsonl", [prog])


@pytest.mark.parametrize("line,field", [
    ('{"session_id": "p", "arrival_time_ns": 0, "sub_requests": []}', "sub_requests"),
    ('{"session_id": "p", "arrival_time_ns": 0, "sub_requests": [{"input_toks": 3, '
     '"output_toks": 1}]}', "sub_requests[0].tool_duration_ns"),
    ('{"session_id": "p", "arrival_time_ns": 0, "sub_requests": [{"input_toks": 3, '
     '"output_toks": 1, "tool_duration_ns": 0, "reuse_prefix_toks": 4}]}', "reuse_prefix_toks"),
    ('{"input_toks": 3, "output_toks": 1, "arrival_time_ns": -5}', "arrival_time_ns"),
    ('[1, 2]', "JSON object"),
])
def test_read_names_file_line_field(tmp_path, line, field):
    path = tmp_path / "w.jsonl"
    path.write_text('{"input_toks": 3, "output_toks": 1, "arrival_time_ns": 0}\n\n' + line + "\n")
    with pytest.raises(WorkloadError) as err:
        read_jsonl(path)
    assert err.value.line == 3 and field in str(err.value)


def test_stats_of_a_tiny_workload():
    prog = {"session_id": "p", "arrival_time_ns": 10**9, "sub_requests": [
        {"input_toks": 100, "output_toks": 10, "tool_duration_ns": 61 * 10**9, "tool_name": "a"},
        {"input_toks": 200, "output_toks": 10, "tool_duration_ns": 9 * 10**9, "tool_name": "b"},
        {"input_toks": 300, "output_toks": 10, "tool_duration_ns": 0, "tool_name": ""}]}
    other = {"session_id": "q", "arrival_time_ns": 3 * 10**9, "sub_requests": [
        {"input_toks": 50, "output_toks": 5, "tool_duration_ns": 0, "tool_name": ""}]}
    s = workload_stats([prog, other])
    assert (s["programs"], s["calls"], s["median_calls_per_program"]) == (2, 4, 2.0)
    assert (s["total_context_tokens"], s["max_context_tokens"]) == (650, 300)
    assert (s["tool_calls"], s["long_tool_calls"]) == (2, 1)
    assert (s["long_tool_call_share"], s["long_tool_time_share"]) == (0.5, 0.8714)
    assert s["tool_names"] == ["a", "b"] and s["arrival_span_s"] == 2.0
    assert workload_stats([]) == {"kind": "empty", "records": 0}


def test_cli_generate_stats_import(tmp_path, capsys):
    out = tmp_path / "swe.jsonl"
    assert cli_main(["workload", "generate", "--generator", "swebench", "--programs", "50",
                     "--rate-jps", "0.02", "--seed", "0", "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["records"] == 50 and summary["total_context_tokens"] == 38_394_036
    assert cli_main(["workload", "stats", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["calls"] == 2848
    imp = tmp_path / "az.jsonl"
    assert cli_main(["workload", "import", "--format", "azure",
                     str(TRACES / "azure_conv_2023.csv"), "--out", str(imp),
                     "--limit", "100"]) == 0
    assert json.loads(capsys.readouterr().out)["requests"] == 100
    assert len(imp.read_text().splitlines()) == 100


def test_cli_generate_param_override(tmp_path, capsys):
    out = tmp_path / "b.jsonl"
    assert cli_main(["workload", "generate", "--generator", "bfcl", "--programs", "4",
                     "--rate-jps", "1", "--param", "tool_time_scale=2", "--out", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["programs"] == 4


@pytest.mark.parametrize("argv,needle", [
    (["generate", "--generator", "x", "--programs", "1", "--rate-jps", "1", "--out", "o"],
     "workload.generator"),
    (["generate", "--generator", "bfcl", "--programs", "1", "--rate-jps", "1", "--out", "o",
      "--param", "nope"], "workload.param"),
    (["generate", "--generator", "bfcl", "--programs", "1", "--rate-jps", "1", "--out", "o",
      "--param", "output_median=big"], "workload.output_median"),
    (["import", "--format", "mooncake", "missing.jsonl", "--out", "o"], "missing.jsonl"),
    ([], "choose an action"),
])
def test_cli_errors_are_one_line_exit_2(tmp_path, capsys, monkeypatch, argv, needle):
    monkeypatch.chdir(tmp_path)
    assert cli_main(["workload", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_package_exports_are_lazy():
    import subprocess
    import sys
    code = ("import sys, program_layer.workloads.cli; assert 'numpy' not in sys.modules; "
            "from program_layer.workloads import generate_programs, import_trace, IMPORTERS, "
            "GENERATORS, write_jsonl, read_jsonl, workload_stats; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr
