"""The Ray executor on a local Ray instance (skipped only when Ray is not installed)."""
from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

from program_layer.sweep.executors import RAY_INSTALL_HINT, RayExecutor, SerialExecutor
from program_layer.sweep.grid import Axis
from program_layer.sweep.spec import SweepSpec
from program_layer.sweep.sweep import run_sweep

BASE = {"model": "m", "workload": {"generator": "swebench", "rate_jps": 0.02}}


def test_missing_ray_gives_install_hint(monkeypatch):
    from llmservingsim.errors import ConfigError

    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` raise ImportError
    with pytest.raises(ConfigError) as info:
        RayExecutor()
    assert str(info.value) == RAY_INSTALL_HINT
    assert "pip install 'agentservesim[ray]'" in RAY_INSTALL_HINT


def test_ray_sweep_matches_serial(tmp_path):
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'agentservesim[ray]')")
    spec = SweepSpec(source="spec.yaml", name="ray", base=BASE, base_dir=tmp_path,
                     axes=(Axis("policies.retention", ("cache-lru", "boom", "ttl")),
                           Axis("policies.scheduling", ("fcfs", "plas"))))
    import sweep_fakes

    # Ray workers do not see tests/ on sys.path: ship the fake runner's code with the task.
    ray.cloudpickle.register_pickle_by_value(sweep_fakes)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        executor = RayExecutor()  # uses the running instance and leaves it up
        report = run_sweep(spec, tmp_path / "ray", executor=executor, runner=sweep_fakes.fake_run_config,
                           plots=False)
        executor.close()
        assert ray.is_initialized()
        # resume through Ray too: only the two failed cells run again
        again = run_sweep(spec, tmp_path / "ray", executor=executor, runner=sweep_fakes.fake_run_config,
                          plots=False)
    finally:
        ray.shutdown()
        ray.cloudpickle.unregister_pickle_by_value(sweep_fakes)
    assert len(report.ran) == 6 and len(report.failed) == 2
    assert again.ran == sorted(report.failed, key=report.ran.index) and len(again.skipped) == 4
    rows = list(csv.DictReader((tmp_path / "ray" / "results.csv").open()))
    assert [r["status"] for r in rows] == ["ok", "ok", "failed", "failed", "ok", "ok"]
    run_sweep(spec, tmp_path / "serial", executor=SerialExecutor(), runner="sweep_fakes:fake_run_config", plots=False)
    assert (tmp_path / "ray" / "results.csv").read_bytes() == (tmp_path / "serial" / "results.csv").read_bytes()


def test_unreachable_ray_address_fails_fast(capsys):
    import program_layer.cli as main_cli

    pytest.importorskip("ray", reason="Ray is not installed (pip install 'agentservesim[ray]')")
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spec = Path(__file__).resolve().parents[2] / "examples" / "sweeps" / "table1.yaml"
    args = ["sweep", str(spec), "--out", "/nonexistent", "--ray-address", f"127.0.0.1:{port}"]
    assert main_cli.main(args) == 2
    assert f"key '--ray-address': cannot reach a Ray cluster at 127.0.0.1:{port}" in capsys.readouterr().err
