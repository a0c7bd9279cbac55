"""Exact outcomes of every built-in policy."""
import json
import math

import numpy as np
import pytest

from llmservingsim.errors import ConfigError
from llmservingsim.paths import profiles_dir
from pl_views import view
from program_layer.policies import (FCFS, PLAS, TTL, CacheLRU, ContinuumTTL, EvictAlways,
                                    InflightLoad, LeastLoaded, MinWaste, PressureTTL,
                                    ProgramFCFS, RoundRobin, SessionAffinity, Signals)
from program_layer.policies.builtin_retention import pressure_scale
from program_layer.policies.min_waste import discard_waste, resolve_profile
from program_layer.policies.quantile import empirical_quantile


# ----- retention ----------------------------------------------------------------------------
def test_ttl_evict_always_cache_lru():
    v = view()
    assert TTL().on_turn_complete(v, 7, 10.0) == ("protect", 12.0)
    assert TTL(tau_s=0.5).on_turn_complete(v, 7, 10.0) == ("protect", 10.5)
    assert TTL().on_turn_arrival(v, 11.0) == "release"
    assert EvictAlways().on_turn_complete(v, 7, 10.0) == "evict"
    assert EvictAlways().on_turn_arrival(v, 11.0) == "none"
    assert CacheLRU().on_turn_complete(v, 7, 10.0) == "release"


@pytest.mark.parametrize("u, g", [(None, 1.0), (0.0, 1.0), (0.5, 1.0), (0.7, 1.0),
                                  (0.9, 0.5), (0.95, 0.5), (1.0, 0.5)])
def test_pressure_scale_eq9_exact(u, g):
    assert pressure_scale(u) == g


def test_pressure_ttl_halves_tau_at_90_percent():
    pol = PressureTTL(tau_s=2.0)
    pol.signals = Signals(kv_utilization=0.9)
    assert pol.on_turn_complete(view(), 0, 4.0) == ("protect", 5.0)
    pol.signals = Signals(kv_utilization=0.7)
    assert pol.on_turn_complete(view(), 0, 4.0) == ("protect", 6.0)
    pol.signals = Signals(kv_utilization=0.8)      # halfway: g = 0.75
    assert pol.on_turn_complete(view(), 0, 4.0)[1] == pytest.approx(5.5, abs=1e-12)


def test_empirical_quantile_matches_numpy_linear():
    rng = np.random.default_rng(3)
    for n in (1, 2, 5, 17):
        xs = list(rng.exponential(2.0, n))
        for q in (0.0, 0.1, 0.5, 0.9, 1.0):
            assert empirical_quantile(xs, q) == pytest.approx(float(np.quantile(xs, q)),
                                                              rel=1e-12)


def test_continuum_quantile_of_observed_gaps_per_tool():
    pol = ContinuumTTL()        # quantile 0.9, default 2 s
    gaps = {"search": (1.0, 10.0, 3.0, 2.0, 4.0), "calc": (0.25,)}
    # sorted 1,2,3,4,10; h = 4 * 0.9 = 3.6 -> 4 + 0.6 * (10 - 4) = 7.6
    assert pol.on_turn_complete(view(gaps, tool_name="search"), 0, 1.0)[1] == pytest.approx(8.6)
    assert pol.on_turn_complete(view(gaps, tool_name="calc"), 0, 1.0) == ("protect", 1.25)
    assert pol.on_turn_complete(view(gaps, tool_name="shell"), 0, 1.0) == ("protect", 3.0)
    assert ContinuumTTL(quantile=0.5, default_s=0.1).on_turn_complete(
        view(gaps, tool_name="search"), 0, 0.0) == ("protect", 3.0)
    assert pol.on_turn_arrival(view(), 2.0) == "release"


B200_8B = profiles_dir() / "infercept" / "infercept_profile_b200_8B_tp1.json"


def _w_discard_by_chunks(n, inflight, running, a, c, S):
    """Independent walk over the recompute chunks (InferCept Eq. 4 as in min_waste.py)."""
    c_h = max(S - inflight, 1)
    chunks = []
    left = n
    while left > c_h:
        chunks.append(c_h)
        left -= c_h
    chunks.append(left)
    t_sat = (a * S + c) / 1000.0
    waste, done = 0.0, 0
    for j, size in enumerate(chunks):
        if j < len(chunks) - 1:          # full chunk: saturated pass holding all so far
            done += size
            waste += t_sat * done
        waste += a * size / 1000.0 * running     # the batch is slowed by this chunk
    return waste


