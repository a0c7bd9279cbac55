"""Our event loop beside Vidur's on the same request stream (run by hand; never a test).

    python benchmarks/bench_vidur.py --vidur DIR --vidur-python PY [--stream sharegpt300|azure5k]
                                     [--repeats 3] [--max-tokens 8192]

Vidur (microsoft/vidur) is not a dependency: point ``--vidur`` at a checkout of it (the
directory holding ``vidur/`` and ``data/profiling/``; run from there, as Vidur reads its
profiles relative to it) and ``--vidur-python`` at an interpreter that has Vidur's
requirements. Nothing of Vidur is copied here; this script only builds its command line.

The stream is the one our cell simulates, read through our own loader (``build_simulation``
of the cell config): each program's single call as ``arrived_at`` (s), ``num_prefill_tokens``,
``num_decode_tokens``, Vidur's ``trace_replay`` columns. Vidur's configuration follows our
dev deployment where Vidur can express it: one replica, TP1, the ``sarathi`` scheduler with
chunk 2,048 and batch cap 128 (our ``max_num_batched_tokens`` and ``max_num_seqs``),
A100 / Meta-Llama-3-8B (the device and model it has profiles for), random-forest predictors
with a one-point grid (the default grid trains for about 2,700 CPU s; the loop reads a table
of predictions either way, cached under ``--cache-dir`` after the first run), every metric,
trace and plot output off, ``max_tokens`` 8,192 so that no prompt is shortened.

After one uncounted run of ours, per repeat, alternating: our loop (``bench_cells.run_once``:
``sim.run()`` of a fresh build, ``time.process_time``),
Vidur's loop (a fresh child builds its ``Simulator`` untimed, then times ``Simulator.run()``
the same way), and, unless ``--no-whole``, Vidur's whole process (``python -m vidur.main``,
user + system CPU of the child). Best of ``repeats`` each, and the ratio.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from bench_process import child_cpu     # stdlib only: the Vidur child imports this module too

HERE = Path(__file__).resolve().parent
STREAMS = {
    "sharegpt300": HERE.parent / "examples" / "validation" / "RTXPRO6000-Llama-3.1-8B-sharegpt300-sps10.yaml",
    "azure5k": HERE / "cells" / "azure-conv-5k.yaml",
}
_RF = "random_forrest_execution_time_predictor_config_"     # Vidur's spelling


def vidur_args(trace: str, max_tokens: int, out_dir: str, cache_dir: str) -> list[str]:
    return [
        "--replica_config_device", "a100",
        "--replica_config_network_device", "a100_pairwise_nvlink",
        "--replica_config_model_name", "meta-llama/Meta-Llama-3-8B",
        "--replica_config_tensor_parallel_size", "1",
        "--replica_config_num_pipeline_stages", "1",
        "--cluster_config_num_replicas", "1",
        "--global_scheduler_config_type", "round_robin",
        "--replica_scheduler_config_type", "sarathi",
        "--sarathi_scheduler_config_chunk_size", "2048",
        "--sarathi_scheduler_config_batch_size_cap", "128",
        "--request_generator_config_type", "trace_replay",
        "--trace_request_generator_config_trace_file", trace,
        "--trace_request_generator_config_max_tokens", str(max_tokens),
        "--trace_request_generator_config_time_scale_factor", "1.0",
        "--execution_time_predictor_config_type", "random_forrest",
        f"--{_RF}num_estimators", "250",
        f"--{_RF}max_depth", "16",
        f"--{_RF}min_samples_split", "2",
        f"--{_RF}k_fold_cv_splits", "2",
        f"--{_RF}num_training_job_threads", "1",
        f"--{_RF}prediction_max_tokens_per_request", str(max_tokens),
        "--no-metrics_config_write_metrics",
        "--no-metrics_config_enable_chrome_trace",
        "--no-metrics_config_write_json_trace",
        "--no-metrics_config_store_plots",
        "--no-metrics_config_store_request_metrics",
        "--no-metrics_config_store_batch_metrics",
        "--no-metrics_config_store_utilization_metrics",
        "--metrics_config_output_dir", out_dir,
        "--metrics_config_cache_dir", cache_dir,
    ]


def _vidur_loop(argv: list[str], result: str) -> None:
    """In the child (Vidur's interpreter, Vidur's checkout as cwd): build untimed, time the
    loop, write its CPU seconds and batch count as JSON to ``result``."""
    sys.path.insert(0, os.getcwd())
    sys.argv = ["vidur.main"] + argv
    from vidur.config import SimulationConfig
    from vidur.entities.batch import Batch
    from vidur.simulator import Simulator
    from vidur.utils.random import set_seeds
    config = SimulationConfig.create_from_cli_args()
    set_seeds(config.seed)
    sim = Simulator(config)
    first = Batch._id
    t0 = time.process_time()
    sim.run()
    loop = time.process_time() - t0
    Path(result).write_text(json.dumps({"loop_s": loop, "batches": Batch._id - first}))


def write_stream(config: Path, path: Path) -> int:
    """The cell's stream as Vidur's trace CSV (our loader's programs, one call each)."""
    from program_layer.config import load_config
    from program_layer.run import build_simulation
    sim = build_simulation(load_config(config))
    with open(path, "w", encoding="utf-8") as f:
        f.write("arrived_at,num_prefill_tokens,num_decode_tokens\n")
        for spec in sim.programs:
            if len(spec.calls) != 1:
                raise SystemExit(f"{config}: program {spec.program_id} has {len(spec.calls)} calls; "
                                 "Vidur replays single requests only")
            call = spec.calls[0]
            f.write(f"{spec.arrival_ns / 1e9!r},{call.prompt_tokens},{call.output_tokens}\n")
    return len(sim.programs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vidur", type=Path, help="Vidur checkout (holds vidur/ and data/profiling/)")
    ap.add_argument("--vidur-python", default=sys.executable, help="interpreter with Vidur's requirements")
    ap.add_argument("--stream", choices=sorted(STREAMS), default="azure5k")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=8192)
    ap.add_argument("--cache-dir", type=Path, default=None,
                    help="Vidur's predictor cache (default: <vidur>/cache); the first run trains it")
    ap.add_argument("--no-whole", action="store_true", help="skip Vidur's whole-process runs")
    ap.add_argument("--child", help=argparse.SUPPRESS)       # JSON argv: the timed child in Vidur's interpreter
    ap.add_argument("--result", help=argparse.SUPPRESS)      # where that child writes its timing
    args = ap.parse_args()
    if args.child is not None:
        _vidur_loop(json.loads(args.child), args.result)
        return
    from bench_cells import run_once        # our side (imports the simulator)
    if args.vidur is None or not (args.vidur / "vidur").is_dir():
        ap.error("--vidur must name a Vidur checkout (a directory holding vidur/)")
    vidur = str(args.vidur.resolve())
    cache = str((args.cache_dir or args.vidur / "cache").resolve())
    config = STREAMS[args.stream]
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / f"{args.stream}.csv"
        n = write_stream(config, trace)
        argv = vidur_args(str(trace), args.max_tokens, str(Path(tmp) / "out"), cache)
        result = Path(tmp) / "vidur_loop.json"
        loop_cmd = [args.vidur_python, str(Path(__file__).resolve()), "--child", json.dumps(argv),
                    "--result", str(result)]
        env = dict(os.environ)
        ours, theirs, whole, batches = [], [], [], None
        run_once(config, False)         # warm-up, not counted: the first run's caches
        for _ in range(args.repeats):
            ours.append(run_once(config, False)["loop"])
            child_cpu(loop_cmd, env, vidur)
            r = json.loads(result.read_text())
            theirs.append(r["loop_s"])
            batches = r["batches"]
            if not args.no_whole:
                whole.append(child_cpu([args.vidur_python, "-m", "vidur.main"] + argv, env, vidur))
    best_ours, best_theirs = min(ours), min(theirs)
    print(f"{args.stream}: {n} requests; Vidur {batches} batches")
    print(f"  our loop   {best_ours:7.3f} s CPU (best of {args.repeats}; runs {', '.join(f'{x:.3f}' for x in ours)})")
    print(f"  Vidur loop {best_theirs:7.3f} s CPU (runs {', '.join(f'{x:.3f}' for x in theirs)}): "
          f"ours is x{best_theirs / best_ours:.2f} faster (issue 15's target: x5)")
    if whole:
        print(f"  Vidur whole process {min(whole):7.3f} s CPU (runs {', '.join(f'{x:.2f}' for x in whole)})")


if __name__ == "__main__":
    main()
