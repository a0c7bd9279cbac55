"""Running sweeps with the fake runner: outputs, failures, resume, interruption, pool, CLI."""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import program_layer.cli as main_cli
from program_layer.sweep.executors import LocalExecutor, SerialExecutor
from program_layer.sweep.grid import Axis, expand
from program_layer.sweep.spec import SweepSpec
from program_layer.sweep.sweep import run_sweep

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RUNNER = "sweep_fakes:fake_run_config"
BASE = {"model": "m", "hardware": "RTXPRO6000", "workload": {"generator": "swebench", "rate_jps": 0.02}}


def make_spec(tmp_path, axes, baseline=None, **kw) -> SweepSpec:
    return SweepSpec(source=str(tmp_path / "spec.yaml"), name="t", base=BASE, base_dir=tmp_path,
                     axes=tuple(Axis(k, tuple(v)) for k, v in axes.items()), baseline=baseline or {}, **kw)


def read_log(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def fake_log(tmp_path, monkeypatch):
    path = tmp_path / "ran.log"
    monkeypatch.setenv("SWEEP_FAKE_LOG", str(path))
    return path


def test_failing_cell_recorded_and_others_continue(tmp_path, fake_log):
    spec = make_spec(tmp_path, {"policies.retention": ["cache-lru", "boom", "ttl"],
                                "policies.scheduling": ["fcfs", "plas"]})
    out = tmp_path / "out"
    report = run_sweep(spec, out, executor=SerialExecutor(), runner=RUNNER, plots=False)
    cells = spec.cells()
    boom = [c.cell_id for c in cells if c.values["policies.retention"] == "boom"]
    assert sorted(report.failed) == sorted(boom)
    assert report.ran == [c.cell_id for c in cells] and report.skipped == []
    assert len(read_log(fake_log)) == 6
    for cell in cells:
        folder = out / "cells" / cell.cell_id
        if cell.cell_id in boom:
            assert not (folder / "done").exists()
            assert "RuntimeError: retention policy 'boom' exploded" in (folder / "error.txt").read_text()
        else:
            done = json.loads((folder / "done").read_text())
            assert done["cell_id"] == cell.cell_id and done["wall_s"] >= 0
            assert (folder / "cell.json").exists() and not (folder / "error.txt").exists()
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert [r["status"] for r in rows] == ["ok", "ok", "failed", "failed", "ok", "ok"]
    assert rows[2]["error"] == "RuntimeError: retention policy 'boom' exploded"
    assert rows[2]["jct_mean_s"] == ""


def test_results_csv_exact(tmp_path):
    spec = make_spec(tmp_path, {"policies.retention": ["cache-lru", "ttl"], "workload.rate_jps": [0.02, 0.04]})
    out = tmp_path / "out"
    run_sweep(spec, out, executor=SerialExecutor(), runner=RUNNER, plots=False)
    lines = (out / "results.csv").read_text().splitlines()
    assert lines[0] == ("policies.retention,workload.rate_jps,jct_mean_s,jct_p50_s,jct_p90_s,jct_p99_s,"
                        "ttft_mean_s,ttft_p50_s,ttft_p90_s,ttft_p99_s,tpot_mean_s,tpot_p50_s,tpot_p90_s,tpot_p99_s,"
                        "output_tokens_per_s,prompt_tokens_per_s,programs_per_s,makespan_s,preemptions,"
                        "prefix_cache_hit_rate,status,cell_id,error")
    ids = [c.cell_id for c in spec.cells()]
    assert lines[1] == (f"cache-lru,0.02,1000.0,1000.0,1400.0,1490.0,1.0,1.0,1.4,1.49,0.02,0.02,0.03,0.04,"
                        f"300.0,2000.0,0.01,2000.0,7,0.5,ok,{ids[0]},")
    assert lines[4].startswith("ttl,0.04,2004.0,2004.0,")
    assert len(lines) == 5


def test_resume_skips_finished_cells(tmp_path, fake_log):
    spec = make_spec(tmp_path, {"policies.retention": ["cache-lru", "ttl"], "policies.scheduling": ["fcfs", "plas"]})
    out = tmp_path / "out"
    run_sweep(spec, out, executor=SerialExecutor(), runner=RUNNER, plots=False)
    first_csv = (out / "results.csv").read_text()
    assert len(read_log(fake_log)) == 4
    ids = [c.cell_id for c in spec.cells()]
    # Delete one cell's outputs entirely and another's summary: only those two run again.
    import shutil
    shutil.rmtree(out / "cells" / ids[1])
    (out / "cells" / ids[3] / "summary.json").unlink()
    fake_log.unlink()
    report = run_sweep(spec, out, executor=SerialExecutor(), runner=RUNNER, plots=False)
    assert report.ran == [ids[1], ids[3]]
    assert report.skipped == [ids[0], ids[2]]
    assert read_log(fake_log) == ["cache-lru,plas,0.02", "ttl,plas,0.02"]
    assert (out / "results.csv").read_text() == first_csv
    # A third run computes nothing.
    fake_log.unlink()
    report = run_sweep(spec, out, executor=SerialExecutor(), runner=RUNNER, plots=False)
    assert report.ran == [] and report.skipped == ids and not fake_log.exists()


def test_failed_cell_is_retried_on_rerun(tmp_path, fake_log):
    spec = make_spec(tmp_path, {"policies.retention": ["boom", "ttl"]})
    out = tmp_path / "out"
    run_sweep(spec, out, executor=SerialExecutor(), runner=RUNNER, plots=False)
    fake_log.unlink()
    report = run_sweep(spec, out, executor=SerialExecutor(), runner=RUNNER, plots=False)
    assert read_log(fake_log) == ["boom,None,0.02"]
    assert list(report.failed) == [spec.cells()[0].cell_id]


def test_local_process_pool_matches_serial(tmp_path, fake_log):
    spec = make_spec(tmp_path, {"policies.retention": ["cache-lru", "ttl", "boom"], "policies.scheduling": ["fcfs", "plas"]})
    with LocalExecutor(2) as pool:
        report = run_sweep(spec, tmp_path / "pool", executor=pool, runner=RUNNER, plots=False)
    assert len(report.failed) == 2 and len(report.ran) == 6
    run_sweep(spec, tmp_path / "serial", executor=SerialExecutor(), runner=RUNNER, plots=False)
    assert (tmp_path / "pool" / "results.csv").read_bytes() == (tmp_path / "serial" / "results.csv").read_bytes()
    assert sorted(read_log(fake_log)) == sorted(read_log(fake_log))  # 12 invocations logged across processes
    assert len(read_log(fake_log)) == 12


def test_worker_crash_is_recorded_and_rerun_recovers(tmp_path, monkeypatch):
    """A worker that dies (segfault, OOM kill) breaks the pool; the cells it took down are
    retried alone, so only the crashing cell is recorded as failed, the sweep still finishes,
    and a re-run computes just that one."""
    spec = make_spec(tmp_path, {"policies.retention": ["cache-lru", "crash", "ttl"]})
    out = tmp_path / "out"
    with LocalExecutor(1) as pool:
        report = run_sweep(spec, out, executor=pool, runner=RUNNER, plots=False)
    ids = [c.cell_id for c in spec.cells()]
    assert list(report.failed) == [ids[1]]
    assert "worker crashed" in (out / "cells" / ids[1] / "error.txt").read_text()
    monkeypatch.setenv("SWEEP_FAKE_NO_CRASH", "1")
    with LocalExecutor(1) as pool:
        again = run_sweep(spec, out, executor=pool, runner=RUNNER, plots=False)
    assert again.skipped == [ids[0]] + [i for i in ids[2:] if i not in report.failed]
    assert again.ran == [i for i in ids if i in report.failed] and again.ok


def _cli(out, spec_path, extra_env=None, executor="serial", workers="2"):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(REPO), os.environ.get("PYTHONPATH", "")]),
           **(extra_env or {})}
    return subprocess.Popen([sys.executable, "-m", "program_layer.cli", "sweep", str(spec_path), "--out", str(out),
                             "--executor", executor, "--workers", workers, "--runner", RUNNER, "--quiet",
                             "--no-plots"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


SPEC_YAML = """\
base: {model: m, hardware: RTXPRO6000, workload: {generator: swebench, rate_jps: 0.02}}
axes:
  policies.retention: [cache-lru, ttl]
  policies.scheduling: [fcfs, plas]
"""


def test_killed_sweep_rerun_recomputes_only_unfinished(tmp_path):
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(SPEC_YAML)
    out, log = tmp_path / "out", tmp_path / "ran.log"
    # Serial order: lru/fcfs, lru/plas, ttl/fcfs (hangs), ttl/plas. Kill hard during the third.
    proc = _cli(out, spec_path, {"SWEEP_FAKE_LOG": str(log), "SWEEP_FAKE_SLEEP": "ttl:60"})
    deadline = time.monotonic() + 20
    while len(read_log(log)) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert read_log(log) == ["cache-lru,fcfs,0.02", "cache-lru,plas,0.02", "ttl,fcfs,0.02"]
    done = sorted(p.parent.name for p in out.glob("cells/*/done"))
    assert len(done) == 2
    log.unlink()
    proc = _cli(out, spec_path, {"SWEEP_FAKE_LOG": str(log)})
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    assert read_log(log) == ["ttl,fcfs,0.02", "ttl,plas,0.02"]
    assert len(list(out.glob("cells/*/done"))) == 4


def test_cli_exit_codes(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(HERE))
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(SPEC_YAML.replace("[cache-lru, ttl]", "[cache-lru, boom]"))
    args = ["sweep", str(spec_path), "--out", str(tmp_path / "o"), "--executor", "serial", "--runner", RUNNER,
            "--no-plots"]
    assert main_cli.main(args) == 1  # a cell failed, the others ran
    captured = capsys.readouterr()
    assert captured.err.count("failed: RuntimeError: retention policy 'boom' exploded") == 2
    assert "4 cells - 4 ran, 0 finished earlier, 2 failed" in captured.out
    assert "| cache-lru | 0.0% (baseline) | -3.9% |" in captured.out
    assert main_cli.main(args[:4] + ["--executor", "local", "--ray-address", "auto"]) == 2
    assert "--ray-address needs --executor ray" in capsys.readouterr().err
    (tmp_path / "bad.yaml").write_text("base: {model: m}\naxes: {seed: 1}\n")
    assert main_cli.main(["sweep", str(tmp_path / "bad.yaml"), "--out", str(tmp_path / "b")]) == 2
    assert "bad.yaml:2, key 'axes.seed': must be a non-empty list" in capsys.readouterr().err


def group_gone(pgid: int, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupted_pool_sweep_stops_workers_and_resumes(tmp_path, sig):
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(SPEC_YAML)
    out, log = tmp_path / "out", tmp_path / "ran.log"
    # Two workers; both ttl cells hang. Interrupt once both lru cells are done and both ttl cells started.
    proc = _cli(out, spec_path, {"SWEEP_FAKE_LOG": str(log), "SWEEP_FAKE_SLEEP": "ttl:60"}, executor="local")
    deadline = time.monotonic() + 20
    while (len(read_log(log)) < 4 or len(list(out.glob("cells/*/done"))) < 2) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, sig) if sig == signal.SIGINT else proc.send_signal(sig)  # Ctrl-C hits the group
    _, err = proc.communicate(timeout=15)
    assert proc.returncode == 130, err.decode()
    assert "interrupted" in err.decode()
    assert group_gone(proc.pid), "worker processes outlived the interrupted sweep"
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert [r["status"] for r in rows] == ["ok", "ok", "pending", "pending"]
    log.unlink()
    proc = _cli(out, spec_path, {"SWEEP_FAKE_LOG": str(log)}, executor="local")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    assert sorted(read_log(log)) == ["ttl,fcfs,0.02", "ttl,plas,0.02"]
