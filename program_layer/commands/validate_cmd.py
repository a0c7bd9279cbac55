"""``agentservesim validate REAL_DIR --config CONFIG.yaml``: sim-vs-real table (formats.md §5)."""
from __future__ import annotations

import csv
from pathlib import Path


def add_arguments(p) -> None:
    p.add_argument("real_dir", help="folder of a real vLLM run (requests.jsonl, meta.json)")
    p.add_argument("--config", required=True, help="config that simulates the same workload")
    p.add_argument("--out", default=None, help="where to write the simulation and validation.json")


def main(args) -> int:
    from program_layer.config import load_config
    from program_layer.outputs import write_json
    from program_layer.run import run_config
    from program_layer.validate import compare, format_table, real_metrics, sim_metrics

    cfg = load_config(args.config)
    if Path(args.real_dir).is_dir() and not (Path(args.real_dir) / "requests.jsonl").exists():
        from llmservingsim.errors import WorkloadError
        raise WorkloadError("no requests.jsonl in the real run's folder", file=str(Path(args.real_dir) / "requests.jsonl"))
    out = Path(args.out) if args.out else Path("runs") / ("validate-" + Path(args.real_dir).name)
    run_config(cfg, out)
    with open(out / "calls.csv", newline="") as f:
        rows = [{"ttft_s": float(r["ttft_s"]), "tpot_s": float(r["tpot_s"]), "e2e_s": float(r["e2e_s"]),
                 "output_tokens": int(r["output_tokens"])} for r in csv.DictReader(f)]
    real = real_metrics(Path(args.real_dir))
    if len(real["ttft_s"]) != len(rows):
        from llmservingsim.errors import ConfigError
        raise ConfigError(f"the config does not simulate this run's workload ({len(real['ttft_s'])} real "
                          f"requests vs {len(rows)} simulated calls)", file=args.config, key="workload")
    table = compare(real, sim_metrics(rows))
    write_json(out / "validation.json", table)
    print(format_table(table))
    print(f"written to {out / 'validation.json'}")
    return 0
