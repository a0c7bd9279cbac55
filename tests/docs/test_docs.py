"""docs/ stays true to the code: the generated configuration page, every output column, the
workload example, and no reference to files outside the repository."""
from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from program_layer import config as config_module
from program_layer import config_doc, outputs
from program_layer.config import load_config
from program_layer.run import run_config
from program_layer.workload_io import build_programs
from program_layer.workloads.io import read_jsonl

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
THIS = Path(__file__).resolve()


# ---- (a) docs/configuration.md is the generator's output ------------------------------------

def test_configuration_page_is_generated():
    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert page == config_doc.render(), (
        "docs/configuration.md is stale: run python -m program_layer.config_doc --write")


def test_generator_fails_on_an_undescribed_key(monkeypatch):
    monkeypatch.setitem(config_module.ENGINE_KEYS, "brand_new_knob", ((int,), None))
    with pytest.raises(KeyError, match="engine.brand_new_knob"):
        config_doc.render()


def test_generator_fails_on_a_description_of_a_removed_key(monkeypatch):
    monkeypatch.setitem(config_doc.DESCRIPTIONS, "engine.removed_knob", "gone")
    with pytest.raises(KeyError, match="engine.removed_knob"):
        config_doc.render()


# ---- the example of docs/workloads.md, run once ----------------------------------------------

def _example(name: str) -> str:
    """The fenced block after ``<!-- example: NAME -->`` in docs/workloads.md."""
    text = (DOCS / "workloads.md").read_text(encoding="utf-8")
    m = re.search(rf"<!-- example: {re.escape(name)} -->\s*```\w*\n(.*?)```", text, re.S)
    assert m, f"docs/workloads.md has no example block for {name}"
    return m.group(1)


@pytest.fixture(scope="module")
def example_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("docs_example")
    (d / "workload.jsonl").write_text(_example("workload.jsonl"), encoding="utf-8")
    (d / "config.yaml").write_text(_example("config.yaml"), encoding="utf-8")
    cfg = load_config(d / "config.yaml")
    summary = run_config(cfg, d / "out", trace_steps=d / "out" / "steps.csv")
    return d, summary


def _header(path: Path) -> list[str]:
    with open(path, newline="") as f:
        return next(csv.reader(f))


# ---- (d) the workload example parses and runs -----------------------------------------------

def test_workload_example_parses(tmp_path):
    path = tmp_path / "workload.jsonl"
    path.write_text(_example("workload.jsonl"), encoding="utf-8")
    programs = build_programs(read_jsonl(path, with_lines=True), str(path))
    assert [p.session_id for p in programs] == ["agent-0", "agent-1"]
    assert [len(p.calls) for p in programs] == [3, 2]


def test_workload_example_runs_as_the_page_says(example_run):
    d, summary = example_run
    assert summary["programs"] == 2 and summary["calls"] == 5
    with open(d / "out" / "calls.csv", newline="") as f:
        rows = {(r["session_id"], r["call_index"]): r for r in csv.DictReader(f)}
    assert rows[("agent-0", "1")]["cached_tokens"] == "1344"      # stated in docs/workloads.md


# ---- (b) every output column and summary key is documented ----------------------------------

def _section(title: str) -> str:
    text = (DOCS / "outputs.md").read_text(encoding="utf-8")
    parts = re.split(r"^## ", text, flags=re.M)
    hits = [p for p in parts if p.startswith(title)]
    assert hits, f"docs/outputs.md has no section '## {title}'"
    return hits[0]


def _undocumented(names, section: str) -> list[str]:
    return [n for n in names if f"| `{n}` |" not in section and f"`{n}`," not in section
            and f", `{n}` |" not in section]


def test_call_and_program_columns_are_documented():
    assert _undocumented(outputs.CALL_COLUMNS, _section("calls.csv")) == []
    assert _undocumented(outputs.PROGRAM_COLUMNS, _section("programs.csv")) == []


def test_timeseries_and_step_trace_columns_are_documented(example_run):
    d, _ = example_run
    assert _undocumented(_header(d / "out" / "timeseries.csv"), _section("timeseries.csv")) == []
    assert _undocumented(_header(d / "out" / "steps.csv"), _section("The per-step trace")) == []


def test_summary_keys_are_documented(example_run):
    d, _ = example_run
    keys = json.loads((d / "out" / "summary.json").read_text())
    assert _undocumented(sorted(keys), _section("summary.json")) == []


def test_every_run_file_is_listed(example_run):
    d, _ = example_run
    table = (DOCS / "outputs.md").read_text(encoding="utf-8").split("\n## ")[0]   # the file table
    for f in sorted(p.name for p in (d / "out").iterdir() if p.name != "steps.csv"):
        assert f"`{f}`" in table, f"docs/outputs.md does not list {f}"


# ---- (c) nothing in the repository points at files outside it -------------------------------

# Built from pieces so that this file does not match its own rule.
OUTSIDE = ["../" + "shared", "shared" + "/reference", "vllm-v1-" + "semantics.md",
           "agentservesim-" + "paper.md", "design" + ".md"]


def _repo_files() -> list[str]:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "-C", str(REPO), "ls-files", "--cached", "--others",
                          "--exclude-standard"], capture_output=True, text=True, check=True)
    return [line for line in out.stdout.splitlines() if line]


def test_no_reference_to_files_outside_the_repository():
    offenders = []
    for rel in _repo_files():
        path = REPO / rel
        if path.resolve() == THIS or not path.is_file():
            continue
        text = path.read_bytes().decode("utf-8", errors="ignore")
        for needle in OUTSIDE:
            if needle in text:
                line = text[:text.index(needle)].count("\n") + 1
                offenders.append(f"{rel}:{line}: {needle}")
    assert offenders == [], "references to files outside the repository:\n" + "\n".join(offenders)
