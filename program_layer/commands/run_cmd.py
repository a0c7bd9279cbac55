"""``agentservesim run [CONFIG.yaml] --out DIR``: simulate one config and print a summary."""
from __future__ import annotations

import time
from pathlib import Path

from llmservingsim.paths import examples_dir

DEFAULT_CONFIG = "quickstart.yaml"


def add_arguments(p) -> None:
    p.add_argument("config", nargs="?", help=f"config YAML (default: examples/{DEFAULT_CONFIG})")
    p.add_argument("--out", default=None, help="output folder (default: runs/<config name>)")
    p.add_argument("--profiles", default=None, help="profile-bundle root (overrides the config)")
    p.add_argument("--seed", type=int, default=None, help="override the config's seed")
    p.add_argument("--step-mode", action="store_true", help="plain step-by-step loop (no fast-forward)")
    p.add_argument("--trace-steps", default=None, metavar="FILE.csv", help="write a per-step trace")
    p.add_argument("--plot", action="store_true", help="also write the standard plots to OUT/plots/")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")


def memory_text(m: dict) -> str:
    """vLLM 0.19's KV budget, term by term (llmservingsim.memory_model)."""
    if m["overridden"]:
        return f"KV pool {m['kv_pool_tokens']} tokens set by kv_pool_tokens"
    return (f"{m['device_gib']:.2f} GiB x {m['gpu_memory_utilization']} - weights {m['weights_gib']:.2f} - "
            f"activation peak {m['activation_peak_gib']:.2f} - non-torch {m['non_torch_gib']:.2f} = "
            f"KV {m['kv_cache_gib']:.2f} GiB ({m['num_gpu_blocks']} blocks)")


def summary_text(s: dict, out: Path, wall: float) -> str:
    j, t, p = s["jct_s"], s["ttft_s"], s["tpot_s"]
    f = lambda v, scale=1.0, nd=3: "-" if v is None else f"{v * scale:.{nd}f}"
    lines = [
        f"programs {s['programs']}, calls {s['calls']}, makespan {s['makespan_s']:.1f} s "
        f"(arrival span {s['arrival_span_s']:.1f} s), {s['steps']} engine steps",
        f"JCT   mean {f(j['mean'])} s  p50 {f(j['p50'])}  p90 {f(j['p90'])}  p99 {f(j['p99'])}",
        f"TTFT  mean {f(t['mean'], 1e3, 1)} ms  p99 {f(t['p99'], 1e3, 1)} ms    "
        f"TPOT mean {f(p['mean'], 1e3, 2)} ms  p99 {f(p['p99'], 1e3, 2)} ms",
        f"queueing mean {f(s['queueing_s']['mean'])} s, preemptions {s['preemptions']}, "
        f"prefix-cache hit rate {100 * s['prefix_cache_hit_rate']:.1f}%, KV pool {s['kv_pool_tokens']} tokens",
        f"memory per GPU: {memory_text(s['memory'])}",
        f"GPU busy time: compute {100 * s['time_shares']['compute']:.1f}%, exposed communication "
        f"{100 * s['time_shares']['exposed_comm']:.1f}%, framework overhead {100 * s['time_shares']['overhead']:.1f}% "
        f"({s['bundle']['provenance']} bundle; overhead: {s['step_overhead']['source']})",
        f"throughput {s['throughput']['output_tokens_per_s']:.1f} output tok/s, energy {s['energy_j'] / 3.6e6:.3f} kWh",
        f"outputs in {out}/ (config.yaml, summary.json, calls.csv, programs.csv, timeseries.csv); wall {wall:.2f} s",
    ]
    return "\n".join(lines)


def main(args) -> int:
    from program_layer.config import load_config
    from program_layer.run import run_config
    from program_layer.instances import instance_count

    from llmservingsim.errors import ConfigError

    path = Path(args.config) if args.config else examples_dir() / DEFAULT_CONFIG
    cfg = load_config(path)
    out = Path(args.out) if args.out else Path("runs") / path.stem   # checked before simulating
    if args.trace_steps and Path(args.trace_steps).is_dir():
        raise ConfigError(f"{args.trace_steps} is a folder; give a CSV file path", key="--trace-steps")
    if args.plot:                                    # a missing extra fails now, not after simulating
        from program_layer.extras import require
        require("matplotlib", "plot", "run --plot")
    if args.profiles:                                # a command-line path is relative to here
        args.profiles = str(Path(args.profiles).resolve())
    t0 = time.perf_counter()
    summary = run_config(cfg, out, seed=args.seed, step_mode=args.step_mode, profiles=args.profiles,
                         trace_steps=Path(args.trace_steps) if args.trace_steps else None,
                         quiet=args.quiet, plot=args.plot)
    if not args.quiet:
        par = cfg["parallelism"]
        dpep = "".join(f" {k.upper()}{par[k]}" for k in ("dp", "ep") if par.get(k, 1) != 1)
        print(f"{path.name}: {cfg.get('model')} on {cfg.get('hardware')} TP{par['tp']}{dpep}"
              f" x {instance_count(cfg['instances'])} instance(s); policies "
              + ", ".join(f"{axis}={label}" for axis, label in summary["policies"].items())
              # a bundle that is not a measurement says so in the header (derived, synthesized)
              + ("" if summary["bundle"]["provenance"] == "measured" else f"; bundle {summary['bundle']['provenance']}"))
        for entry in summary["placement"]:          # pipeline stages, DP ranks, nodes (docs/clusters.md)
            line = placement_line(entry)
            if line:
                print(f"placement: instance {entry['instance']}: {line}")
        print(summary_text(summary, out, time.perf_counter() - t0))
    return 0


def placement_line(entry: dict) -> str:
    """The run header's placement of one instance: its pipeline stages, or its DP ranks (each
    with its stages when it has several); "" for a plain instance on one node."""
    def gpus(g):
        return f"GPU {g[0]}" if len(g) == 1 else f"GPUs {g[0]}-{g[-1]}"

    def stages(e):
        return ", ".join(f"stage {st['stage']} node {st['node']} {gpus(st['gpus'])}" for st in e["stages"])
    if "ranks" in entry:
        return "; ".join(f"rank {r['rank']} " + (stages(r) if "stages" in r else f"node {r['node']} {gpus(r['gpus'])}")
                         for r in entry["ranks"])
    return stages(entry) if "stages" in entry else ""