@pytest.mark.parametrize("n, expect", [(1000, "evict"), (100_000, "protect")])
def test_min_waste_retains_or_evicts_per_infercept_inequality(n, expect):
    prof = json.loads(B200_8B.read_text())
    a, c, S = prof["a"], prof["c"], prof["S"]
    inflight, running = 100, 50_000
    pol = MinWaste(profile=str(B200_8B))
    pol.signals = Signals(inflight_tokens=inflight, running_context_tokens=running)
    v = view(tool_name="search", context_tokens=n)      # no gap observed: g = 1 s default
    w_keep = 1.0 * n
    w_drop = _w_discard_by_chunks(n, inflight, running, a, c, S)
    assert discard_waste(n, inflight, running, pol.profile) == pytest.approx(w_drop, rel=1e-12)
    assert pol.wastes(v) == (1.0, w_keep, pytest.approx(w_drop, rel=1e-12))
    if n == 1000:   # one partial chunk: W = a*n/1000 * R = 537.3 < 1000
        assert w_drop == pytest.approx(0.010746 * 50_000, rel=1e-12)
        assert w_keep > w_drop
    else:           # 45 full chunks of 2204 + 820: the quadratic self term wins
        assert w_keep <= w_drop
    decision = pol.on_turn_complete(v, 0, 3.0)
    assert decision == ("protect", 4.0) if expect == "protect" else decision == "evict"


def test_min_waste_uses_per_tool_quantile_gap():
    pol = MinWaste(profile=str(B200_8B), quantile=0.5)
    pol.signals = Signals(inflight_tokens=0, running_context_tokens=0)
    v = view({"t": (0.5, 1.5)}, tool_name="t", context_tokens=10)
    assert pol.wastes(v)[0] == 1.0
    assert pol.on_turn_complete(v, 0, 0.0) == "evict"     # no batch, nothing to slow: W = 0


def test_min_waste_profile_resolution():
    assert resolve_profile("B200", "meta-llama/Llama-3.1-8B", 1).name == B200_8B.name
    assert resolve_profile("B200", "Llama-3.1-70B", 2).name == \
        "infercept_profile_b200_70B_tp2.json"
    assert resolve_profile("RTXPRO6000", "microsoft/Phi-3.5-MoE-instruct", 1).name == \
        "infercept_profile_rtx6000_phimoe_tp1.json"
    pol = MinWaste(hardware="B200", model="meta-llama/Llama-3.1-70B", tp=1)
    assert (pol.profile.a, pol.profile.c, pol.profile.S) == (0.103794, 19.563246, 2304)
    with pytest.raises(ConfigError, match="no InferCept profile.*available: NVIDIA B200"):
        resolve_profile("H100", "Llama-3.1-8B", 1)
    with pytest.raises(ValueError, match="needs 'profile'"):
        MinWaste()


# ----- scheduling ---------------------------------------------------------------------------
def test_fcfs_program_fcfs_plas_values():
    v = view(release_s=1.5, arrival_s=0.25, attained_service_s=12.3456)
    assert FCFS().priority(v, 2.0) == 1_500_000_000
    assert ProgramFCFS().priority(v, 2.0) == 250_000_000
    assert PLAS().priority(v, 2.0) == 12346
    fresh = view(attained_service_s=0.0)
    assert PLAS().priority(fresh, 2.0) < PLAS().priority(v, 2.0)
    assert PLAS.engine_args == {"scheduling_policy": "priority"}
    assert ProgramFCFS.engine_args == {"scheduling_policy": "priority"}


# ----- routing ------------------------------------------------------------------------------
def load(running=0, waiting=0, util=0.0):
    return InflightLoad(running, waiting, util, 0, 1000, running)


def test_round_robin_and_least_loaded():
    rr = RoundRobin()
    inflight = (load(), load(), load())
    assert [rr.select(view(), inflight, 0.0) for _ in range(5)] == [0, 1, 2, 0, 1]
    ll = LeastLoaded()
    assert ll.select(view(), (load(2, 1), load(1, 1), load(0, 3)), 0.0) == 1
    assert ll.select(view(), (load(1, 0, 0.5), load(0, 1, 0.2), load(1, 0, 0.2)), 0.0) == 1
    assert ll.select(view(), (load(1), load(1)), 0.0) == 0


def test_session_affinity_falls_back_above_threshold():
    sa = SessionAffinity()       # threshold 0.9 on KV utilization
    inflight = (load(0, 0, 0.1), load(5, 4, 0.85))
    assert sa.select(view(prior_instance=1), inflight, 0.0) == 1
    assert sa.select(view(prior_instance=None), inflight, 0.0) == 0
    hot = (load(0, 0, 0.1), load(5, 4, 0.91))
    assert sa.select(view(prior_instance=1), hot, 0.0) == 0
    at = (load(0, 0, 0.1), load(5, 4, 0.9))          # not above: stays
    assert sa.select(view(prior_instance=1), at, 0.0) == 1
    strict = SessionAffinity(threshold=1.0, max_waiting=3)
    assert strict.select(view(prior_instance=1), inflight, 0.0) == 0


def test_parameter_validation():
    for bad in (dict(tau_s=-1), dict(tau_s=float("nan")), dict(tau_s="2")):
        with pytest.raises(ValueError):
            TTL(**bad)
    with pytest.raises(ValueError):
        ContinuumTTL(quantile=1.5)
    assert math.isclose(TTL(tau_s=3).tau_s, 3.0)
