"""CPU time of one program with many calls: the per-call work must not grow with the calls
before it (issue 12: PCB views rebuilt every tool-gap history per call, so 100k calls were
quadratic). Run by hand; never a timed test.

    python benchmarks/bench_long_program.py [--calls 10000,100000] [--repeats 3] [--history]

One program of N short calls (32-token prompts, 2 output tokens, a 1 ms gap of tool "t"
between calls) on one RTX PRO 6000 with Llama-3.1-8B, ttl retention, fcfs scheduling.
``--history`` adds a retention policy that reads both gap histories (length and last gap)
at every completion, as an estimator would. Prints, per N, the best-of-``repeats`` CPU time
(build + run, ``time.process_time``) and microseconds per call; linear means the per-call
time stays flat as N grows.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from program_layer.run import build_simulation

HISTORY_POLICY = '''
from program_layer.policies import RetentionPolicy

class ReadsHistory(RetentionPolicy):
    def on_turn_complete(self, pcb, request_id, now):
        own = pcb.own_tool_gap_history(pcb.tool_name)
        seen = pcb.tool_gap_history(pcb.tool_name)
        last = own[-1] if len(own) else 0.0
        return ("protect", now + 2.0 + 0.0 * (last + len(seen)))

    def on_turn_arrival(self, pcb, now):
        return "release"
'''


def workload(path: Path, calls: int) -> None:
    subs = [{"input_toks": 32, "output_toks": 2, "tool_duration_ns": 1_000_000, "tool_name": "t",
             "reuse_prefix_toks": 0} for _ in range(calls)]
    path.write_text(json.dumps({"session_id": "long", "arrival_time_ns": 0, "sub_requests": subs}) + "\n")


def cpu_seconds(calls: int, repeats: int, history: bool) -> float:
    best = None
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        workload(d / "w.jsonl", calls)
        retention = {"name": "ttl", "tau_s": 2.0}
        if history:
            (d / "policy.py").write_text(HISTORY_POLICY)
            retention = "policy.py:ReadsHistory"
        cfg = {"model": "meta-llama/Llama-3.1-8B", "hardware": "RTXPRO6000",
               "workload": {"path": "w.jsonl"},
               "policies": {"retention": retention, "scheduling": "fcfs", "routing": "round-robin"}}
        for _ in range(repeats):
            t0 = time.process_time()
            sim = build_simulation(dict(cfg), base_dir=d)
            sim.run()
            t = time.process_time() - t0
            assert len(sim.cluster.finished_calls) == calls
            best = t if best is None else min(best, t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", default="10000,100000")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--history", action="store_true")
    args = ap.parse_args()
    first = None
    for n in (int(x) for x in args.calls.split(",")):
        t = cpu_seconds(n, args.repeats, args.history)
        per = t / n * 1e6
        first = first or (n, t)
        ratio = f"  x{t / first[1]:.1f} the time for x{n / first[0]:.0f} the calls" if n != first[0] else ""
        print(f"{n:>8} calls: {t:7.2f} s CPU (best of {args.repeats}), {per:6.1f} us/call{ratio}")


if __name__ == "__main__":
    main()
