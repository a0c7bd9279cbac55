"""A fake runner with run_config's signature that writes a small, deterministic run folder.

Mean JCT = 1000 s x rate factor + retention offset + scheduling offset (below). Behaviour hooks:
- ``policies.retention: boom``      -> raises (a failing cell)
- ``policies.retention: crash``     -> the worker process dies (os._exit), unless env SWEEP_FAKE_NO_CRASH
- ``workload.fake_sleep_s: S``      -> sleeps S wall seconds first (to interrupt a sweep)
- env SWEEP_FAKE_LOG=path           -> appends "<retention>,<scheduling>,<rate>" per invocation
- env SWEEP_FAKE_SLEEP=ret:S         -> sleeps S wall seconds in cells whose retention is ret
Module-level so it pickles by reference into spawned workers and Ray tasks.
"""
from __future__ import annotations

import csv
import json
import os
import time
from pathlib import Path

RETENTION = {"cache-lru": 0.0, "ttl": 4.0, "pressure-ttl": -2.0, "crash": 8.0}
SCHEDULING = {"fcfs": 0.0, "plas": -39.0}
N_PROGRAMS = 20
SECONDS = 30


def fake_mean_jct(config: dict) -> float:
    pol = config.get("policies", {})
    rate = float(config.get("workload", {}).get("rate_jps", 0.02))
    return 1000.0 * (rate / 0.02) + RETENTION[pol.get("retention", "cache-lru")] + SCHEDULING[pol.get("scheduling", "fcfs")]


def fake_run_config(config, out_dir, *, base_dir=None, seed=None, step_mode=False, quiet=True):
    pol = config.get("policies", {})
    workload = config.get("workload", {})
    log = os.environ.get("SWEEP_FAKE_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(f"{pol.get('retention')},{pol.get('scheduling')},{workload.get('rate_jps')}\n")
    if workload.get("fake_sleep_s"):
        time.sleep(float(workload["fake_sleep_s"]))
    sleep_on, _, seconds = os.environ.get("SWEEP_FAKE_SLEEP", "").partition(":")
    if sleep_on and pol.get("retention") == sleep_on:
        time.sleep(float(seconds))
    if pol.get("retention") == "crash" and not os.environ.get("SWEEP_FAKE_NO_CRASH"):
        os._exit(3)
    if pol.get("retention") == "boom":
        raise RuntimeError("retention policy 'boom' exploded")
    out = Path(out_dir)
    mean = fake_mean_jct(config)
    jcts = [mean * (0.5 + i / (N_PROGRAMS - 1)) for i in range(N_PROGRAMS)]
    with (out / "programs.csv").open("w", newline="") as handle:
        w = csv.writer(handle)
        w.writerow(["program_id", "session_id", "arrival_s", "completion_s", "jct_s", "calls", "preemptions"])
        for i, jct in enumerate(jcts):
            w.writerow([i, f"s{i}", i * 50.0, i * 50.0 + jct, jct, 3, 0])
    with (out / "calls.csv").open("w", newline="") as handle:
        w = csv.writer(handle)
        w.writerow(["program_id", "call_index", "instance", "e2e_s"])
        for i, jct in enumerate(jcts):
            w.writerow([i, 0, 0, jct / 3])
    instances = int(config.get("instances", 1))
    with (out / "timeseries.csv").open("w", newline="") as handle:
        w = csv.writer(handle)
        w.writerow(["time_s", "instance", "running", "waiting", "kv_utilization", "memory_used_gib",
                    "prompt_tokens_per_s", "generation_tokens_per_s", "power_w"])
        for t in range(SECONDS):
            for inst in range(instances):
                util = min(1.0, (t + 1) / SECONDS * (0.9 if pol.get("scheduling") == "plas" else 1.0))
                w.writerow([t, inst, 4 + t % 3, max(0, 10 - t // 3), util, 40.0,
                            2000.0 * (t % 5 == 0), 300.0 + t, 500.0])
    stat = {"mean": mean, "p50": mean, "p90": 1.4 * mean, "p99": 1.49 * mean}
    summary = {"programs": N_PROGRAMS, "calls": 3 * N_PROGRAMS, "makespan_s": 2000.0, "arrival_span_s": 950.0,
               "jct_s": stat, "ttft_s": {k: v / 1000 for k, v in stat.items()},
               "tpot_s": {"mean": 0.02, "p50": 0.02, "p90": 0.03, "p99": 0.04},
               "e2e_s": stat, "queueing_s": stat,
               "throughput": {"output_tokens_per_s": 300.0, "prompt_tokens_per_s": 2000.0, "programs_per_s": 0.01},
               "preemptions": 7, "prefix_cache_hit_rate": 0.5, "kv_pool_tokens": 114768, "energy_j": 1.0, "steps": 10}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True))
    return summary
