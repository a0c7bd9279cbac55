"""Plots: every PNG is written, non-empty, from the result files alone."""
from __future__ import annotations

from pathlib import Path

import pytest

import program_layer.cli as main_cli
from program_layer.sweep.executors import SerialExecutor
from program_layer.sweep.grid import Axis
from program_layer.sweep.spec import SweepSpec
from program_layer.sweep.sweep import render_outputs, run_sweep

pytest.importorskip("matplotlib")
PNG = b"\x89PNG\r\n\x1a\n"
BASE = {"model": "m", "instances": 2, "workload": {"generator": "swebench", "rate_jps": 0.02}}


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG and len(data) > 10_000, path  # a real rendered figure, not a stub


def sweep(tmp_path, axes, **kw):
    spec = SweepSpec(source="spec.yaml", name="demo", base=BASE, base_dir=tmp_path,
                     axes=tuple(Axis(k, tuple(v)) for k, v in axes.items()), **kw)
    return run_sweep(spec, tmp_path / "out", executor=SerialExecutor(), runner="sweep_fakes:fake_run_config")


def test_sweep_plots_with_rate_axis_and_failed_cell(tmp_path):
    report = sweep(tmp_path, {"policies.retention": ["cache-lru", "boom"], "policies.scheduling": ["fcfs", "plas"],
                              "workload.rate_jps": [0.02, 0.04]},
                   kv_cells=({"policies.scheduling": "plas"},))
    out = tmp_path / "out"
    names = sorted(p.name for p in report.outputs)
    assert names == ["jct_cdf.png", "jct_vs_rate.png", "kv_utilization.png", "results.csv", "table.md"]
    for name in ("jct_cdf.png", "jct_vs_rate.png", "kv_utilization.png"):
        assert_png(out / "plots" / name)


def test_no_rate_axis_means_no_rate_plot_and_rerender_from_files(tmp_path):
    sweep(tmp_path, {"policies.retention": ["cache-lru", "ttl"]})
    out = tmp_path / "out"
    assert not (out / "plots" / "jct_vs_rate.png").exists()
    for path in (out / "plots").iterdir():
        path.unlink()
    (out / "table.md").unlink()
    paths = render_outputs(out)  # everything again from DIR alone
    assert sorted(p.name for p in paths) == ["jct_cdf.png", "kv_utilization.png", "results.csv", "table.md"]
    assert_png(out / "plots" / "jct_cdf.png")


def test_plot_command_on_run_folder_and_sweep_folder(tmp_path, capsys):
    report = sweep(tmp_path, {"policies.retention": ["cache-lru", "ttl"]})
    run_dir = tmp_path / "out" / "cells" / report.cells[0].cell_id
    assert main_cli.main(["plot", str(run_dir)]) == 0
    printed = capsys.readouterr().out.split()
    assert [Path(p).name for p in printed] == ["jct_cdf.png", "throughput.png", "kv_utilization.png", "queues.png"]
    for path in printed:
        assert_png(Path(path))
    assert main_cli.main(["plot", str(tmp_path / "out"), "--quiet"]) == 0
    assert main_cli.main(["plot", str(tmp_path / "nowhere")]) == 2
    assert "nowhere: no such folder" in capsys.readouterr().err
    assert main_cli.main(["plot", str(tmp_path)]) == 2
    assert "not a run folder: timeseries.csv is missing" in capsys.readouterr().err


def test_smoothing_is_a_centred_moving_mean_only_for_long_series():
    import numpy as np

    from program_layer.sweep.plot_io import smooth

    t = np.arange(10.0)
    same, window = smooth(t, np.arange(10.0))
    assert window == 1 and list(same) == list(range(10))
    t = np.arange(600.0)
    values, window = smooth(t, np.where(t % 2 == 0, 0.0, 2.0), target_points=100)
    assert window == 10  # 600 / 100 = 6 s -> the next nice window
    # the edges average what exists: values[0] = mean(0, 2, 0, 2, 0)
    assert values[100] == 1.0 and values[0] == 0.8 and values.shape == (600,)
