"""A cell that kills its worker process fails alone on the local executor (the pool breaks
for every cell it holds; those are retried in isolation); a driver that is killed leaves no
worker behind."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from program_layer.sweep.executors import ExecutorFailure, LocalExecutor


def crash_on_one(x: int) -> int:
    if x == 1:
        time.sleep(0.2)
        os._exit(3)
    time.sleep(0.5)
    return x * 10


def test_one_crashing_cell_fails_alone():
    ex = LocalExecutor(2)
    try:
        results = dict(ex.run(crash_on_one, [0, 1, 2, 3]))
    finally:
        ex.close()
    assert isinstance(results[1], ExecutorFailure) and "crashed" in results[1].message
    assert {k: v for k, v in results.items() if k != 1} == {0: 0, 2: 20, 3: 30}


def sleep_and_report(path: str) -> None:
    Path(path).write_text(str(os.getpid()))
    time.sleep(60)


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's new parent may reap it late)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
def test_workers_exit_when_the_driver_is_killed(tmp_path):
    """SIGKILL of the sweep driver: no pool worker is left blocking on the task queue."""
    pids = [tmp_path / f"w{i}" for i in range(2)]
    driver = subprocess.Popen([sys.executable, "-c", (
        "import sys; sys.path[:0] = %r\n"
        "from test_sweep_executors_crash import sleep_and_report\n"
        "from program_layer.sweep.executors import LocalExecutor\n"
        "list(LocalExecutor(2).run(sleep_and_report, %r))\n") % (sys.path, [str(p) for p in pids])])
    try:
        deadline = time.monotonic() + 60
        while not all(p.exists() and p.read_text() for p in pids):
            assert time.monotonic() < deadline and driver.poll() is None, "workers never started"
            time.sleep(0.05)
        workers = [int(p.read_text()) for p in pids]
        assert all(_running(w) for w in workers)
        driver.kill()
        driver.wait()
        deadline = time.monotonic() + 10
        while any(_running(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_running(w) for w in workers), "orphaned workers still running"
    finally:
        driver.kill()
