"""One sweep with the real simulator (program_layer.run.run_config) on a tiny workload."""
from __future__ import annotations

import csv
import json
import textwrap

import pytest

from llmservingsim.errors import ConfigError
from program_layer import run
from program_layer.sweep.executors import LocalExecutor
from program_layer.sweep.spec import load_spec
from program_layer.sweep.sweep import run_sweep


def tiny_sweep(tmp_path, axes: str):
    """base.yaml names a 3-program JSONL workload relative to itself (tests base_dir)."""
    (tmp_path / "cfg").mkdir()
    with (tmp_path / "cfg" / "tiny.jsonl").open("w") as f:
        for i in range(3):
            f.write(json.dumps({"session_id": f"s{i}", "arrival_time_ns": i * 200_000_000, "sub_requests": [
                {"input_toks": 200 + 50 * i, "output_toks": 20, "tool_duration_ns": 100_000_000},
                {"input_toks": 400, "output_toks": 10, "tool_duration_ns": 0}]}) + "\n")
    (tmp_path / "cfg" / "base.yaml").write_text(
        "model: meta-llama/Llama-3.1-8B\nhardware: RTXPRO6000\nworkload: {path: tiny.jsonl}\n")
    (tmp_path / "spec.yaml").write_text("base: cfg/base.yaml\n" + textwrap.dedent(axes))
    return load_spec(tmp_path / "spec.yaml")


def test_real_runner_sweep_on_process_pool(tmp_path):
    spec = tiny_sweep(tmp_path, """\
        axes:
          policies.retention: [cache-lru, ttl, no-such-policy]
          policies.scheduling: [fcfs, plas]
        """)
    with LocalExecutor(2) as pool:
        report = run_sweep(spec, tmp_path / "out", executor=pool)
    ids = [c.cell_id for c in report.cells]
    assert sorted(report.failed) == sorted(ids[4:])  # the unknown policy fails only its own cells
    rows = list(csv.DictReader((tmp_path / "out" / "results.csv").open()))
    assert [r["status"] for r in rows] == ["ok"] * 4 + ["failed"] * 2
    for row in rows[:4]:
        summary = json.loads((tmp_path / "out" / "cells" / row["cell_id"] / "summary.json").read_text())
        assert summary["programs"] == 3
        assert float(row["jct_mean_s"]) == summary["jct_s"]["mean"] > 0
    assert (tmp_path / "out" / "table.md").read_text().count("|") > 10
    assert (tmp_path / "out" / "plots" / "jct_cdf.png").stat().st_size > 10_000
    again = run_sweep(spec, tmp_path / "out", executor=LocalExecutor(1), plots=False)
    assert again.skipped == ids[:4] and again.ran == ids[4:]


def test_cell_configs_are_validated_before_anything_runs(tmp_path):
    spec = tiny_sweep(tmp_path, """\
        axes:
          engine.max_num_seqs: [64, 0]
        """)
    with pytest.raises(ConfigError, match=r"spec.yaml, key 'axes.engine.max_num_seqs': cell max_num_seqs=0: "
                                          r"must be >= 1"):
        run_sweep(spec, tmp_path / "out")
    assert not (tmp_path / "out").exists()
