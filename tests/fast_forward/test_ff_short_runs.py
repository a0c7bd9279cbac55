"""Short fast-forward runs between close arrivals (issue 15) stay exact.

On a trace-like stream the next event is nearly always an arrival a few steps away: runs of
one bulk step (``MIN_STEPS``) planned with the next event about one step away
(``MIN_GAP_STEPS``) must give step mode's outputs, and they must actually be taken. (The
admission verdict itself: tests/engine/test_engine_admission_blocked.py.)
"""
from __future__ import annotations

import json
import random

from hypothesis import HealthCheck, given, settings, strategies as st

import llmservingsim.fast_forward as ff
from program_layer.run import build_simulation

from test_ff_through_finishes import _cfg as _trace_cfg, _outputs_equal


def _dense_workload(tmp_path, seed: int, n_programs: int, gap_ns: int) -> str:
    """One-call programs (a few with two calls) arriving 0..``gap_ns`` apart: the next
    arrival is usually a few decode steps away."""
    rng = random.Random(seed)
    lines = []
    t = 0
    for p in range(n_programs):
        t += rng.randint(0, gap_ns)
        ctx = rng.randint(5, 400)
        calls = []
        for _ in range(2 if rng.random() < 0.15 else 1):
            out = rng.randint(1, 200)
            calls.append({"input_toks": ctx, "output_toks": out,
                          "tool_duration_ns": rng.choice([0, rng.randint(0, 100_000_000)]), "tool_name": "bash"})
            ctx += out
        lines.append(json.dumps({"session_id": f"s{p}", "arrival_time_ns": t, "sub_requests": calls}))
    path = tmp_path / f"d{seed}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _cfg(tmp_path, seed, n_programs, gap_ns, pool_blocks=800, max_num_seqs=64, budget=2048,
         retention="cache-lru", instances=1) -> dict:
    """test_ff_through_finishes' deployment, on the dense stream."""
    cfg = _trace_cfg(tmp_path, seed, 1, 0.0, pool_blocks, max_num_seqs, budget, retention, instances)
    cfg["workload"] = {"path": _dense_workload(tmp_path, seed, n_programs, gap_ns)}
    return cfg


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), n_programs=st.integers(2, 40),
       gap_ns=st.sampled_from([5_000_000, 20_000_000, 60_000_000]), pool_blocks=st.integers(40, 800),
       max_num_seqs=st.integers(2, 64), budget=st.sampled_from([64, 2048]),
       retention=st.sampled_from(["cache-lru", "evict-always", {"name": "ttl", "tau_s": 0.5}]),
       instances=st.integers(1, 2))
def test_short_runs_between_close_arrivals_match_step_mode(tmp_path, seed, n_programs, gap_ns, pool_blocks,
                                                           max_num_seqs, budget, retention, instances):
    cfg = _cfg(tmp_path, seed, n_programs, gap_ns, pool_blocks, max_num_seqs, budget, retention, instances)
    assert _outputs_equal(tmp_path, cfg)


def test_one_bulk_step_runs_are_taken_one_step_before_an_arrival(tmp_path, monkeypatch):
    """The widening is real: runs of a single bulk step happen, and runs are planned with the
    next event less than four of the last step's lengths away (the former thresholds); the
    outputs stay step mode's."""
    runs = []
    apply = ff._apply

    def recorded(inst, nxt, times, *rest):
        nxt_event = inst.loop.peek()
        if nxt_event is not None:
            runs.append((len(times), (nxt_event - inst.loop.now) / inst.last_step_ns))
        apply(inst, nxt, times, *rest)
    monkeypatch.setattr(ff, "_apply", recorded)
    cfg = _cfg(tmp_path, 3, 120, 40_000_000)
    build_simulation(cfg).run()
    assert any(steps == 1 for steps, _ in runs), runs
    assert any(gap < 4 for _, gap in runs), runs
    monkeypatch.setattr(ff, "_apply", apply)
    assert _outputs_equal(tmp_path, cfg)
