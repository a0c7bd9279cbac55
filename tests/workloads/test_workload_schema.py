"""The workload JSONL schema is closed (docs/workloads.md): an unknown field, a repeated
session id, or a count or time that is not a non-negative integer stops the read with one
error naming the file, the line (both lines for a repeat) and the field; and every workload the
project ships or generates still reads."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from llmservingsim.errors import ConfigError, WorkloadError
from program_layer.cli import main as cli_main
from program_layer.workload_io import build_programs
from program_layer.workloads import GENERATORS, generate_programs, import_trace
from program_layer.workloads.io import CALL_FIELDS, PROGRAM_FIELDS, REQUEST_FIELDS, read_jsonl, write_jsonl

REPO = Path(__file__).resolve().parents[2]
TRACES = REPO / "examples" / "traces"


def call(**over) -> dict:
    return {"input_toks": 10, "output_toks": 2, "tool_duration_ns": 0, **over}


def program(sid: str = "p0", **over) -> dict:
    return {"session_id": sid, "arrival_time_ns": 0, "sub_requests": [call()], **over}


def request(**over) -> dict:
    return {"input_toks": 10, "output_toks": 2, "arrival_time_ns": 0, **over}


def read_error(tmp_path: Path, lines: list) -> WorkloadError:
    """The WorkloadError of reading ``lines`` into programs (dicts become JSON, strings are
    written as is): the reader checks records, ``build_programs`` the session ids."""
    path = tmp_path / "w.jsonl"
    path.write_text("".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines))
    with pytest.raises(WorkloadError) as exc:
        build_programs(read_jsonl(path, with_lines=True), str(path))
    assert exc.value.file == str(path)
    return exc.value


# ---- unknown fields ----------------------------------------------------------------------

@pytest.mark.parametrize("record,field", [
    (program(priority=3), "'priority'"),
    (program(sub_requests=[call(), call(reuse_prefix_tok=4)]), "'sub_requests[1].reuse_prefix_tok'"),
    (request(session=1), "'session'"),
    (request(tool_name="bash"), "'tool_name'"),              # a call field on a request record
])
def test_unknown_fields_are_errors_naming_line_and_field(tmp_path, record, field):
    err = read_error(tmp_path, [program("first") if "sub_requests" in record else request(), record])
    assert err.line == 2 and f"unknown field {field}" in str(err)


def test_unknown_field_through_the_cli_is_one_line(tmp_path, capsys):
    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps(program(sub_requests=[call(tool="x")])) + "\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"workload: {{path: {path}}}\n")
    assert cli_main(["run", str(cfg), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"error: {path}:1: unknown field 'sub_requests[0].tool' (known: input_tok_ids, ")


def test_a_program_without_sub_requests_says_so(tmp_path):
    err = read_error(tmp_path, [{"session_id": "p", "arrival_time_ns": 0}])
    assert err.line == 1 and "missing field 'sub_requests'" in str(err)


# ---- repeated ids ------------------------------------------------------------------------

def test_duplicate_session_id_names_both_lines(tmp_path):
    err = read_error(tmp_path, [program("a"), "", program("b"), program("a")])
    assert str(err) == f"{err.file}:4: duplicate session_id 'a' (also on line 1)"


def test_duplicate_request_id_names_both_lines(tmp_path):
    err = read_error(tmp_path, [request(request_id=7), request(request_id=8), request(request_id=7)])
    assert err.line == 3 and "duplicate request_id '7' (also on line 1)" in str(err)


# ---- numbers -----------------------------------------------------------------------------

BAD_NUMBERS = ["NaN", "Infinity", "-Infinity", "-1", "2.5", "1e400", '"12"', "true", "null"]


@pytest.mark.parametrize("value", BAD_NUMBERS)
@pytest.mark.parametrize("field", ["input_toks", "output_toks", "tool_duration_ns", "reuse_prefix_toks"])
def test_bad_call_numbers_name_line_and_field(tmp_path, field, value):
    sub = json.dumps(call(**{field: 0})).replace(f'"{field}": 0', f'"{field}": {value}')
    line = '{"session_id": "p", "arrival_time_ns": 0, "sub_requests": [%s, %s]}' % (json.dumps(call()), sub)
    err = read_error(tmp_path, [program("first"), line])
    assert err.line == 2 and f"'sub_requests[1].{field}'" in str(err)


@pytest.mark.parametrize("value", BAD_NUMBERS)
@pytest.mark.parametrize("field", ["arrival_time_ns", "input_toks", "output_toks", "hash_block_tokens"])
def test_bad_request_numbers_name_line_and_field(tmp_path, field, value, capsys):
    rec = request(hash_ids=[1]) if field == "hash_block_tokens" else request()
    line = json.dumps({**rec, field: 0}).replace(f'"{field}": 0', f'"{field}": {value}')
    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps(request()) + "\n" + line + "\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"workload: {{path: {path}}}\n")
    assert cli_main(["run", str(cfg), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path}:2" in err and f"'{field}'" in err, err


@pytest.mark.parametrize("line,message", [
    ('{"input_toks": %s, "output_toks": 1, "arrival_time_ns": 0}' % ("9" * 5000), "too many digits"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
])
def test_json_the_parser_itself_refuses_is_a_workload_error(tmp_path, line, message):
    err = read_error(tmp_path, [request(), line])
    assert err.line == 2 and message in str(err)


# ---- trace importers: numbers in the raw formats -----------------------------------------

@pytest.mark.parametrize("fmt,text,line,field", [
    ("mooncake", '{"timestamp": Infinity, "input_length": 1, "output_length": 1, "hash_ids": [0]}', 1,
     "timestamp"),
    ("mooncake", '{"timestamp": NaN, "input_length": 1, "output_length": 1, "hash_ids": [0]}', 1, "timestamp"),
    ("mooncake", '{"timestamp": 0, "input_length": NaN, "output_length": 1, "hash_ids": [0]}', 1,
     "input_length"),
    ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9,\u00b2,2", 2, "ContextTokens"),
    ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9,--5,2", 2, "ContextTokens"),
    ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9,1," + "9" * 200_000, 2,
     "not valid CSV"),
])
def test_bad_trace_numbers_name_line_and_field(tmp_path, fmt, text, line, field):
    path = tmp_path / "trace"
    path.write_text(text + "\n", encoding="utf-8")
    with pytest.raises(WorkloadError) as exc:
        import_trace(fmt, str(path))
    assert exc.value.line == line and (field if " " in field else f"'{field}'") in str(exc.value)


def test_a_timestamp_beyond_float_range_is_an_error_when_scaled(tmp_path):
    path = tmp_path / "trace"
    path.write_text('{"timestamp": 1%s, "input_length": 1, "output_length": 1, "hash_ids": [0]}\n' % ("0" * 400))
    with pytest.raises(WorkloadError, match="field 'timestamp' must be a non-negative number of ms") as exc:
        import_trace("mooncake", str(path), time_scale=0.5)
    assert exc.value.line == 1


@pytest.mark.parametrize("value", [float("inf"), float("nan"), 0, -1.0, True])
def test_max_idle_s_must_be_a_finite_positive_number(value):
    with pytest.raises(ConfigError, match="must be a number of seconds > 0") as exc:
        import_trace("tracelab", str(TRACES / "tracelab_example_round_trace.jsonl"), max_idle_s=value)
    assert exc.value.key == "workload.max_idle_s"


# ---- what the project ships and generates still reads -------------------------------------

def test_docs_tables_list_exactly_the_schema_fields():
    """docs/workloads.md's three field tables are the reader's closed schema."""
    text = (REPO / "docs" / "workloads.md").read_text(encoding="utf-8")

    def table(after: str) -> set:
        section = text.split(after, 1)[1].split("\n\n", 2)[1]       # the table after the heading
        return set(re.findall(r"^\| `(\w+)` \|", section, re.M))
    assert table("## Program records") == PROGRAM_FIELDS
    assert table("Each element of `sub_requests`") == CALL_FIELDS
    assert table("## Request records") == REQUEST_FIELDS


def shipped_workloads() -> list:
    """Workload JSONL under examples/ and the test data; not examples/traces (raw traces, read
    by the importers) nor a real run's requests.jsonl (read by `validate`)."""
    paths = list((REPO / "examples").rglob("*.jsonl")) + list((REPO / "tests").rglob("*.jsonl"))
    return sorted(p for p in paths if "traces" not in p.parts and p.name != "requests.jsonl"
                  and "replay" not in p.parts)


@pytest.mark.parametrize("path", shipped_workloads(), ids=lambda p: str(p.relative_to(REPO)))
def test_shipped_workloads_read(path):
    assert read_jsonl(path)


@pytest.mark.parametrize("source", [*GENERATORS, "tracelab", "mooncake", "azure"])
def test_generated_and_imported_workloads_read_back(tmp_path, source):
    if source in GENERATORS:
        records = generate_programs(source, programs=30, rate_jps=0.5, seed=3)
    else:
        trace = {"tracelab": "tracelab_example_round_trace.jsonl", "mooncake": "mooncake_conversation_trace.jsonl",
                 "azure": "azure_code_2023.csv"}[source]
        records = import_trace(source, str(TRACES / trace), limit=200)
    out = tmp_path / "w.jsonl"
    write_jsonl(out, records)
    assert read_jsonl(out) == records
