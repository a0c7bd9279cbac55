"""``agentservesim validate REAL_DIR --config CONFIG.yaml [--out DIR] [--max-mean-err P]``:
simulate a real vLLM run's workload and report sim against real.

``--out`` receives the simulation's run files plus ``validation.json`` (the table and the
settings), ``validation.md`` (the table) and plots (``validation_cdf.png``: TTFT / TPOT /
latency CDFs; ``validation_timeseries.png``: generation throughput, running and waiting
requests and KV use over time). Exit status 0 when every |error| is within the tolerances
given (``--max-mean-err`` for means, ``--max-pct-err`` for p50/p90/p99), 1 when not (the
failing stats are listed), 2 for bad input.
"""
from __future__ import annotations

import sys
from pathlib import Path


def add_arguments(p) -> None:
    p.add_argument("real_dir", help="folder of a real vLLM run (requests.jsonl, meta.json)")
    p.add_argument("--config", required=True, help="config that simulates the same workload")
    p.add_argument("--out", default=None, help="report folder (default: runs/validate-<run name>)")
    p.add_argument("--max-mean-err", type=float, default=None, metavar="PCT",
                   help="fail (exit 1) if any mean error exceeds PCT percent")
    p.add_argument("--max-pct-err", type=float, default=None, metavar="PCT",
                   help="fail (exit 1) if any p50/p90/p99 error exceeds PCT percent")
    p.add_argument("--no-plots", action="store_true", help="write the table only")


def main(args) -> int:
    from llmservingsim.errors import ConfigError
    from program_layer.config import load_config
    from program_layer.outputs import staged_folder, write_json
    from program_layer.run import simulate
    from program_layer.validate import compare_calls, format_table, load_real, markdown_table, violations

    for flag in ("max_mean_err", "max_pct_err"):
        v = getattr(args, flag)
        if v is not None and not v >= 0:
            raise ConfigError("must be a percentage >= 0", key="--" + flag.replace("_", "-"))
    cfg = load_config(args.config)
    real = load_real(args.real_dir)
    out = Path(args.out) if args.out else Path("runs") / ("validate-" + Path(args.real_dir).name)
    with staged_folder(out) as stage:        # run outputs and report replace `out` together
        _, calls = simulate(cfg, stage)
        table, pairs = compare_calls(real, calls, args.config)
        bad = violations(table, args.max_mean_err, args.max_pct_err)
        write_json(stage / "validation.json", {"real_run": str(args.real_dir), "config": str(args.config),
                                               "requests": len(pairs), "table": table,
                                               "tolerances": {"max_mean_err": args.max_mean_err,
                                                              "max_pct_err": args.max_pct_err},
                                               "violations": bad})
        (stage / "validation.md").write_text(f"Simulated vs real: {args.real_dir} ({len(pairs)} requests), "
                                             f"config {args.config}\n\n{markdown_table(table)}\n")
        print(format_table(table))
        if not args.no_plots:
            try:
                from program_layer.validate_plots import render
                render(real, pairs, stage)
            except ConfigError as exc:       # matplotlib is the [plot] extra: the table still stands
                print(f"plots skipped: {exc}", file=sys.stderr)
    print(f"report in {out}/ (validation.json, validation.md" + ("" if args.no_plots else ", plots") + ")")
    if bad:
        print("outside the tolerance: " + "; ".join(bad), file=sys.stderr)
        return 1
    return 0
