"""``agentservesim profile measure`` on mixture-of-experts models: moe.csv on the shipped
grid, the balanced routing it measures, the layer's arithmetic, and a CPU measurement of a
tiny MoE model that ``agentservesim run`` accepts (docs/profiler.md)."""
from __future__ import annotations

import csv
import json

import pytest
import torch
import torch.nn.functional as F
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from llmservingsim.errors import ConfigError
from llmservingsim.measure.grids import FULL, TINY
from llmservingsim.measure.moe import MoELayer, balanced_assignment
from llmservingsim.measure.ops import RankShapes
from llmservingsim.model_config import load_model
from llmservingsim.paths import profiles_dir

SHIPPED_MOE = profiles_dir() / "RTXPRO6000" / "Qwen" / "Qwen3-30B-A3B-Instruct-2507" / "bf16" / "tp1" / "moe.csv"
# A 2-layer Qwen3-MoE-shaped model: hidden 256, 4 query / 2 KV heads of 64, 8 experts of width
# 128, 2 per token.
TINY_MOE = {"_name_or_path": "test/TinyMoE-2L", "model_type": "qwen3_moe", "hidden_size": 256,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
            "intermediate_size": 512, "moe_intermediate_size": 128, "num_experts": 8,
            "num_experts_per_tok": 2, "vocab_size": 1024, "max_position_embeddings": 131072,
            "torch_dtype": "bfloat16"}
QWEN3_MOE_DENSE_OPS = ["embedding", "layernorm", "qkv_proj", "qk_norm", "rotary_emb", "o_proj", "final_layernorm"]


def _rows(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_full_moe_grid_is_the_shipped_moe_csv_grid():
    """Qwen3-30B-A3B (128 experts, 8 per token): the 50 (tokens, experts) points of the shipped
    measured tp1 moe.csv, in its order."""
    m = load_model("Qwen/Qwen3-30B-A3B-Instruct-2507")
    shipped = [(int(r["tokens"]), int(r["activated_experts"])) for r in _rows(SHIPPED_MOE)]
    assert FULL.moe_points(m.num_experts, m.experts_per_token) == shipped and len(shipped) == 50


def test_moe_grid_of_other_expert_counts():
    # Phi-mini-MoE: 16 experts, 2 per token: axis 2, 4, 8, 16; 1 + 2 + 3 + 4 x 9 points
    phi = load_model("microsoft/Phi-mini-MoE-instruct")
    pts = FULL.moe_points(phi.num_experts, phi.experts_per_token)
    assert pts[:10] == [(1, 2), (2, 2), (2, 4), (4, 2), (4, 4), (4, 8), (8, 2), (8, 4), (8, 8), (8, 16)]
    assert len(pts) == 42
    # E not k * 2^j (60 experts, 6 per token): axis 6, 12, 24, 48, 60; the tiny token axis
    # (1..8) is extended to 16 so the largest token count reaches all 60 (the loader needs it)
    pts = TINY.moe_points(60, 6)
    assert [a for t, a in pts if t == 16] == [6, 12, 24, 48, 60]
    assert [a for t, a in pts if t == 8] == [6, 12, 24, 48]
    assert max(t for t, _ in pts) == 16


@pytest.fixture(scope="module")
def tiny_moe_cfg(tmp_path_factory):
    cfg = tmp_path_factory.mktemp("tiny-moe") / "tiny-moe.json"
    cfg.write_text(json.dumps(TINY_MOE))
    return cfg


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 64), st.integers(1, 8), st.data())
def test_balanced_assignment_activates_exactly_a_experts_evenly(tokens, k, data):
    a = data.draw(st.integers(k, min(tokens * k, 96)))
    ids = balanced_assignment(tokens, a, k)
    assert tuple(ids.shape) == (tokens, k)
    assert set(ids.reshape(-1).tolist()) == set(range(a))                 # exactly A experts
    assert all(len(set(row)) == k for row in ids.tolist())               # k distinct per token
    counts = torch.bincount(ids.reshape(-1), minlength=a)
    assert int(counts.max() - counts.min()) <= 1 and int(counts.sum()) == tokens * k


@pytest.mark.parametrize("tokens, a, k", [(1, 3, 2), (2, 5, 2), (3, 1, 2)])
def test_balanced_assignment_refuses_unreachable_points(tokens, a, k):
    with pytest.raises(ValueError):
        balanced_assignment(tokens, a, k)


