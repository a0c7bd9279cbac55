"""Wall time of the paper's target cells (run by hand; never a timed test).

    python benchmarks/bench_cells.py [--cells validation,rtx70b-swebench50,search] [--no-step-mode]

Prints, per cell (best of 3 runs): wall seconds, simulated seconds, simulated seconds per wall second,
engine steps and steps per wall second; and each cell's ratio to its target (issue 2:
validation cell <= 1 s; issue 5: 50-program RTX 70B TP2 cell <= 10 s, search cell <= 5 s)
and to the published artifact's cost (paper: 2,500-4,800 s per 50-program cell, median 19
minutes per search evaluation; LLMServingSim: 156 s for the validation cell).
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from llmservingsim.paths import examples_dir
from program_layer.config import load_config, validate_config
from program_layer.run import build_simulation, write_outputs

EX = examples_dir()
CELLS = {
    "validation": (EX / "validation" / "RTXPRO6000-Llama-3.1-8B-sharegpt300-sps10.yaml", 1.0, 156.0),
    "rtx70b-swebench50": (EX / "cells" / "rtx-70b-tp2-swebench-0.02jps.yaml", 10.0, 2500.0),
    "search": (EX / "search" / "target_cell.yaml", 5.0, 19 * 60.0),
    # decode-heavy cells where fast-forward has room (no target; shows its effect)
    "b200-8b-swebench": (EX / "cells" / "b200-8b-tp1-swebench-0.02jps.yaml", None, None),
    "rtx70b-bfcl": (EX / "cells" / "rtx-70b-tp2-bfcl-0.02jps.yaml", None, None),
}


REPEATS = 3     # best of: the machine's timing noise is larger than the effects compared


def bench(name: str, path: Path, target_s, baseline_s, step_mode: bool = False) -> float:
    best = None
    for _ in range(REPEATS):
        cfg = load_config(path)
        t0 = time.perf_counter()
        sim = build_simulation(cfg, step_mode=step_mode)
        t1 = time.perf_counter()
        sim.run()
        t2 = time.perf_counter()
        with tempfile.TemporaryDirectory() as d:
            s = write_outputs(sim, Path(d))
        t3 = time.perf_counter()
        if best is None or t3 - t0 < best[0]:
            best = (t3 - t0, t0, t1, t2, t3, sim, s)
    wall, t0, t1, t2, t3, sim, s = best
    if step_mode:
        print(f"{'':<20} step mode: wall {wall:6.2f} s, {s['steps'] / (t2 - t1):.0f} steps/s")
        return wall
    ff = sim.cluster.instances[0].scheduler.num_ff_steps
    print(f"{name:<20} wall {wall:6.2f} s (build {t1 - t0:.2f}, run {t2 - t1:.2f}, write {t3 - t2:.2f})  "
          f"simulated {s['makespan_s']:9.1f} s  -> {s['makespan_s'] / wall:8.0f} sim-s/wall-s  "
          f"{s['steps']} steps ({s['steps'] / (t2 - t1):.0f}/s)  "
          + (f"target {target_s:.0f} s: x{wall / target_s:.2f}  vs artifact {baseline_s:.0f} s: "
             f"{baseline_s / wall:.0f}x faster; " if target_s else "")
          + f"{ff} of {s['steps']} steps fast-forwarded")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--no-step-mode", action="store_true", help="skip the step-mode comparison")
    args = ap.parse_args()
    for name in args.cells.split(","):
        ff = bench(name, *CELLS[name])
        if not args.no_step_mode:
            step = bench(name, *CELLS[name], step_mode=True)
            print(f"{'':<20} fast-forward vs step mode: x{step / ff:.2f}")


if __name__ == "__main__":
    main()
