"""CPU time of a whole ``agentservesim run`` process (run by hand; never a timed test).

    python benchmarks/bench_process.py [--config CONFIG.yaml] [--repeats 7] [--tree DIR ...]

Runs the command line as a child process, as a user types it: ``agentservesim run CONFIG --out
DIR`` through the console-script entry point that the checkout's pyproject.toml declares, with
.pyc files written (the first, warm-up run writes them; it is not counted). Per checkout it reports the
best of ``repeats`` children's user + system CPU seconds (``resource.getrusage(RUSAGE_CHILDREN)``
around each child: on a shared machine wall time measures the neighbours), and the floor
under it: a bare interpreter (``python -c pass``, site and .pth files included) on the same
machine. Issue 15's target: the dev ShareGPT cell's whole process <= 0.6 s (its event loop
<= 0.2 s: ``bench_cells.py --cells validation``).

``--tree`` names checkouts to measure instead of this one (each on its own ``PYTHONPATH``),
run in turn within each repeat, so that an old and a new tree share the machine's state.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEV_CELL = Path("examples/validation/RTXPRO6000-Llama-3.1-8B-sharegpt300-sps10.yaml")
TARGET_S = 0.6


def entry_code(tree: Path) -> str:
    """Python source doing what the tree's ``agentservesim`` console script does."""
    scripts = tomllib.loads((tree / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, func = scripts["agentservesim"].partition(":")
    return f"import sys; from {module} import {func}; sys.exit({func}())"


def child_env(tree: Path) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)      # a user's machine writes .pyc files
    env["PYTHONPATH"] = os.pathsep.join([str(tree), str(tree / "astra-sim")] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def child_cpu(argv: list[str], env: dict, cwd: Path) -> float:
    """User + system CPU seconds of one child running ``argv`` to completion."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", type=Path, default=DEV_CELL, help="relative to each tree (default: the dev cell)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--tree", type=Path, action="append", help="checkout to measure (repeatable; default: this one)")
    args = ap.parse_args()
    trees = [t.resolve() for t in (args.tree or [ROOT])]
    best = {t: float("inf") for t in trees}
    floor = float("inf")
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats + 1):        # repeat 0 writes the .pyc files
            for i, tree in enumerate(trees):
                argv = [sys.executable, "-c", entry_code(tree), "run", str(args.config),
                        "--out", str(Path(tmp) / f"out{i}")]
                cpu = child_cpu(argv, child_env(tree), tree)
                if repeat:
                    best[tree] = min(best[tree], cpu)
            if repeat:
                floor = min(floor, child_cpu([sys.executable, "-c", "pass"], child_env(trees[0]), trees[0]))
    print(f"agentservesim run {args.config} --out DIR: whole-process CPU, best of {args.repeats}")
    for tree in trees:
        print(f"  {tree}: {best[tree]:.3f} s ({best[tree] / TARGET_S:.2f}x the {TARGET_S} s target; "
              f"{best[tree] - floor:.3f} s above the bare interpreter)")
    print(f"  bare interpreter (python -c pass): {floor:.3f} s")


if __name__ == "__main__":
    main()