@pytest.mark.parametrize("grouped", [True, False], ids=["grouped_mm", "mm-per-expert"])
@pytest.mark.parametrize("tokens, a", [(1, 2), (3, 4), (5, 8), (8, 8)])
def test_moe_layer_computes_the_routed_experts(tiny_moe_cfg, grouped, tokens, a):
    """Output = sum over each token's k experts of (renormalised top-k weight) x expert MLP, the
    experts those of the balanced assignment; reference in fp32 token by token."""
    torch.manual_seed(0)
    s = RankShapes.of(load_model(str(tiny_moe_cfg)), 1)
    layer = MoELayer(s, torch.device("cpu"), grouped=grouped)
    x = torch.randn(tokens, s.hidden, dtype=torch.bfloat16)
    out = layer(tokens, a, x=x)().float()
    w = torch.topk(torch.softmax(F.linear(x, layer.router).float(), -1), s.top_k, -1).values
    w = w / w.sum(-1, keepdim=True)
    ids = balanced_assignment(tokens, a, s.top_k)
    mi = s.moe_intermediate
    ref = torch.zeros(tokens, s.hidden)
    for t in range(tokens):
        for j in range(s.top_k):
            e = int(ids[t, j])
            g = x[t].float() @ layer.w13[e].float().t()
            ref[t] += w[t, j] * ((F.silu(g[:mi]) * g[mi:]) @ layer.w2[e].float().t())
    assert out.shape == ref.shape
    assert torch.allclose(out, ref, rtol=0.05, atol=0.03 * float(ref.abs().max()))


def test_expert_width_must_divide_by_tp(tmp_path):
    cfg = tmp_path / "odd.json"
    cfg.write_text(json.dumps(TINY_MOE | {"moe_intermediate_size": 130, "num_attention_heads": 4}))
    with pytest.raises(ConfigError) as e:
        RankShapes.of(load_model(str(cfg)), 4)
    assert "moe_intermediate_size 130" in str(e.value) and e.value.key == "--tp"


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """A tiny-grid CPU bundle of TINY_MOE at tp1 and tp2, under the RTX4090 device's name."""
    from program_layer.cli import main
    tmp = tmp_path_factory.mktemp("measure-moe")
    cfg = tmp / "tiny-moe.json"
    cfg.write_text(json.dumps(TINY_MOE))
    root = tmp / "profiles"
    for tp in ("1", "2"):
        assert main(["profile", "measure", "--model", str(cfg), "--tp", tp, "--device", "cpu", "--grid", "tiny",
                     "--hardware", "RTX4090", "--out", str(root)]) == 0
    return tmp, cfg, root


def test_cpu_moe_bundle_has_moe_csv_on_the_tiny_grid_and_loads(measured):
    from llmservingsim.profiles import load_bundle
    tmp, cfg, root = measured
    base = root / "RTX4090" / "test" / "TinyMoE-2L" / "bf16"
    dense = _rows(base / "tp1" / "dense.csv")
    # no dense MLP: 7 Qwen3-MoE ops x 6 token counts
    assert [r["layer"] for r in dense[::6]] == QWEN3_MOE_DENSE_OPS and len(dense) == 7 * 6
    moe = _rows(base / "tp1" / "moe.csv")
    # tokens 1, 2, 4, 8 x experts 2, 4, 8 reachable with 2 per token
    assert [(int(r["tokens"]), int(r["activated_experts"])) for r in moe] == [
        (1, 2), (2, 2), (2, 4), (4, 2), (4, 4), (4, 8), (8, 2), (8, 4), (8, 8)]
    assert all(float(r["time_us"]) > 0 for r in moe)
    bundle = load_bundle("RTX4090", "test/TinyMoE-2L", 1, root=root, cache=False)
    assert bundle.provenance == "measured" and bundle.moe is not None
    assert bundle.moe(8, 8) == pytest.approx(float(moe[-1]["time_us"]), rel=1e-12)
    meta = yaml.safe_load((base / "meta.yaml").read_text())
    assert meta["tp_degrees"] == [1, 2]
    rec1, rec2 = meta["measurements"][1], meta["measurements"][2]
    assert rec1["rank_shapes"]["experts"] == 8 and rec1["rank_shapes"]["experts_per_token"] == 2
    assert (rec1["rank_shapes"]["expert_intermediate"], rec2["rank_shapes"]["expert_intermediate"]) == (128, 64)
    assert "intermediate" not in rec1["rank_shapes"]
    assert rec1["moe"]["grouped_gemm"] == "torch._grouped_mm"        # torch 2.14 runs it on CPU
    assert "mod activated_experts" in rec1["moe"]["routing"] and rec1["grid"]["moe_tokens"] == "1, 2, 4, 8"
    assert rec1["grid"]["moe_activated_experts"] == "2, 4, 8"
    assert any("expert load" in x for x in rec1["not_measured"])


def test_agentservesim_run_accepts_the_measured_moe_bundle(measured, run_on_bundle):
    tmp, cfg, root = measured
    summary = run_on_bundle(cfg, root, 2)
    assert summary["bundle"] == {"path": "RTX4090/test/TinyMoE-2L/bf16/tp2", "provenance": "measured"}
    assert summary["programs"] == 2
