"""Collective regimes fitted on isolated all-reduce benchmarks (devices without TP step
tables): the point selection, the fit on a tiny table by hand, leave-one-size-out, the ring
network that reproduces a regime at every TP size, and the shipped H100 / H200 files."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmservingsim.execution_graph import GraphCommModel
from llmservingsim.hardware import load_device
from llmservingsim.model_config import load_model
from llmservingsim.overhead_fit import (VLLM_DISPATCH, ARPoint, fit_measured_collectives, leave_one_size_out,
                                        read_allreduce_table, regime_points)
from llmservingsim.overhead_model import Regime, load_overhead, regime_for
from llmservingsim.paths import hardware_dir


def _pt(backend, nbytes, us, tp=4, graph=True):
    return ARPoint("test", "X", backend, graph, tp, nbytes, us)


# a: 5 us + S / 0.1 GB/s inside [0, 1000); b: 20 us + S / 0.05 GB/s, measured only above its
# range; c: eager points only; d, e: nothing (the NCCL fallback, merged into one regime)
TINY = [_pt("a", 200, 7.0), _pt("a", 600, 11.0), _pt("a", 5000, 999.0, tp=8),
        _pt("b", 10_000, 220.0), _pt("b", 20_000, 420.0),
        _pt("c", 100, 31.0, graph=False), _pt("c", 300, 33.0, graph=False)]
DISPATCH = (("a", 1000), ("b", 5000), ("c", 8000), ("d", 9000), ("e", None))
NCCL = Regime(0.0, 400.0)


def test_tiny_table_fit_by_hand():
    regimes, notes = fit_measured_collectives(TINY, 4, DISPATCH, NCCL)
    assert [n[3] for n in notes] == ["in range", "extrapolated", "eager", "none"]
    assert [r.max_bytes for r in regimes] == [1000, 5000, 8000, None]
    a, b, c, d = regimes
    # a: slope (11 - 7) / 400 B = 0.01 us/B = 100 B/us = 0.1 GB/s, intercept 7 - 2 = 5 us (the TP8 point is not its TP)
    assert a.latency_us == pytest.approx(5.0, abs=1e-9) and a.bandwidth_gbs == pytest.approx(0.1, rel=1e-12)
    # b: 200 us / 10,000 B = 0.02 us/B = 0.05 GB/s, intercept 220 - 200 = 20 us
    assert b.latency_us == pytest.approx(20.0, abs=1e-9) and b.bandwidth_gbs == pytest.approx(0.05, rel=1e-12)
    # c: 2 us / 200 B = 0.01 us/B, intercept 31 - 1 = 30 us
    assert c.latency_us == pytest.approx(30.0, abs=1e-9) and c.bandwidth_gbs == pytest.approx(0.1, rel=1e-12)
    assert d == Regime(0.0, 400.0, None) and notes[3][0] == "d + e"
    assert regime_for(regimes, 999) is a and regime_for(regimes, 1000) is b and regime_for(regimes, 10 ** 9) is d


def test_point_selection_prefers_graph_points_in_range():
    pts = TINY + [_pt("b", 2000, 60.0), _pt("b", 4000, 100.0)]
    sel, how = regime_points(pts, 4, "b", 1000, 5000)
    assert how == "in range" and sorted(p.bytes for p in sel) == [2000, 4000]
    assert regime_points(pts, 2, "b", 1000, 5000) == ([], "none")


def test_leave_one_size_out_is_exact_on_a_line_and_nan_with_two_sizes():
    line = [_pt("a", s, 5.0 + s / 100e3) for s in (1000, 2000, 4000, 8000)]
    assert all(q == pytest.approx(p.us, rel=1e-12) for p, q in leave_one_size_out(line))
    assert all(math.isnan(q) for _, q in leave_one_size_out(line[:2]))


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_the_ring_network_reproduces_a_regime_at_every_tp(tp):
    model, dev = load_model("meta-llama/Llama-3.1-70B"), load_device("H100")
    r = Regime(9.6, 30.33, None)
    comm = GraphCommModel(model, dev, tp, 1, regimes=(r,))
    for tokens in (1, 10, 100, 1000):
        size = comm.activation_bytes(tokens)
        sim = comm.simulator_for(tokens).collective_time_ns("all_reduce", size, list(range(tp)))
        assert sim / 1000.0 == pytest.approx(r.us(size), rel=2e-3, abs=2e-3)
    assert r.ring_network(2) == (30.33, 9600.0)           # 2 GPUs: the regime is the network as written


def test_shipped_h100_regimes_follow_the_dispatch_and_h200_takes_them():
    h100, h200 = load_overhead("H100"), load_overhead("H200")
    for tp in (2, 4, 8):
        bounds = [r.max_bytes for r in h100.regimes_for(tp)]
        vllm = [b for _, b in VLLM_DISPATCH["9.0"][tp]]
        assert bounds[-1] is None and set(bounds) <= set(vllm)
        assert h200.regimes_for(tp) == h100.regimes_for(tp)
    # a decode step's all-reduce (10 sequences of Llama-3.1-70B: 160 KiB) costs microseconds, not 0.5 us
    assert 5.0 < regime_for(h100.regimes_for(8), 10 * 8192 * 2).us(10 * 8192 * 2) < 20.0


def test_shipped_a100_regimes_follow_the_capability_8_dispatch():
    """A100 (capability 8.0): custom all-reduce up to 8 MiB (1-stage / 2-stage by its kernel's
    switch), NCCL above; fitted on sglang#2688's eager points only. A batch-1 decode all-reduce
    of Llama-3.1-70B (one token: 16 KiB) costs what those points measure (12.1-14.2 us), not
    the bandwidth-only NCCL model's fraction of a microsecond."""
    a100 = load_overhead("A100")
    for tp in (2, 4, 8):
        bounds = [r.max_bytes for r in a100.regimes_for(tp)]
        vllm = [b for _, b in VLLM_DISPATCH["8.0"][tp]]
        assert bounds[0] == vllm[0] and bounds[-1] is None and set(bounds) <= set(vllm)
    one_token = 8192 * 2
    tp4 = regime_for(a100.regimes_for(4), one_token)
    assert (tp4.latency_us, tp4.bandwidth_gbs) == (12.8, 106.79)
    assert tp4.us(one_token) == pytest.approx(12.8 + one_token / 106.79e3, rel=1e-12)
    tp8 = regime_for(a100.regimes_for(8), one_token)
    assert (tp8.latency_us, tp8.bandwidth_gbs) == (14.0, 35.84)
    assert 12.0 < tp8.us(one_token) < 14.5


