"""table.md numbers, exactly, from hand-written summaries (no runner involved)."""
from __future__ import annotations

import json
from pathlib import Path

from program_layer.sweep.grid import Axis, expand
from program_layer.sweep.results import write_manifest
from program_layer.sweep.sweep import render_outputs
from program_layer.sweep.table import percent_change

RET = Axis("policies.retention", ("cache-lru", "ttl", "pressure-ttl"))
SCHED = Axis("policies.scheduling", ("fcfs", "plas"))


def fake_sweep(out: Path, axes, jct_by_values: dict, baseline=None, failed=(), table=(None, None)) -> None:
    """A sweep folder whose cells hold only summary.json {'jct_s': {'mean': ...}} (or an error)."""
    cells = expand({"model": "m"}, axes)
    write_manifest(out, name="t", source="spec.yaml", axes=axes, baseline=baseline or {}, table_rows=table[0],
                   table_cols=table[1], kv_cells=(), cells=cells)
    for cell in cells:
        key = tuple(cell.values.values())
        folder = out / "cells" / cell.cell_id
        folder.mkdir(parents=True)
        if key in failed:
            (folder / "error.txt").write_text("Traceback ...\nPolicyError: bad\n")
        elif key in jct_by_values:
            (folder / "summary.json").write_text(json.dumps({"jct_s": {"mean": jct_by_values[key]}}))
            (folder / "done").write_text(cell.cell_id)


TABLE1 = {("cache-lru", "fcfs"): 3726.0, ("ttl", "fcfs"): 3741.0, ("pressure-ttl", "fcfs"): 3741.5,
          ("cache-lru", "plas"): 3581.0, ("ttl", "plas"): 3614.0, ("pressure-ttl", "plas"): 3540.0}


def test_percent_change_rounding_and_sign():
    assert percent_change(3741.0, 3726.0) == "+0.4%"      # +0.4026
    assert percent_change(3581.0, 3726.0) == "-3.9%"      # -3.8915
    assert percent_change(3540.0, 3726.0) == "-5.0%"      # -4.9919
    assert percent_change(3726.1, 3726.0) == "0.0%"       # +0.0027, never "+0.0%"
    assert percent_change(3725.9, 3726.0) == "0.0%"       # never "-0.0%"
    assert percent_change(150.0, 100.0) == "+50.0%"


def test_table1_layout_exact(tmp_path):
    fake_sweep(tmp_path, (RET, SCHED), TABLE1,
               baseline={"policies.retention": "cache-lru", "policies.scheduling": "fcfs"})
    render_outputs(tmp_path, plots=False)
    assert (tmp_path / "table.md").read_text() == (
        "# t: change in mean JCT\n"
        "\n"
        "Table: change in mean JCT relative to retention=cache-lru, scheduling=fcfs (3726.0 s); lower is better.\n"
        "\n"
        "| retention \\ scheduling | fcfs | plas |\n"
        "|---|---:|---:|\n"
        "| cache-lru | 0.0% (baseline) | -3.9% |\n"
        "| ttl | +0.4% | -3.0% |\n"
        "| pressure-ttl | +0.4% | -5.0% |\n")


def test_default_baseline_is_first_values_and_cols_rows_choice(tmp_path):
    fake_sweep(tmp_path, (RET, SCHED), TABLE1, table=("policies.scheduling", "policies.retention"))
    render_outputs(tmp_path, plots=False)
    lines = (tmp_path / "table.md").read_text().splitlines()
    assert lines[2] == ("Table: change in mean JCT relative to retention=cache-lru, scheduling=fcfs (3726.0 s); "
                        "lower is better.")
    assert lines[4:] == ["| scheduling \\ retention | cache-lru | ttl | pressure-ttl |",
                         "|---|---:|---:|---:|",
                         "| fcfs | 0.0% (baseline) | +0.4% | +0.4% |",
                         "| plas | -3.9% | -3.0% | -5.0% |"]


def test_extra_axis_gives_one_table_per_value_with_failures(tmp_path):
    rate = Axis("workload.rate_jps", (0.02, 0.1))
    jcts = {k + (0.02,): v for k, v in TABLE1.items()}
    jcts.update({("cache-lru", "fcfs", 0.1): 200.0, ("ttl", "fcfs", 0.1): 190.0, ("cache-lru", "plas", 0.1): 100.0})
    fake_sweep(tmp_path, (RET, SCHED, rate), jcts, failed={("ttl", "plas", 0.1)},
               baseline={"policies.retention": "cache-lru", "policies.scheduling": "fcfs"})
    render_outputs(tmp_path, plots=False)
    text = (tmp_path / "table.md").read_text()
    assert text.split("## workload.rate_jps = 0.1\n")[1] == (
        "\n"
        "Table: change in mean JCT relative to retention=cache-lru, scheduling=fcfs (200.0 s); lower is better.\n"
        "\n"
        "| retention \\ scheduling | fcfs | plas |\n"
        "|---|---:|---:|\n"
        "| cache-lru | 0.0% (baseline) | -50.0% |\n"
        "| ttl | -5.0% | failed |\n"
        "| pressure-ttl | pending | pending |\n")
    assert "## workload.rate_jps = 0.02\n\nTable: change in mean JCT relative to retention=cache-lru, " \
           "scheduling=fcfs (3726.0 s)" in text


def test_partial_baseline_compares_within_each_column(tmp_path):
    fake_sweep(tmp_path, (RET, SCHED), TABLE1, baseline={"policies.retention": "cache-lru"})
    render_outputs(tmp_path, plots=False)
    lines = (tmp_path / "table.md").read_text().splitlines()
    assert lines[2] == ("Table: change in mean JCT relative to retention=cache-lru (scheduling=fcfs: 3726.0 s; "
                        "scheduling=plas: 3581.0 s); lower is better.")
    assert lines[6:] == ["| cache-lru | 0.0% (baseline) | 0.0% (baseline) |",
                         "| ttl | +0.4% | +0.9% |",
                         "| pressure-ttl | +0.4% | -1.1% |"]


def test_failed_baseline_and_single_axis(tmp_path):
    fake_sweep(tmp_path, (RET,), {("ttl",): 10.0, ("pressure-ttl",): 9.0}, failed={("cache-lru",)})
    render_outputs(tmp_path, plots=False)
    lines = (tmp_path / "table.md").read_text().splitlines()
    assert lines[2] == "Table: change in mean JCT relative to retention=cache-lru (failed); lower is better."
    (tmp_path / "small").mkdir()
    fake_sweep(tmp_path / "small", (RET,), {("cache-lru",): 0.439626767, ("ttl",): 0.5})
    render_outputs(tmp_path / "small", plots=False)
    assert "relative to retention=cache-lru (0.4396 s)" in (tmp_path / "small" / "table.md").read_text()
    assert lines[4:] == ["| retention | change in mean JCT |", "|---|---:|", "| cache-lru | failed |",
                         "| ttl | n/a (baseline not ok) |", "| pressure-ttl | n/a (baseline not ok) |"]
