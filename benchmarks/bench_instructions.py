"""Instruction counts of a cell's build and event loop under callgrind (run by hand; never a test).

    python benchmarks/bench_instructions.py cell CONFIG [CONFIG ...]
    python benchmarks/bench_instructions.py scaling [--cell CELL] [--programs 50,100,200,400]
                                                    [--span-programs 25,50,100,200] [--series constant,growing]

CPU seconds on a shared 2-core machine move by 20-30 % between sittings and by up to 3x between
machines, which is more than most changes to the hot path are worth. Instructions executed are
deterministic: the same tree, config and ``PYTHONHASHSEED`` give the same count to a few parts in a
million. Each measurement runs this script twice as a child under ``valgrind --tool=callgrind``
(the interpreter is ``sys.executable``, not a launcher script such as a pyenv shim, which valgrind
would measure instead): once stopping after the part to subtract, once after the part to
measure; the difference is the instructions of what lies between.

- ``cell``: build (workload, bundle, engine; config loading subtracted) and event loop
  (``sim.run()``) of each config, in millions of instructions.
- ``scaling``: ``bench_scaling.py``'s two series (constant load: the cell's rate, growing program
  count; growing load: the cell's arrival span, growing program count), with build + run in
  instructions instead of CPU seconds, and the cost exponent in calls (issue 15's targets:
  <= 1.05 and <= 1.15). A point of the default cell takes about 2 min per 1,000 calls.

Needs ``valgrind`` on the PATH (Debian/Ubuntu: ``apt install valgrind``); without it the script
says so and exits 2. Slowdown under callgrind is about 50-100x.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_scaling import DEFAULT_CELL, exponent

COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def child(config: str, stop: str, programs: int, rate: float, report: str) -> None:
    """The measured process: load ``config`` (overriding programs and rate when given), then
    stop after ``stop`` (config, build or run); the last writes the run's call count."""
    from program_layer.config import load_config
    from program_layer.run import build_simulation
    cfg = load_config(config)
    if programs:
        cfg["workload"]["programs"] = programs
        cfg["workload"]["rate_jps"] = rate
    if stop == "config":
        return
    sim = build_simulation(cfg)
    if stop == "build":
        return
    sim.run()
    Path(report).write_text(json.dumps({"calls": len(sim.cluster.finished_calls)}))


def instructions(config: str, stop: str, programs: int = 0, rate: float = 0.0) -> tuple[int, dict]:
    """Instructions of one child run under callgrind, and what the child reported."""
    with tempfile.TemporaryDirectory() as d:
        report = os.path.join(d, "report.json")
        env = dict(os.environ, PYTHONHASHSEED="0")
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={d}/callgrind.out",
               sys.executable, os.path.abspath(__file__), "--child", config, stop,
               str(programs), repr(rate), report]
        proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        found = COLLECTED.findall(proc.stderr)
        if proc.returncode != 0 or not found:
            tail = "\n".join(proc.stderr.splitlines()[-15:])
            print(f"bench_instructions: the measured run of {config} ({stop}) failed "
                  f"(exit {proc.returncode}):\n{tail}", file=sys.stderr)
            sys.exit(2)
        got = json.loads(Path(report).read_text()) if os.path.exists(report) else {}
        return int(found[-1]), got


def measure_cell(config: str) -> None:
    c, _ = instructions(config, "config")
    b, _ = instructions(config, "build")
    r, _ = instructions(config, "run")
    print(f"{config}: build {(b - c) / 1e6:,.0f} M, loop {(r - b) / 1e6:,.0f} M instructions", flush=True)


def series(title: str, cell: str, runs: list[tuple[int, float]], target: float) -> None:
    print(title, flush=True)
    points = []
    for programs, rate in runs:
        c, _ = instructions(cell, "config", programs, rate)
        r, got = instructions(cell, "run", programs, rate)
        p = {"calls": got["calls"], "cpu": float(r - c)}     # ``exponent`` reads "cpu": the cost
        points.append(p)
        print(f"  {programs:5d} programs at {rate:.4f} JPS: {p['calls']:7d} calls, build + run "
              f"{(r - c) / 1e6:10,.0f} M instructions, {(r - c) / 1e3 / p['calls']:8,.0f} k per call", flush=True)
    e = exponent(points)
    print(f"  cost exponent in calls: {e:.3f} (issue 15 target <= {target}: {'met' if e <= target else 'NOT met'})",
          flush=True)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        config, stop, programs, rate, report = sys.argv[2:7]
        child(config, stop, int(programs), float(rate), report)
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    c = sub.add_parser("cell", help="build and loop instructions of each config")
    c.add_argument("configs", nargs="+")
    s = sub.add_parser("scaling", help="bench_scaling.py's series in instructions")
    s.add_argument("--cell", type=Path, default=DEFAULT_CELL)
    s.add_argument("--programs", default="50,100,200,400")
    s.add_argument("--span-programs", default="25,50,100,200")
    s.add_argument("--series", default="constant,growing")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        print("bench_instructions: valgrind is not on the PATH (Debian/Ubuntu: apt install valgrind)",
              file=sys.stderr)
        sys.exit(2)
    from llmservingsim.errors import SimError
    from program_layer.config import load_config
    try:    # a bad config gets its one clear error here, not a child's traceback
        configs = {str(c): load_config(c) for c in (args.configs if args.what == "cell" else [args.cell])}
    except SimError as exc:
        print(f"bench_instructions: {exc}", file=sys.stderr)
        sys.exit(2)
    if args.what == "cell":
        for config in configs:
            measure_cell(config)
        return
    wl = configs[str(args.cell)]["workload"]
    rate, span = wl["rate_jps"], wl["programs"] / wl["rate_jps"]
    wanted = set(args.series.split(","))
    if "constant" in wanted:
        series(f"constant load ({rate} JPS):", str(args.cell),
               [(int(n), rate) for n in args.programs.split(",")], 1.05)
    if "growing" in wanted:
        series(f"growing load (arrival span {span:.0f} s):", str(args.cell),
               [(int(n), int(n) / span) for n in args.span_programs.split(",")], 1.15)


if __name__ == "__main__":
    main()
