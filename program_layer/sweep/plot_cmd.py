"""``agentservesim plot RUN_DIR``: render a run folder's plots into RUN_DIR/plots/.

RUN_DIR is one run (summary.json, calls.csv, programs.csv, timeseries.csv): JCT CDF,
throughput, KV utilisation and queue lengths over time. Given a sweep folder (with
sweep.json) it rebuilds results.csv, table.md and the sweep plots instead.
"""
from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run folder (or a sweep folder)")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="where to write the PNGs of a single run (default: RUN_DIR/plots)")
    parser.add_argument("--quiet", action="store_true", help="do not list the files written")


def main(args: argparse.Namespace) -> int:
    from llmservingsim.errors import ConfigError
    from program_layer.sweep.results import SWEEP_JSON

    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise ConfigError("no such folder", file=str(run_dir))
    if (run_dir / SWEEP_JSON).is_file():
        from program_layer.sweep.sweep import render_outputs

        paths = render_outputs(run_dir)
    else:
        from program_layer.sweep.run_plots import render_run_plots

        paths = render_run_plots(run_dir, args.out)
    if not args.quiet:
        for path in paths:
            print(path)
    return 0
