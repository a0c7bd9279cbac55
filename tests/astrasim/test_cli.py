"""The command line: ASTRA-Sim's flags, its per-rank report line (golden file), clean errors."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from astrasim import Node, NodeType, write_workload
from astrasim.cli import main

GOLDEN = Path(__file__).parent / "golden"
N = NodeType


def make_workload(prefix) -> None:
    ar = lambda i, **kw: Node.make(i, N.COMM_COLL_NODE, "ar", comm_type=0, comm_size=16 << 20,  # noqa: E731
                                   is_cpu_op=False, **kw)
    comp = lambda i, us, **kw: Node.make(i, N.COMP_NODE, "c", duration_micros=us, is_cpu_op=False, **kw)  # noqa: E731
    write_workload(prefix, [
        [comp(0, 100), ar(1, data_deps=[0]), comp(2, 20, data_deps=[1])],
        [ar(0), comp(1, 300)],
    ])


def args(tmp_path, **over):
    a = {"workload-configuration": str(tmp_path / "wl"),
         "system-configuration": str(GOLDEN / "system.json"),
         "network-configuration": str(GOLDEN / "network.yml"),
         "remote-memory-configuration": str(GOLDEN / "remote_memory.json")}
    a.update(over)
    return [f"--{k}={v}" for k, v in a.items()]


def test_cli_matches_golden(tmp_path, capsys):
    make_workload(tmp_path / "wl")
    log = tmp_path / "logs"
    assert main(args(tmp_path, **{"logging-folder": str(log)})) == 0
    golden = (GOLDEN / "cli_2npu.out").read_text()
    assert capsys.readouterr().out == golden
    assert (log / "log.log").read_text() == golden


def test_python_dash_m_entry_point(tmp_path):
    make_workload(tmp_path / "wl")
    out = subprocess.run([sys.executable, "-m", "astrasim", *args(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout == (GOLDEN / "cli_2npu.out").read_text()


def test_cli_error_is_one_line(tmp_path, capsys):
    make_workload(tmp_path / "wl")
    bad = tmp_path / "sys.json"
    bad.write_text('{"preferred-dataset-splits": 1}')
    assert main(args(tmp_path, **{"system-configuration": str(bad)})) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err and "all-reduce-implementation" in err


def test_cli_missing_workload(tmp_path, capsys):
    assert main(args(tmp_path)) == 2
    assert "wl.0.et" in capsys.readouterr().err
