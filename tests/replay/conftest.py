"""Shared pieces of the replay tests: workloads, a fast GIL, the CLI in-process."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def fast_switch():
    """The fake server's handler threads (and, in most tests, the client) share the test's
    interpreter: a short GIL switch interval keeps a thread that must stamp or send a chunk
    from waiting behind others' bytecode for up to the default 5 ms."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    yield
    sys.setswitchinterval(old)


def swebench_workload(path: Path, programs: int = 20, calls: int = 4) -> Path:
    """``programs`` SWE-bench-like programs (the project's generator, seed 0), each cut to its
    first ``calls`` calls, outputs scaled down to 2..10 tokens and prompts to a quarter (the
    shapes stay: growing contexts, heavy-tailed tool gaps), so a replay takes about a second."""
    from program_layer.workloads import generate_programs, write_jsonl
    recs = generate_programs("swebench", programs=programs, rate_jps=0.5, seed=0)
    for r in recs:
        subs = r["sub_requests"][:calls]
        for c in subs:
            c["input_toks"] = max(1, c["input_toks"] // 4)
            c["output_toks"] = min(10, max(2, c["output_toks"] // 40))
        subs[-1]["tool_duration_ns"] = 0
        r["sub_requests"] = subs
    write_jsonl(path, recs)
    return path


def program_workload(path: Path, programs: list) -> Path:
    """Programs given as lists of (input, output, gap_ns), arrivals in ``arrival_ns`` order."""
    with open(path, "w") as f:
        for i, (arrival, calls) in enumerate(programs):
            f.write(json.dumps({"session_id": f"p{i}", "arrival_time_ns": arrival, "sub_requests": [
                {"input_toks": a, "output_toks": b, "tool_duration_ns": g} for a, b, g in calls]}) + "\n")
    return path


def replay(*args) -> int:
    from program_layer.cli import main
    return main(["replay", *map(str, args)])


def records(out: Path) -> list:
    return [json.loads(l) for l in (out / "requests.jsonl").read_text().splitlines() if l.strip()]
