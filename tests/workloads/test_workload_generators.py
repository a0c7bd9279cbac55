"""Generator statistics for the paper's settings (seed 0, pinned) and the target bands.

Targets: paper §1/§4/App. A/App. D (median 47 calls, 2,873 calls, 38.7 M context tokens, >60 s
tool calls 4% of calls / 85% of tool time, ~25 tool names) and BFCL (median 5.5 calls, ~11 s
per program on B200 + Llama-3.1-8B).
"""
from __future__ import annotations

import statistics

import pytest

from llmservingsim.errors import ConfigError
from program_layer.workloads.bfcl import estimated_duration_s
from program_layer.workloads.generators import GENERATORS, describe_params, generate_programs
from program_layer.workloads.io import dumps_record, workload_stats


def _within(value: float, target: float, rel: float) -> bool:
    return abs(value - target) <= rel * target


@pytest.fixture(scope="module")
def swe0():
    return generate_programs("swebench", programs=50, rate_jps=0.02, seed=0)


@pytest.fixture(scope="module")
def bfcl0():
    return generate_programs("bfcl", programs=100, rate_jps=0.02, seed=0)


def test_swebench_seed0_pinned(swe0):
    s = workload_stats(swe0)
    assert s["programs"] == 50
    assert s["calls"] == 2848
    assert s["median_calls_per_program"] == 47.0
    assert s["max_calls_per_program"] == 204
    assert s["total_context_tokens"] == 38_394_036
    assert s["max_context_tokens"] == 77_521
    assert s["tool_calls"] == 2798
    assert s["long_tool_calls"] == 110
    assert s["long_tool_call_share"] == 0.0393
    assert s["long_tool_time_share"] == 0.8572
    assert s["tool_name_count"] == 25
    assert s["arrival_span_s"] == 3024.11


def test_swebench_seed0_within_paper_targets(swe0):
    s = workload_stats(swe0)
    assert _within(s["median_calls_per_program"], 47, 0.05)
    assert _within(s["calls"], 2873, 0.05)
    assert _within(s["total_context_tokens"], 38_700_000, 0.05)
    assert _within(s["long_tool_call_share"], 0.04, 0.05)
    assert _within(s["long_tool_time_share"], 0.85, 0.05)
    assert 23 <= s["tool_name_count"] <= 27
    assert s["max_context_tokens"] <= 100_000
    assert 100 <= s["median_output_tokens"] <= 600


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_swebench_other_seeds_stay_near_targets(seed):
    """Stratified lengths and fixed slow-call counts keep every seed near the targets."""
    s = workload_stats(generate_programs("swebench", programs=50, rate_jps=0.02, seed=seed))
    assert s["median_calls_per_program"] == 47.0
    assert _within(s["calls"], 2873, 0.05)
    assert _within(s["total_context_tokens"], 38_700_000, 0.20)
    assert _within(s["long_tool_call_share"], 0.04, 0.15)
    assert _within(s["long_tool_time_share"], 0.85, 0.05)


def test_swebench_program_shape(swe0):
    for p in swe0:
        calls = p["sub_requests"]
        assert calls[-1]["tool_duration_ns"] == 0 and calls[-1]["tool_name"] == "submit"
        assert all(c["tool_duration_ns"] > 0 for c in calls[:-1])
        for a, b in zip(calls, calls[1:]):
            assert b["input_toks"] > a["input_toks"] + a["output_toks"]  # + observation
        assert all("reuse_prefix_toks" not in c for c in calls)


def test_bfcl_seed0_pinned(bfcl0):
    s = workload_stats(bfcl0)
    assert s["programs"] == 100
    assert s["calls"] == 579
    assert s["median_calls_per_program"] == 5.5
    assert s["total_context_tokens"] == 2_123_603
    assert s["max_context_tokens"] == 7_423
    assert s["tool_time_s"] == 202.869
    assert s["long_tool_calls"] == 0
    assert s["arrival_span_s"] == 5235.298


def test_bfcl_targets(bfcl0):
    lengths = [len(p["sub_requests"]) for p in bfcl0]
    assert sum(n <= 5 for n in lengths) == 50 and sum(n >= 6 for n in lengths) == 50
    durations = [estimated_duration_s(p["sub_requests"]) for p in bfcl0]
    assert _within(statistics.mean(durations), 11.0, 0.05)
    gaps = [c["tool_duration_ns"] for p in bfcl0 for c in p["sub_requests"][:-1]]
    assert max(gaps) < 10e9 and statistics.mean(gaps) < 1e9  # short tool gaps


@pytest.mark.parametrize("generator,programs", [("swebench", 50), ("bfcl", 100)])
def test_same_seed_same_bytes(generator, programs):
    def text(seed):
        return "\n".join(dumps_record(r) for r in generate_programs(
            generator, programs=programs, rate_jps=0.04, seed=seed))
    assert text(7) == text(7)
    assert text(7) != text(8)


def test_rate_rescales_arrivals_only():
    slow = generate_programs("swebench", programs=10, rate_jps=0.02, seed=3)
    fast = generate_programs("swebench", programs=10, rate_jps=0.04, seed=3)
    assert [p["sub_requests"] for p in slow] == [p["sub_requests"] for p in fast]
    for a, b in zip(slow, fast):
        assert abs(a["arrival_time_ns"] - 2 * b["arrival_time_ns"]) <= 20  # ns rounding only
    assert slow[0]["arrival_time_ns"] == 0


def test_params_change_the_workload_and_are_validated():
    base = workload_stats(generate_programs("swebench", programs=20, rate_jps=1, seed=0))
    capped = workload_stats(generate_programs("swebench", programs=20, rate_jps=1, seed=0,
                                              context_cap_tokens=20_000))
    assert capped["max_context_tokens"] <= 20_000 < base["max_context_tokens"]
    assert set(describe_params("bfcl")) == {"output_median", "call_gap_median_s",
                                            "tool_time_scale"}
    assert set(GENERATORS) == {"swebench", "bfcl"}
    assert all(spec.description for spec in GENERATORS.values())


@pytest.mark.parametrize("kwargs,key", [
    ({"generator": "nope"}, "workload.generator"),
    ({"programs": 0}, "workload.programs"),
    ({"rate_jps": 0.0}, "workload.rate_jps"),
    ({"rate_jps": float("inf")}, "workload.rate_jps"),
    ({"seed": -1}, "workload.seed"),
    ({"bogus": 1}, "workload.bogus"),
    ({"step_limit": 2.5}, "workload.step_limit"),
    ({"output_median": -3}, "workload.output_median"),
])
def test_bad_arguments_name_the_key(kwargs, key):
    args = {"generator": "swebench", "programs": 5, "rate_jps": 1.0, "seed": 0, **kwargs}
    with pytest.raises(ConfigError) as err:
        generate_programs(args.pop("generator"), **args)
    assert err.value.key == key
    assert key in str(err.value)
