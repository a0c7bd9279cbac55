"""A run folder holds either the previous run's complete outputs or the new run's, never a mix
(issue 12): outputs are staged in a hidden sibling and renamed into place. Checked with a
failing run, a full disk (RLIMIT_FSIZE), a signal in the middle of writing, a folder that is
not ours, and a sweep cell (whose cell.json survives the swap)."""
from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

from program_layer.cli import main as cli_main
from program_layer.outputs import MARKER

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml"
OUTPUT_FILES = ["calls.csv", "config.yaml", "programs.csv", "summary.json", "timeseries.csv"]


def snapshot(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".partial-" in p.name or ".old-" in p.name)


def run_sub(*args, limit_bytes=None, code=None, cwd=None):
    """The CLI in a child process (optionally under RLIMIT_FSIZE, or with ``code`` run first)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
    prelude = code or ""
    script = f"{prelude}\nimport sys\nfrom program_layer.cli import main\nsys.exit(main({list(args)!r}))\n"
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          preexec_fn=limit if limit_bytes else None, cwd=cwd)


def test_run_writes_the_files_and_a_marker_and_reruns_byte_identically(tmp_path):
    out = tmp_path / "r"
    assert cli_main(["run", str(QUICKSTART), "--out", str(out), "--quiet"]) == 0
    first = snapshot(out)
    assert sorted(first) == sorted(OUTPUT_FILES + [MARKER])
    assert cli_main(["run", str(QUICKSTART), "--out", str(out), "--quiet"]) == 0
    assert snapshot(out) == first
    assert leftovers(tmp_path) == []


def test_a_failing_run_keeps_the_previous_outputs_and_says_so(tmp_path, capsys):
    out = tmp_path / "r"
    assert cli_main(["run", str(QUICKSTART), "--out", str(out), "--quiet"]) == 0
    before = snapshot(out)
    bad = tmp_path / "bad.yaml"
    bad.write_text(QUICKSTART.read_text().replace("model:", "model: no-such-model #", 1))
    capsys.readouterr()
    assert cli_main(["run", str(bad), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"the previous outputs in {out} are unchanged" in err[0], err
    assert snapshot(out) == before
    assert leftovers(tmp_path) == []


def test_a_full_disk_leaves_the_previous_outputs_whole(tmp_path):
    out = tmp_path / "r"
    assert cli_main(["run", str(QUICKSTART), "--out", str(out), "--quiet"]) == 0
    before = snapshot(out)
    assert len(before["calls.csv"]) > 60_000              # so the limit below is hit mid-run
    res = run_sub("run", str(QUICKSTART), "--out", str(out), "--quiet", "--seed", "7", limit_bytes=60_000)
    assert res.returncode == 2, res.stderr
    err = res.stderr.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert "cannot write outputs (File too large)" in err and "previous outputs" in err, err
    assert snapshot(out) == before
    assert leftovers(tmp_path) == []


def test_no_outputs_at_all_when_a_first_run_hits_the_limit(tmp_path):
    out = tmp_path / "fresh"
    res = run_sub("run", str(QUICKSTART), "--out", str(out), "--quiet", limit_bytes=60_000)
    assert res.returncode == 2 and f"no outputs were written to {out}" in res.stderr, res.stderr
    assert not out.exists() and leftovers(tmp_path) == []


def test_a_signal_while_writing_leaves_the_previous_outputs(tmp_path):
    """SIGINT (and SIGTERM) delivered after the first CSV is written: exit 130, nothing mixed."""
    out = tmp_path / "r"
    assert cli_main(["run", str(QUICKSTART), "--out", str(out), "--quiet"]) == 0
    before = snapshot(out)
    for sig in ("SIGINT", "SIGTERM"):
        code = ("import os, signal\nimport program_layer.outputs as o\n_w = o.write_csv\n"
                "def write_csv(*a, **k):\n    _w(*a, **k)\n"
                f"    os.kill(os.getpid(), signal.{sig})\n"
                "o.write_csv = write_csv\n")
        res = run_sub("run", str(QUICKSTART), "--out", str(out), "--quiet", "--seed", "3", code=code)
        assert res.returncode == 130, (sig, res.stderr)
        assert res.stderr.strip() == f"interrupted: the previous outputs in {out} are unchanged", res.stderr
        assert snapshot(out) == before
        assert leftovers(tmp_path) == []


def test_out_is_checked_before_simulating(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert cli_main(["run", str(QUICKSTART), "--out", str(blocker / "sub"), "--quiet"]) == 2
    assert "cannot write output folder" in capsys.readouterr().err
    assert cli_main(["run", str(QUICKSTART), "--out", str(blocker), "--quiet"]) == 2
    assert "exists and is not a folder" in capsys.readouterr().err


def test_a_folder_of_ones_own_is_refused_not_deleted(tmp_path, capsys):
    own = tmp_path / "mine"
    own.mkdir()
    (own / "notes.txt").write_text("keep me")
    (own / "summary.json").write_text("{}")
    assert cli_main(["run", str(QUICKSTART), "--out", str(own), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "not a run's outputs (notes.txt)" in err and err.count("\n") == 1
    assert (own / "notes.txt").read_text() == "keep me"
    res = run_sub("run", str(QUICKSTART), "--out", ".", "--quiet", cwd=own)
    assert res.returncode == 2 and "is the current folder" in res.stderr
    assert sorted(p.name for p in own.iterdir()) == ["notes.txt", "summary.json"]


def test_an_older_run_folder_without_the_marker_is_replaced(tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    for name in OUTPUT_FILES:
        (out / name).write_text("old")
    (out / "plots").mkdir()
    assert cli_main(["run", str(QUICKSTART), "--out", str(out), "--quiet"]) == 0
    assert (out / "summary.json").read_text() != "old" and not (out / "plots").exists()


def test_a_killed_runs_partial_folder_is_removed_by_the_next_run(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    stale = tmp_path / f".r.partial-{dead}"
    stale.mkdir()
    (stale / "calls.csv").write_text("half")
    assert cli_main(["run", str(QUICKSTART), "--out", str(tmp_path / "r"), "--quiet"]) == 0
    assert leftovers(tmp_path) == []


def test_a_trace_inside_the_folder_arrives_with_it(tmp_path):
    out = tmp_path / "r"
    assert cli_main(["run", str(QUICKSTART), "--out", str(out), "--quiet",
                     "--trace-steps", str(out / "steps.csv")]) == 0
    header = (out / "steps.csv").read_text().splitlines()[0]
    assert header.startswith("instance,step,start_s,duration_s")
    outside = tmp_path / "t" / "steps.csv"
    assert cli_main(["run", str(QUICKSTART), "--out", str(out), "--quiet", "--trace-steps", str(outside)]) == 0
    assert outside.read_text().splitlines()[0] == header and not (out / "steps.csv").exists()
    assert [p.name for p in outside.parent.iterdir()] == ["steps.csv"]


def test_a_sweep_cell_keeps_its_cell_json(tmp_path):
    from program_layer.sweep.cell_run import CellTask, run_cell
    from program_layer.config import load_config
    cfg = load_config(QUICKSTART)
    cell = tmp_path / "cells" / "c0"
    outcome = run_cell(CellTask("c0", 0, {"seed": 0}, cfg, str(cell), base_dir=str(QUICKSTART.parent)))
    assert outcome.status == "ok", outcome.error
    assert json.loads((cell / "cell.json").read_text())["cell_id"] == "c0"
    assert (cell / "done").is_file() and (cell / "summary.json").is_file()
