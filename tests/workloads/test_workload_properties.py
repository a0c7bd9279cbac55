"""Hypothesis properties of every generated workload (and of imported TraceLab programs)."""
from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from program_layer.workloads.generators import generate_programs
from program_layer.workloads.importers import import_trace

TRACELAB = str(Path(__file__).resolve().parents[2] / "examples" / "traces"
               / "tracelab_example_round_trace.jsonl")


def _check_program_invariants(programs: list[dict], *, cap: int | None = None) -> None:
    arrivals = [p["arrival_time_ns"] for p in programs]
    assert arrivals == sorted(arrivals) and arrivals[0] >= 0
    assert len({p["session_id"] for p in programs}) == len(programs)
    for p in programs:
        calls = p["sub_requests"]
        assert calls and calls[-1]["tool_duration_ns"] == 0
        for c in calls:
            for key in ("input_toks", "output_toks", "tool_duration_ns"):
                assert type(c[key]) is int and c[key] >= 0
            assert c["input_toks"] >= 1 and isinstance(c["tool_name"], str)
            if cap is not None:
                assert c["input_toks"] <= cap
        for prev, cur in zip(calls, calls[1:]):
            default = min(prev["input_toks"] + prev["output_toks"], cur["input_toks"])
            reuse = cur.get("reuse_prefix_toks", default)
            assert type(reuse) is int and 0 <= reuse <= default <= cur["input_toks"]


@settings(max_examples=30, deadline=None)
@given(generator=st.sampled_from(["swebench", "bfcl"]),
       programs=st.integers(1, 12),
       rate=st.floats(0.001, 50.0),
       seed=st.integers(0, 2**32 - 1))
def test_generated_programs_are_well_formed(generator, programs, rate, seed):
    out = generate_programs(generator, programs=programs, rate_jps=rate, seed=seed)
    assert len(out) == programs and out[0]["arrival_time_ns"] == 0
    _check_program_invariants(out, cap=100_000 if generator == "swebench" else None)
    for p in out:  # generators never truncate: each prompt extends the previous one
        for prev, cur in zip(p["sub_requests"], p["sub_requests"][1:]):
            assert cur["input_toks"] >= prev["input_toks"] + prev["output_toks"]


@settings(max_examples=15, deadline=None)
@given(cap=st.integers(3_000, 60_000), seed=st.integers(0, 1000))
def test_swebench_context_cap_is_respected(cap, seed):
    out = generate_programs("swebench", programs=5, rate_jps=1.0, seed=seed,
                            context_cap_tokens=cap)
    _check_program_invariants(out, cap=cap)


@settings(max_examples=10, deadline=None)
@given(scale=st.floats(0.01, 100.0), limit=st.integers(1, 3))
def test_imported_tracelab_programs_are_well_formed(scale, limit):
    _check_program_invariants(import_trace("tracelab", TRACELAB, limit=limit, time_scale=scale))