def test_measurement_table_reads_and_every_row_is_a_known_backend():
    pts = read_allreduce_table(hardware_dir() / "measurements" / "allreduce" / "allreduce.csv")
    known = {"ca_1stage", "ca_2stage", "pynccl", "pynccl-symm", "symm_mem_multimem", "symm_mem_two_shot"}
    assert len(pts) == 143 and {p.backend for p in pts} <= known and all(p.us > 0 and p.bytes > 0 for p in pts)


@settings(max_examples=200, deadline=None)
@given(bw=st.floats(1.0, 2000.0), fixed=st.floats(0.0, 1e5), n=st.integers(2, 64))
def test_of_ring_is_ring_network_inverted(bw, fixed, n):
    """``Regime.of_ring`` (the device's NCCL ring as a per-call regime, fit_overhead's
    fallback) and ``Regime.ring_network`` (the ring a regime is charged on) undo each other,
    and the regime's call costs what the ring's fixed cost n - 1 times plus 2 (n - 1) / n of
    the bytes at the bus bandwidth cost."""
    r = Regime.of_ring(bw, fixed, n)
    back_bw, back_fixed = r.ring_network(n)
    assert math.isclose(back_bw, bw, rel_tol=1e-12) and math.isclose(back_fixed, fixed, rel_tol=1e-12, abs_tol=1e-9)
    assert math.isclose(r.us(10**6), (n - 1) * fixed / 1e3 + 2 * (n - 1) / n * 1e6 / (bw * 1e3), rel_tol=1e-12)
