"""vLLM 0.19's KV-pool accounting, term by term, against hand computations from the model
config and against the public anchors of docs/memory-model.md."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from llmservingsim.hardware import load_device
from llmservingsim.memory_model import (GIB, MIB, NON_TORCH_BASE_BYTES, activation_peak_bytes,
                                        forward_peak_bytes, moe_workspace_bytes, non_torch_bytes,
                                        plan_memory, sampler_peak_bytes, weight_bytes)
from llmservingsim.model_config import load_model

L8 = load_model("meta-llama/Llama-3.1-8B")
L70 = load_model("meta-llama/Llama-3.1-70B")
Q30 = load_model("Qwen/Qwen3-30B-A3B-Instruct-2507")
Q32 = load_model("Qwen/Qwen3-32B")


def test_weights_llama_8b_tp1_is_the_parameter_count_plus_the_rope_cache():
    per_layer = 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096 + 3 * 4096 * 14336 + 2 * 4096
    params = 32 * per_layer + 2 * 128256 * 4096 + 4096
    assert params == 8_030_261_248                     # Llama-3.1-8B's published size
    rope = 131072 * 128                                # max_position x head_dim, bf16
    assert weight_bytes(L8, 1) == (params + rope) * 2 == 16_094_076_928
    assert round(weight_bytes(L8, 1) / GIB, 2) == 14.99   # vLLM 0.19: "Model loading took 14.99 GiB"


def test_weights_llama_8b_tp2_shard_heads_widths_and_vocabulary():
    attn = 4096 * (16 * 128 + 2 * 4 * 128) + 16 * 128 * 4096
    per_layer = attn + 3 * 4096 * 7168 + 2 * 4096
    per_rank = 32 * per_layer + 2 * 64128 * 4096 + 4096
    assert weight_bytes(L8, 2) == (per_rank + 131072 * 128) * 2 == 8_064_081_920
    assert round(weight_bytes(L8, 2) / GIB, 2) == 7.51    # logged at TP2


def test_weights_kv_heads_fewer_than_ranks_are_replicated():
    # Llama-3.1-70B has 8 KV heads: at TP 16 each rank keeps one
    per_layer_kv = 2 * 8192 * max(8 // 16, 1) * 128
    q = 64 // 16 * 128
    per_layer = 8192 * q + per_layer_kv + q * 8192 + 3 * 8192 * (28672 // 16) + 2 * 8192
    per_rank = 80 * per_layer + 2 * (128256 // 16) * 8192 + 8192
    assert weight_bytes(L70, 16) == (per_rank + 131072 * 128) * 2


def test_weights_qwen3_counts_the_qk_norms():
    assert Q32.qk_norm and not L8.qk_norm
    with_norms = weight_bytes(Q32, 1)
    assert with_norms - weight_bytes(load_model("Qwen/Qwen3-32B"), 1) == 0
    q, kv = 64 * 128, 8 * 128
    per_layer = 5120 * (q + 2 * kv) + q * 5120 + 3 * 5120 * 25600 + 2 * 5120 + 2 * 128
    per_rank = 64 * per_layer + 151936 * 5120 * 2 + 5120       # untied head
    assert with_norms == (per_rank + 40960 * 128) * 2


def test_sampler_peak_llama_8b_h100_default_batch():
    # 8192 tokens, 1024 requests, 132 SMs: hidden states + 14 B per logit + Triton buffer of
    # min(next_pow2(min(132, 1024)), 132) = 132 rows + 35 MiB
    expect = 8192 * 4096 * 2 + 14 * 1024 * 128256 + 4 * 132 * 128256 + 35 * MIB
    assert sampler_peak_bytes(L8, 8192, 1024, 132) == expect == 2_010_206_208
    assert abs(expect / GIB - 1.89) < 0.03                     # logged torch peak increase


def test_sampler_triton_buffer_rows_and_the_small_batch_path():
    # 128 requests on 188 SMs: 128 programs -> 128 rows; under 8 requests no Triton buffer
    assert sampler_peak_bytes(L8, 2048, 128, 188) == 2048 * 4096 * 2 + 14 * 128 * 128256 + 4 * 128 * 128256 + 35 * MIB
    assert sampler_peak_bytes(L8, 4, 4, 188) == 4 * 4096 * 2 + 14 * 4 * 128256 + 35 * MIB
    # 100 requests: next power of two 128, capped by 120 SMs
    assert sampler_peak_bytes(L8, 100, 100, 120) == 100 * 4096 * 2 + 14 * 100 * 128256 + 4 * 120 * 128256 + 35 * MIB


def test_forward_peak_is_the_mlp_and_residual_working_set():
    # 70B at TP2, 16384 tokens: 3 x 14336 (gate_up + activation) + 2 x 8192 + 32 heads x 128
    assert forward_peak_bytes(L70, 2, 16384) == 16384 * (3 * 14336 + 2 * 8192 + 32 * 128) * 2 == 2_080_374_784


def test_moe_workspace_qwen3_30b():
    assert moe_workspace_bytes(Q30, 1, 8192) == 8192 * 8 * (3 * 768 + 2048) * 2 == 570_425_344
    assert moe_workspace_bytes(L8, 1, 8192) == 0
    assert forward_peak_bytes(Q30, 1, 8192) == 8192 * (2 * 2048 + 32 * 128) * 2   # no dense MLP


def test_activation_peak_is_the_larger_of_forward_and_sampler_plus_moe_workspace():
    # small batch of requests, many tokens: the forward sets the peak
    assert activation_peak_bytes(L70, 2, 16384, 128, 188) == forward_peak_bytes(L70, 2, 16384)
    # default serve batch: the sampler does
    assert activation_peak_bytes(L8, 1, 8192, 1024, 132) == sampler_peak_bytes(L8, 8192, 1024, 132)
    # requests are min(tokens, max_num_seqs)
    assert activation_peak_bytes(L8, 1, 64, 1024, 132) == max(forward_peak_bytes(L8, 1, 64),
                                                               sampler_peak_bytes(L8, 64, 64, 132))
    assert activation_peak_bytes(Q30, 1, 8192, 1024, 132) == (sampler_peak_bytes(Q30, 8192, 1024, 132)
                                                               + moe_workspace_bytes(Q30, 1, 8192))
    # a non-last pipeline stage runs no sampler
    assert activation_peak_bytes(L8, 1, 8192, 1024, 132, last_stage=False) == forward_peak_bytes(L8, 1, 8192)


def test_non_torch_memory_base_and_communicators():
    assert non_torch_bytes(1, 5 * GIB) == NON_TORCH_BASE_BYTES == round(0.25 * GIB)
    assert non_torch_bytes(2, 123) == NON_TORCH_BASE_BYTES + 123


def test_plan_for_the_rtx_pro_6000_70b_tp2_anchor_by_hand():
    dev = load_device("RTXPRO6000")
    plan = plan_memory(L70, dev, 2, 1, 16, 0.9, 16384, 128)
    requested = math.ceil(97250 * MIB * 0.9)
    kv = requested - weight_bytes(L70, 2) - forward_peak_bytes(L70, 2, 16384) - (round(0.25 * GIB) + round(0.018 * GIB))
    page = 2 * 16 * 4 * 128 * 2 * 80                         # K+V x block x kv heads/rank x head_dim x bf16 x layers
    assert plan.requested_bytes == requested
    assert plan.num_blocks == kv // page == 7179
    assert plan.gpu_kv_cache_tokens == 7179 * 16 == 114_864    # the paper reports 114,768 (+0.08 %)
    assert plan.kv_pool_tokens == 7178 * 16                    # the null block is not usable
    assert plan.breakdown()["num_gpu_blocks"] == 7179 and not plan.breakdown()["overridden"]


def test_kv_pool_override_is_vllms_num_gpu_blocks_override():
    plan = plan_memory(L8, load_device("RTXPRO6000"), 1, 1, 16, 0.9, 2048, 128, kv_pool_tokens=1000)
    assert plan.overridden and plan.kv_pool_tokens == 992 and plan.num_blocks == 63
    assert "override" in plan.describe()


# Public vLLM 0.19.0 logs (docs/memory-model.md): device, model, TP, utilization, batched
# tokens, max seqs, logged "GPU KV cache size" tokens.
ANCHORS = [
    ("H100", "meta-llama/Llama-3.1-8B", 1, 0.95, 8192, 1024, 476_016),
    ("H100", "meta-llama/Llama-3.1-8B", 2, 0.95, 8192, 1024, 1_044_688),
    ("H100", "meta-llama/Llama-3.1-8B", 4, 0.95, 8192, 1024, 2_209_792),
    ("H100", "Qwen/Qwen3-30B-A3B-Instruct-2507", 1, 0.95, 8192, 1024, 168_288),
    ("RTXPRO6000", "meta-llama/Llama-3.1-70B", 2, 0.9, 16384, 128, 114_768),
]


@pytest.mark.parametrize("device,model,tp,util,tokens,seqs,logged", ANCHORS)
def test_public_anchors_within_one_percent(device, model, tp, util, tokens, seqs, logged):
    plan = plan_memory(load_model(model), load_device(device), tp, 1, 16, util, tokens, seqs)
    assert abs(plan.gpu_kv_cache_tokens / logged - 1) < 0.01


@settings(max_examples=60, deadline=None)
@given(util=st.floats(0.5, 0.95), seqs=st.integers(1, 1024), tokens=st.integers(16, 16384),
       tp=st.sampled_from([1, 2, 4]))
def test_budget_balances_and_is_monotone(util, seqs, tokens, tp):
    dev = load_device("H100")
    plan = plan_memory(L8, dev, tp, 1, 16, util, tokens, seqs)
    # every byte of the request is accounted for, and the pool holds whole blocks of it
    assert plan.requested_bytes == plan.weight_bytes + plan.activation_bytes + plan.non_torch_bytes + plan.kv_bytes
    assert plan.num_blocks * 16 * plan.kv_bytes_per_token <= plan.kv_bytes
    assert (plan.num_blocks + 1) * 16 * plan.kv_bytes_per_token > plan.kv_bytes
    # more utilization never shrinks the pool; a bigger profile batch never grows it
    assert plan_memory(L8, dev, tp, 1, 16, min(util + 0.02, 0.97), tokens, seqs).num_blocks >= plan.num_blocks
    assert plan_memory(L8, dev, tp, 1, 16, util, tokens * 2, seqs).num_blocks <= plan.num_blocks


def test_forward_bound_anchor_codellama_7b(tmp_path):
    """A 32k vocabulary makes the forward pass set the peak (vLLM 0.19.0, H100, logged
    "GPU KV cache size: 126,256 tokens", torch peak 0.77 GiB)."""
    cfg = tmp_path / "config.json"
    cfg.write_text('{"hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32, '
                   '"num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32016, '
                   '"max_position_embeddings": 16384, "model_type": "llama", "torch_dtype": "bfloat16"}')
    m = load_model(str(cfg))
    dev = load_device("H100")
    assert activation_peak_bytes(m, 1, 8192, 1024, dev.sm_count) == forward_peak_bytes(m, 1, 8192)
    plan = plan_memory(m, dev, 1, 1, 16, 0.95, 8192, 1024)
    assert abs(plan.gpu_kv_cache_tokens / 126_256 - 1) < 0.01
