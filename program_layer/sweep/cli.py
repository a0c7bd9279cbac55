"""``agentservesim sweep SPEC.yaml --out DIR``: run a design-space sweep (see sweep.py).

Exit status: 0 when every cell finished, 1 when some cell failed (the others still ran and
are recorded), 2 for a bad spec or option (via the main CLI's SimError handling).
"""
from __future__ import annotations

import argparse
import sys

EXECUTORS = ("local", "ray", "serial")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", help="sweep spec YAML (base config, axes, baseline, plots)")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="output folder; re-running into the same folder skips finished cells")
    parser.add_argument("--executor", choices=EXECUTORS, default=None,
                        help="where cells run: local process pool (default; 'ray' if --ray-address "
                             "is given), a Ray cluster, or serially in this process")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="parallel cells (local: pool size, default: CPU count; ray: CPUs of a "
                             "local Ray instance)")
    parser.add_argument("--ray-address", default=None, metavar="ADDR",
                        help="address of a running Ray cluster (e.g. ray://host:10001 or auto); "
                             "--out must be on a filesystem all nodes share")
    parser.add_argument("--quiet", action="store_true", help="no progress bar and no summary")
    parser.add_argument("--no-plots", action="store_true", help="write results.csv and table.md only")
    parser.add_argument("--step-mode", action="store_true",
                        help="simulate every engine step (no fast-forward) in each cell")
    parser.add_argument("--runner", default=None, help=argparse.SUPPRESS)  # 'module:function', for tests


def main(args: argparse.Namespace) -> int:
    from llmservingsim.errors import ConfigError
    from program_layer.sweep.cell_run import DEFAULT_RUNNER
    from program_layer.sweep.executors import make_executor
    from program_layer.sweep.spec import load_spec
    from program_layer.sweep.sweep import TABLE_MD, run_sweep

    spec = load_spec(args.spec)
    kind = args.executor or ("ray" if args.ray_address else "local")
    if args.ray_address and kind != "ray":
        raise ConfigError("--ray-address needs --executor ray", key="--ray-address")
    if args.workers is not None and args.workers < 1:
        raise ConfigError("must be at least 1", key="--workers")
    runner_kwargs = {"quiet": True, **({"step_mode": True} if args.step_mode else {})}
    # SIGTERM arrives as KeyboardInterrupt (program_layer.cli): workers are stopped and
    # results.csv is written before exiting, instead of orphaning the workers
    with make_executor(kind, workers=args.workers, ray_address=args.ray_address) as executor:
        report = run_sweep(spec, args.out, executor=executor, runner=args.runner or DEFAULT_RUNNER,
                           runner_kwargs=runner_kwargs, quiet=args.quiet, plots=not args.no_plots)
    labels = {c.cell_id: c.label() for c in report.cells}
    for cell_id, error in report.failed.items():
        print(f"cell {cell_id} ({labels[cell_id]}) failed: {error} "
              f"(see {report.out_dir / 'cells' / cell_id / 'error.txt'})", file=sys.stderr)
    if not args.quiet:
        print((report.out_dir / TABLE_MD).read_text(encoding="utf-8"))
        print(f"sweep {spec.name}: {len(report.cells)} cells - {len(report.ran)} ran, "
              f"{len(report.skipped)} finished earlier, {len(report.failed)} failed "
              f"({report.cell_wall_s:.1f} s of cell time) -> {report.out_dir} "
              f"(results.csv, table.md{', plots/' if not args.no_plots else ''})")
    return 0 if report.ok else 1
