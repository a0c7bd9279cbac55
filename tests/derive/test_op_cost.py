"""The op-level cost model (llmservingsim/op_cost.py) on a tiny made-up model: exact bytes and
FLOPs per op under TP, the roofline's arithmetic, and a fit that recovers known parameters."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from llmservingsim.derive_bundle import scaled_time
from llmservingsim.model_config import ModelSpec
from llmservingsim.op_cost import (DENSE_OPS, UNSHARDED, Roofline, Work, attention_work, dense_work,
                                   fit_roofline, moe_work, per_sequence_work)

# hidden 8, 4 q heads / 2 KV heads of dim 2, MLP 16, vocab 32, bf16
TINY = ModelSpec(name="tiny", hidden_size=8, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=2,
                 intermediate_size=16, vocab_size=32, max_model_len=64, tie_embeddings=False)
TINY_MOE = ModelSpec(name="tiny-moe", hidden_size=8, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=2,
                     intermediate_size=16, vocab_size=32, max_model_len=64, tie_embeddings=False,
                     num_experts=4, experts_per_token=2, moe_intermediate_size=6)


def test_gemms_shard_weights_and_heads_not_tokens():
    # qkv at tp2: 2 q heads + 1 KV head each for k and v -> width (2 + 2) * 2 = 8
    # bytes 2 * (3*8 input + 8*8 weight + 3*8 output) = 224; flops 2 * 3 * 8 * 8 = 384
    assert dense_work(TINY, "qkv_proj", 3, 2) == Work(224.0, 384.0)
    # o_proj at tp2: [3, 4] @ [4, 8]: 2 * (12 + 32 + 24) = 136 bytes, 2*3*4*8 = 192 flops
    assert dense_work(TINY, "o_proj", 3, 2) == Work(136.0, 192.0)
    # gate_up at tp1: [1, 8] @ [8, 32]: 2 * (8 + 256 + 32) = 592 bytes, 512 flops; tp2 halves N
    assert dense_work(TINY, "gate_up_proj", 1, 1) == Work(592.0, 512.0)
    assert dense_work(TINY, "gate_up_proj", 1, 2) == Work(2 * (8 + 128 + 16), 256.0)
    assert dense_work(TINY, "down_proj", 2, 4) == Work(2 * (2 * 4 + 4 * 8 + 2 * 8), 2.0 * 2 * 4 * 8)
    # lm_head at tp2 for 2 sequences: [2, 8] @ [8, 16]
    assert per_sequence_work(TINY, "lm_head", 2, 2) == Work(2 * (16 + 128 + 32), 2.0 * 2 * 8 * 16)


def test_kv_heads_replicate_past_tp():
    # tp4 > 2 KV heads: each rank keeps 1 KV head (q: 1 head) -> qkv width (1 + 2) * 2 = 6
    assert dense_work(TINY, "qkv_proj", 1, 4) == Work(2 * (8 + 48 + 6), 2.0 * 8 * 6)
    assert attention_work(TINY, 0, 0, 1, 10, 4).bytes == 2 * 2 * (2 * 1 + 2 * 1 * 10 + 2 * 1)


def test_attention_counts_q_kv_and_output():
    # 2 decodes over 10 tokens at tp2 (hq 2, hkv 1, d 2): flops 4*2*2*(2*10) = 320;
    # bytes 2*2*(2*2*2 q+out + 2*1*20 KV read + 2*1*2 KV write) = 208
    assert attention_work(TINY, 0, 0, 2, 10, 2) == Work(208.0, 320.0)
    # a causal chunk of 4 after 6 cached tokens at tp1 (hq 4, hkv 2):
    # flops 4*2*4*(4*(6 + 2.5)) = 1088; bytes 2*2*(2*4*4 + 2*2*10 + 2*2*4) = 352
    assert attention_work(TINY, 4, 6, 0, 0, 1) == Work(352.0, 1088.0)


def test_unsharded_ops_do_the_same_work_at_every_tp():
    for op in ("layernorm", "final_layernorm", "embedding"):
        assert dense_work(TINY, op, 5, 1) == dense_work(TINY, op, 5, 4)
    assert per_sequence_work(TINY, "sampler", 3, 1) == per_sequence_work(TINY, "sampler", 3, 2)
    # layernorm: x and residual in and out + the weight: 2 * (4*5*8 + 8) = 336 bytes
    assert dense_work(TINY, "layernorm", 5, 2) == Work(336.0, 200.0)


def test_moe_reads_each_activated_expert_once():
    # 3 tokens, 2 activated experts, tp2 (expert width 3): router [3,8]@[8,4] = 2*(24+32+12)
    # = 136 B, 192 flops; experts 2 * 2 * 3*8*3 = 288 B; acts 2*3*2*(8+9+8) = 300 B; out 2*3*8 = 48 B
    w = moe_work(TINY_MOE, 3, 2, 2)
    assert w == Work(136.0 + 288.0 + 300.0 + 48.0, 192.0 + 2.0 * 3 * 2 * 3 * 8 * 3)


def test_unknown_op_and_bad_tp_are_refused():
    with pytest.raises(KeyError):
        dense_work(TINY, "conv2d", 1, 1)
    with pytest.raises(ValueError):
        dense_work(TINY, "o_proj", 1, 0)


def test_roofline_time_and_fit():
    r = Roofline(bandwidth_gbs=1000.0, tflops=1.0, launch_us=2.0)
    assert r.time_us(Work(2e6, 5e5)) == 4.0         # 2 + max(2e6 B / 1e6 B/µs, 5e5 / 1e6 FLOP/µs)
    assert r.time_us(Work(1e5, 3e6)) == 5.0         # compute-bound: 2 + 3
    truth = Roofline(bandwidth_gbs=500.0, tflops=250.0, launch_us=3.0)
    works = [Work(b, f) for b in (1e5, 1e6, 1e7, 1e8) for f in (1e6, 1e8, 1e10, 1e11)]
    fit = fit_roofline(works, [truth.time_us(w) for w in works], 1000.0, 1000.0)
    assert fit.bandwidth_gbs == pytest.approx(500.0, rel=0.02)
    assert fit.tflops == pytest.approx(250.0, rel=0.02)
    assert fit.launch_us == pytest.approx(3.0, abs=0.1)
    assert fit == fit_roofline(works, [truth.time_us(w) for w in works], 1000.0, 1000.0)   # deterministic


def _fit_exhaustive(works, times, bw, tf, weights=None):
    """fit_roofline as it was before its SSE screening (commit ec4ebc8): every one of the
    25 x 25 x 25 grid points of every round evaluated in full. The reference the fast fit must
    equal bit for bit."""
    import numpy as np
    B = np.array([w.bytes for w in works], dtype=float)
    F = np.array([w.flops for w in works], dtype=float)
    t = np.array(times, dtype=float)
    logt = np.log(t)
    wt = np.ones_like(t) if weights is None else np.asarray(weights, dtype=float)
    lo_l, hi_l, lo_b, hi_b, lo_f, hi_f = 0.0, float(t.min()) * 0.999, math.log(0.01), 0.0, math.log(0.01), 0.0
    best = None
    for _round in range(4):
        eb, ef, ls = np.linspace(lo_b, hi_b, 25), np.linspace(lo_f, hi_f, 25), np.linspace(lo_l, hi_l, 25)
        mem = B[None, :] / (bw * 1e3 * np.exp(eb)[:, None])
        cmp_ = F[None, :] / (tf * 1e6 * np.exp(ef)[:, None])
        roof = np.maximum(mem[:, None, :], cmp_[None, :, :])
        for li, L in enumerate(ls):
            err = np.log(roof + L) - logt
            sse = np.einsum("ijn,ijn,n->ij", err, err, wt)
            i, j = np.unravel_index(int(np.argmin(sse)), sse.shape)
            if best is None or sse[i, j] < best[0]:
                best = (float(sse[i, j]), float(eb[i]), float(ef[j]), float(L), li)
        _, b0, f0, l0, _ = best
        db, df, dl = (hi_b - lo_b) / 12, (hi_f - lo_f) / 12, (hi_l - lo_l) / 12
        lo_b, hi_b = max(b0 - db, math.log(0.01)), min(b0 + db, 0.0)
        lo_f, hi_f = max(f0 - df, math.log(0.01)), min(f0 + df, 0.0)
        lo_l, hi_l = max(l0 - dl, 0.0), min(l0 + dl, float(t.min()) * 0.999)
    _, b0, f0, l0, _ = best
    return Roofline(bw * math.exp(b0), tf * math.exp(f0), l0)


def test_fit_pins_the_grid_corners_exactly():
    # Measured faster than the datasheet roofline (2 µs for 1e7 B at 1000 GB/s = 10 µs; 1 µs for
    # 1e10 FLOP at 1000 TFLOP/s = 10 µs): every prediction is already too slow, so the best point
    # is 100 % bandwidth, 100 % compute, no launch. The grids end exactly on log(1) = 0 and launch
    # 0 in every round, so the fit is exactly the peaks: exp(0.0) = 1.
    fast = [Work(1e7, 1.0), Work(1.0, 1e10)]
    assert fit_roofline(fast, [2.0, 1.0], 1000.0, 1000.0) == Roofline(1000.0, 1000.0, 0.0)
    # Memory-bound rows 1e4 times slower than peak (1e6 B: peak 1 µs, measured 1e4 µs; launch is
    # capped at 0.999 * 1e4): 1 % bandwidth (log(0.01), the grid's start, every round) gives 100 µs,
    # still too fast, so bandwidth sits at its floor and launch at its cap; no FLOPs, so compute
    # never binds and the first compute point (1 %) wins the tie.
    slow = [Work(1e6, 0.0), Work(2e6, 0.0)]
    fit = fit_roofline(slow, [1e4, 2e4], 1000.0, 1000.0)
    assert fit == Roofline(1000.0 * math.exp(math.log(0.01)), 1000.0 * math.exp(math.log(0.01)), 1e4 * 0.999)
    assert fit == _fit_exhaustive(slow, [1e4, 2e4], 1000.0, 1000.0)


def test_fit_equals_the_exhaustive_grid_on_the_recovery_case():
    truth = Roofline(bandwidth_gbs=500.0, tflops=250.0, launch_us=3.0)
    works = [Work(b, f) for b in (1e5, 1e6, 1e7, 1e8) for f in (1e6, 1e8, 1e10, 1e11)]
    times = [truth.time_us(w) for w in works]
    assert fit_roofline(works, times, 1000.0, 1000.0) == _fit_exhaustive(works, times, 1000.0, 1000.0)


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(st.sampled_from([0.0, 1e3, 1e5, 3e6, 1e8]), st.sampled_from([0.0, 1e4, 1e7, 5e9, 1e11]),
                               st.floats(0.5, 5e3), st.sampled_from([0.0, 0.25, 1.0, 3.0])),
                     min_size=1, max_size=30),
       bw=st.sampled_from([100.0, 1000.0, 8000.0]), tf=st.sampled_from([10.0, 400.0, 2250.0]))
def test_fit_is_bit_identical_to_the_exhaustive_grid(rows, bw, tf):
    # duplicate rows, zero FLOPs or bytes, zero weights and exact ties all go through the screen
    rows = [r for r in rows if r[0] + r[1] > 0] or [(1e3, 0.0, 1.0, 1.0)]
    works = [Work(b, f) for b, f, _, _ in rows]
    times = [t for _, _, t, _ in rows]
    weights = [w for *_, w in rows]
    if not any(weights):
        weights[0] = 1.0
    assert fit_roofline(works, times, bw, tf, weights) == _fit_exhaustive(works, times, bw, tf, weights)
    assert fit_roofline(works, times, bw, tf) == _fit_exhaustive(works, times, bw, tf)


SHARDED_DENSE = sorted(DENSE_OPS - UNSHARDED)


@settings(max_examples=200, deadline=None)
@given(op=st.sampled_from(SHARDED_DENSE + ["lm_head", "attention", "moe"]),
       size=st.integers(1, 1 << 16), ctx=st.integers(0, 1 << 15),
       t_m=st.floats(0.01, 1e6), bw=st.floats(10.0, 1e4), tf=st.floats(1.0, 3e3),
       launch=st.floats(0.0, 50.0), kv_heads=st.sampled_from([1, 2, 4, 8]))
def test_derived_times_are_positive_and_non_increasing_in_tp(op, size, ctx, t_m, bw, tf, launch, kv_heads):
    model = ModelSpec(name="m", hidden_size=1024, num_layers=4, num_heads=16, num_kv_heads=kv_heads,
                      head_dim=64, intermediate_size=4096, vocab_size=32000, max_model_len=1 << 16,
                      tie_embeddings=False, num_experts=8, experts_per_token=2, moe_intermediate_size=512)
    roof = Roofline(bw, tf, launch)

    def work(tp):
        if op == "lm_head":
            return per_sequence_work(model, op, min(size, 256), tp)
        if op == "attention":
            return attention_work(model, size, ctx, min(size, 256), ctx, tp)
        if op == "moe":
            return moe_work(model, size, min(8, 2 * size), tp)
        return dense_work(model, op, size, tp)
    times = [scaled_time(t_m, roof, work(1), work(k)) for k in (1, 2, 4, 8, 16)]
    assert times[0] == pytest.approx(t_m)
    assert all(t > 0 and math.isfinite(t) for t in times)
    assert all(b <= a * (1 + 1e-12) for a, b in zip(times, times[1:]))


def test_dense_ops_are_the_layer_order_of_each_architecture():
    """op_cost.dense_ops is the one op list the profiler and the synthesis write (layer order)."""
    from llmservingsim.model_config import load_model
    from llmservingsim.op_cost import PER_SEQUENCE_OPS, dense_ops
    assert dense_ops(load_model("meta-llama/Llama-3.1-8B")) == (
        "embedding", "layernorm", "qkv_proj", "rotary_emb", "o_proj", "gate_up_proj", "act_fn", "down_proj",
        "final_layernorm")
    assert dense_ops(load_model("Qwen/Qwen3-32B")) == (
        "embedding", "layernorm", "qkv_proj", "qk_norm", "rotary_emb", "o_proj", "gate_up_proj", "act_fn",
        "down_proj", "final_layernorm")
    assert dense_ops(load_model("Qwen/Qwen3-30B-A3B-Instruct-2507")) == (      # no dense MLP
        "embedding", "layernorm", "qkv_proj", "qk_norm", "rotary_emb", "o_proj", "final_layernorm")
    assert PER_SEQUENCE_OPS == ("lm_head", "sampler") and set(dense_ops(load_model("meta-llama/Llama-3.1-8B"))) < DENSE_OPS


def test_every_measured_bundle_holds_exactly_its_dense_ops():
    import csv

    from llmservingsim.model_config import load_model
    from llmservingsim.op_cost import PER_SEQUENCE_OPS, dense_ops
    from llmservingsim.paths import profiles_dir
    from llmservingsim.profiles import measured_tps
    seen = 0
    for base in sorted(profiles_dir().glob("*/*/*/bf16")):
        model = load_model(f"{base.parts[-3]}/{base.parts[-2]}")
        for tp in measured_tps(base):
            with open(base / f"tp{tp}" / "dense.csv", newline="") as f:
                assert {r["layer"] for r in csv.DictReader(f)} == set(dense_ops(model)), base
            with open(base / f"tp{tp}" / "per_sequence.csv", newline="") as f:
                assert {r["layer"] for r in csv.DictReader(f)} == set(PER_SEQUENCE_OPS), base
            seen += 1
    assert seen == 11
