"""``agentservesim calibrate REAL_DIR --config CONFIG.yaml --out CAL.yaml``: fit the framework
overhead of one deployment to a real vLLM run by simulation in the loop
(``program_layer.calibrate``), print the errors before and after, write the calibration file
a config references with ``calibration: CAL.yaml``."""
from __future__ import annotations

import sys
from pathlib import Path


def add_arguments(p) -> None:
    p.add_argument("real_dir", help="folder of a real vLLM run (requests.jsonl, meta.json)")
    p.add_argument("--config", required=True, help="config that simulates the same workload")
    p.add_argument("--out", required=True, help="calibration file to write (YAML)")
    p.add_argument("--params", default="step_us,prefill_us",
                   help="framework parameters to fit, comma-separated (step_us, prefill_us, prefill_compute)")
    p.add_argument("--max-evals", type=int, default=200, help="simulations at most (default 200)")


def main(args) -> int:
    from llmservingsim.errors import ConfigError
    from program_layer.calibrate import calibrate, write_calibration
    from program_layer.config import load_config
    from program_layer.run import build_simulation
    from program_layer.validate import format_table, load_real

    if args.max_evals < 1:
        raise ConfigError("must be >= 1", key="--max-evals")
    out = Path(args.out)
    if out.is_dir():
        raise ConfigError(f"{out} is a folder; give the calibration file's path", key="--out")
    cfg = load_config(args.config)
    if cfg.get("calibration"):
        raise ConfigError("the config already references a calibration file; calibrate the plain config",
                          file=args.config, key="calibration")
    real = load_real(args.real_dir)
    start = build_simulation(cfg).overhead.framework
    params = tuple(p.strip() for p in args.params.split(",") if p.strip())
    tty = sys.stderr.isatty()

    def progress(n, best):
        if tty:
            print(f"\r  {n} simulations, objective {best:.3f}", end="", file=sys.stderr, flush=True)

    result = calibrate(cfg, real, start, params, config_path=args.config, max_evals=args.max_evals,
                       progress=progress)
    if tty:
        print(file=sys.stderr)
    write_calibration(out, result, cfg, real, args.config)
    fitted = ", ".join(f"{p} = {getattr(result.framework, p):.6g}" for p in result.params)
    print(f"before ({', '.join(f'{p} = {getattr(start, p):.6g}' for p in params)}):")
    print(format_table(result.before))
    print(f"after ({fitted}; {result.evaluations} simulations):")
    print(format_table(result.after))
    print(f"calibration written to {out}; use it with `calibration: {out}` in the config")
    return 0
