"""Every bad input file ends with one line on stderr naming the file (and the line, where
there is one) and exit status 2: never a traceback, never a hang on a FIFO or /dev/zero, never
unbounded memory (issue 12). Files are read through ``llmservingsim.errors.read_text`` /
``iter_lines``; these tests give each kind of input file the CLI (or its loader) accepts a
non-UTF-8 file, a stream, and an oversized file."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmservingsim.errors import ProfileError, SimError, WorkloadError, iter_lines, read_text
from llmservingsim.overhead_model import load_overhead
from program_layer.cli import main

REPO = Path(__file__).resolve().parents[2]
BAD = b"\xff\xfe"                    # never valid UTF-8
PROGRAM = ('{{"session_id": "s{}", "arrival_time_ns": 0, "sub_requests": '
           '[{{"input_toks": 10, "output_toks": 2, "tool_duration_ns": 0}}]}}\n')
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")


def one_error_line(code: int, err: str, *fragments: str) -> str:
    """The one ``error:`` line of a failed command, checked to contain ``fragments``."""
    assert code == 2, err
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def cli(capsys, *args) -> str:
    """``agentservesim ARGS`` in-process; its one error line."""
    code = main([str(a) for a in args])
    return one_error_line(code, capsys.readouterr().err)


def cli_subprocess(*args) -> str:
    """``python -m program_layer.cli ARGS`` with a timeout (a FIFO read would block forever)."""
    res = subprocess.run([sys.executable, "-m", "program_layer.cli", *map(str, args)], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    return one_error_line(res.returncode, res.stderr)


def with_bad_byte(path: Path, text: str, line: int) -> Path:
    """``text`` with an invalid byte at the start of (1-based) ``line``."""
    lines = text.encode().split(b"\n")
    lines[line - 1] = BAD + lines[line - 1]
    path.write_bytes(b"\n".join(lines))
    return path


def config(tmp_path: Path, body: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    return path


# ---- streams: refused before reading, in a fresh interpreter ------------------------------

@pytest.mark.parametrize("args,fragment", [
    (["run", "/dev/zero"], "/dev/zero: cannot read config: not a regular file (a character device)"),
    (["sweep", "/dev/zero", "--out", "OUT"], "/dev/zero: cannot read sweep spec: not a regular file"),
    (["workload", "stats", "/dev/zero"], "/dev/zero: cannot read workload: not a regular file"),
    (["workload", "import", "--format", "mooncake", "/dev/zero", "--out", "OUT"],
     "/dev/zero: cannot read trace: not a regular file"),
])
def test_dev_zero_is_refused_not_read(tmp_path, args, fragment):
    assert fragment in cli_subprocess(*[str(tmp_path / "o") if a == "OUT" else a for a in args])


def test_dev_zero_as_the_workload_of_a_config(tmp_path):
    cfg = config(tmp_path, "workload: {path: /dev/zero}\n")
    line = cli_subprocess("run", cfg, "--out", tmp_path / "o")
    assert "/dev/zero: cannot read workload: not a regular file" in line


@needs_fifo
@pytest.mark.parametrize("command", [["run"], ["workload", "stats"]])
def test_fifo_is_refused_without_waiting_for_a_writer(tmp_path, command):
    fifo = tmp_path / "input.fifo"
    os.mkfifo(fifo)
    line = cli_subprocess(*command, fifo)
    assert f"{fifo}: cannot read" in line and "not a regular file (a FIFO)" in line


def test_non_utf8_config_names_file_and_line_in_a_subprocess(tmp_path):
    cfg = with_bad_byte(tmp_path / "bad.yaml", "model: meta-llama/Llama-3.1-8B\n# note\n"
                                               "workload: {generator: bfcl}\n", line=2)
    assert (cli_subprocess("run", cfg, "--out", tmp_path / "o")
            == f"error: {cfg}:2: cannot read config: not UTF-8 text (byte 0xff at column 1)")


# ---- non-UTF-8 in each kind of input file (in-process) --------------------------------------

def test_non_utf8_workload(tmp_path, capsys):
    wl = with_bad_byte(tmp_path / "w.jsonl", "".join(PROGRAM.format(i) for i in range(3)), line=3)
    cfg = config(tmp_path, f"workload: {{path: {wl}}}\n")
    assert f"{wl}:3: cannot read workload: not UTF-8 text" in cli(capsys, "run", cfg, "--out", tmp_path / "o")
    assert f"{wl}:3: cannot read workload: not UTF-8" in cli(capsys, "workload", "stats", wl)


def test_non_utf8_byte_in_the_middle_of_a_line_names_its_column(tmp_path, capsys):
    wl = tmp_path / "w.jsonl"
    wl.write_bytes(PROGRAM.format(0).encode() + b'{"session_id": "caf\xe9"}\n')
    assert cli(capsys, "workload", "stats", wl).endswith(     # 0xe9 is the 20th byte of line 2
        f"{wl}:2: cannot read workload: not UTF-8 text (byte 0xe9 at column 20)")


@pytest.mark.parametrize("fmt,text", [
    ("tracelab", '{"session_id": "s"}\n'),
    ("mooncake", '{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [0]}\n'),
    ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"),
])
def test_non_utf8_trace(tmp_path, capsys, fmt, text):
    line = 2 if fmt == "azure" else 1                  # azure: in a row, after the header
    trace = with_bad_byte(tmp_path / "trace", text, line=line)
    assert f"{trace}:{line}: cannot read trace: not UTF-8" in cli(
        capsys, "workload", "import", "--format", fmt, trace, "--out", tmp_path / "w.jsonl")
    cfg = config(tmp_path, f"workload: {{path: {trace}, trace: {fmt}}}\n")
    assert f"{trace}:{line}: cannot read trace: not UTF-8" in cli(capsys, "run", cfg, "--out", tmp_path / "o")


def test_non_utf8_sweep_spec_and_its_base_config(tmp_path, capsys):
    spec = with_bad_byte(tmp_path / "spec.yaml", "base: {model: m}\naxes: {seed: [1]}\n", line=2)
    assert f"{spec}:2: cannot read sweep spec: not UTF-8" in cli(capsys, "sweep", spec, "--out", tmp_path / "o")
    base = with_bad_byte(tmp_path / "base.yaml", "workload: {generator: bfcl}\n", line=1)
    spec = config(tmp_path, "base: base.yaml\naxes: {seed: [1]}\n", name="spec2.yaml")
    line = cli(capsys, "sweep", spec, "--out", tmp_path / "o")
    assert f"{spec}:1, key 'base': {base}:1: cannot read base config: not UTF-8" in line


def test_non_utf8_cell(tmp_path, capsys):
    shipped = REPO / "examples" / "cells" / "rtx-70b-tp2-bfcl-0.02jps.yaml"
    cell = with_bad_byte(tmp_path / shipped.name, shipped.read_text(encoding="utf-8"), line=3)
    assert f"{cell}:3: cannot read config: not UTF-8" in cli(capsys, "run", cell, "--out", tmp_path / "o")


def test_non_utf8_profile_csv(tmp_path, capsys):
    tp1 = tmp_path / "prof" / "RTXPRO6000" / "meta-llama" / "Llama-3.1-8B" / "bf16" / "tp1"
    tp1.mkdir(parents=True)
    dense = with_bad_byte(tp1 / "dense.csv", "layer,tokens,time_us\nact_fn,1,2.5\nact_fn,2,2.8\n", line=3)
    cfg = config(tmp_path, f"profiles: {tmp_path / 'prof'}\nworkload: {{generator: bfcl, programs: 1}}\n")
    assert f"{dense}:3: cannot read profile table: not UTF-8" in cli(capsys, "run", cfg, "--out", tmp_path / "o")


def test_non_utf8_hardware_yaml(tmp_path, capsys):
    shipped = REPO / "hardware" / "RTXPRO6000.yaml"
    dev = with_bad_byte(tmp_path / "dev.yaml", shipped.read_text(encoding="utf-8"), line=5)
    cfg = config(tmp_path, "hardware: dev.yaml\nworkload: {generator: bfcl, programs: 1}\n")
    assert f"{dev}:5: cannot read device file: not UTF-8" in cli(capsys, "run", cfg, "--out", tmp_path / "o")


def test_non_utf8_model_config_json(tmp_path, capsys):
    shipped = REPO / "profiles" / "models" / "meta-llama" / "Llama-3.1-8B.json"
    model = with_bad_byte(tmp_path / "config.json", shipped.read_text(encoding="utf-8"), line=2)
    cfg = config(tmp_path, f"model: {model}\nworkload: {{generator: bfcl, programs: 1}}\n")
    assert f"{model}:2: cannot read model config: not UTF-8" in cli(capsys, "run", cfg, "--out", tmp_path / "o")


def test_non_utf8_overhead_yaml(tmp_path):
    shipped = REPO / "hardware" / "overhead" / "RTXPRO6000.yaml"
    path = with_bad_byte(tmp_path / "RTXPRO6000.yaml", shipped.read_text(encoding="utf-8"), line=4)
    with pytest.raises(ProfileError) as exc:
        load_overhead("RTXPRO6000", path)
    assert str(exc.value).startswith(f"{path}:4: cannot read overhead model: not UTF-8")


# ---- size caps -------------------------------------------------------------------------------

def sparse(path: Path, size: int) -> Path:
    """A regular file of ``size`` zero bytes and no newline (sparse: instant to make)."""
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def test_oversized_config_is_refused_whole(tmp_path, capsys):
    cfg = sparse(tmp_path / "huge.yaml", 64 * 2**20 + 1)
    assert cli(capsys, "run", cfg).endswith(f"{cfg}: cannot read config: larger than 64 MiB")


def test_a_workload_without_newlines_is_refused_at_the_line_cap(tmp_path, capsys):
    wl = sparse(tmp_path / "w.jsonl", 64 * 2**20 + 1)
    assert cli(capsys, "workload", "stats", wl).endswith(
        f"{wl}:1: cannot read workload: line longer than 64 MiB")


def test_line_cap_names_the_long_line_and_keeps_shorter_ones(tmp_path):
    path = tmp_path / "w.jsonl"
    path.write_bytes(b"a" * 99 + b"\n" + b"b" * 100 + b"\n" + b"c" * 101)
    lines = iter_lines(path, what="workload", limit=100)
    assert next(lines) == (1, "a" * 99 + "\n")
    assert next(lines) == (2, "b" * 100 + "\n")     # 100 bytes + its newline: within the cap
    with pytest.raises(WorkloadError, match=rf"{path}:3: cannot read workload: line longer than 100 bytes"):
        next(lines)
    with pytest.raises(SimError, match="larger than 200 bytes"):
        read_text(path, limit=200)
    assert read_text(path, limit=302).count("\n") == 2


# ---- YAML that parses into something unusable --------------------------------------------

LAUGHS = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
    f"{k}: &{k} [{', '.join([f'*{p}'] * 10)}]\n" for p, k in zip("abcdefg", "bcdefgh"))


@pytest.mark.parametrize("body,message", [
    (LAUGHS, "invalid YAML: aliases expand it to 123456789 values (at most 1000000)"),  # 1+11+...+111111111
    ("workload: &w {generator: bfcl, params: {x: *w}}\n",
     "invalid YAML: an alias refers to a mapping or list that contains it"),
    ("seed: 2024-02-30\nworkload: {generator: bfcl}\n", "invalid YAML: day is out of range for month"),
    ("workload: " + "[" * 20_000 + "]" * 20_000 + "\n", "invalid YAML: nested too deeply"),
])
def test_yaml_that_cannot_be_used_is_one_line(tmp_path, capsys, body, message):
    cfg = config(tmp_path, body)
    assert cli(capsys, "run", cfg, "--out", tmp_path / "o") == f"error: {cfg}: {message}"
