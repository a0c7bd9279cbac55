"""How many KV blocks an instance gets: vLLM 0.19's accounting, term by term.

vLLM 0.19 (``v1/worker/gpu_worker.py`` ``init_device`` / ``determine_available_memory``,
``utils/mem_utils.py`` ``memory_profiling``, ``v1/core/kv_cache_utils.py``):

    requested = ceil(total * gpu_memory_utilization)         # total: cudaMemGetInfo, not nvidia-smi
    available = requested - (weights + torch_peak_increase + non_torch_increase)
    num_blocks = available // (page_size_per_layer * layers)  # the minimum over ranks

* The baseline snapshot is taken after the CUDA context and the communicators (NCCL,
  custom all-reduce) are created, so neither is charged to the budget: they live in the
  ``1 - gpu_memory_utilization`` headroom.
* ``weights`` is torch's allocation growth over ``load_model``: parameters per rank plus
  the rotary cos/sin cache ("Model loading took X GiB").
* ``torch_peak_increase`` is the allocation peak of ``profile_run`` over what was allocated
  before it: one dummy forward pass of ``max_num_batched_tokens`` tokens (split over
  ``min(tokens, max_num_seqs)`` dummy requests, attention skipped: no metadata) and one
  dummy sampler pass over the requests' last tokens. It is measured before the CUDA-graph
  memory profile, and vLLM 0.19 does not subtract the graph estimate
  (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` defaults to 0 until 0.20).
* ``non_torch_increase`` is device memory outside torch's allocator that appeared between
  the snapshot and the end of profiling (lazily loaded kernel modules, library workspaces,
  NCCL buffers allocated at the first collective).

Every term below is written as a function of the model config and the engine arguments,
with the measurement it was checked against (docs/memory-model.md: the anchors table).
``kv_pool_tokens`` in the config overrides all of this (vLLM's ``num_gpu_blocks_override``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .expert_parallel import MoEParallel
from .model_config import ModelSpec

GIB = 1 << 30
MIB = 1 << 20

# Non-torch memory of a single-GPU vLLM 0.19 worker: 0.25 GiB on every TP=1 H100 log of
# vLLM 0.19.0 (llm-d-planner accuracy/results/v0.19.0: Llama-3.1-8B bf16 and fp8, Qwen3-30B-A3B:
# 0.25, 0.25, 0.27 GiB; 0.13 GiB before vLLM 0.18).
NON_TORCH_BASE_BYTES = round(0.25 * GIB)
# The dummy sampler keeps, besides the logits, a few small tensors (per-request sampling
# parameters, Triton top-k/top-p tables, rand_like of the last hidden states): ~35 MiB on
# every vLLM 0.19.0 H100 log where the sampler sets the peak.
SAMPLER_FIXED_BYTES = 35 * MIB
# vLLM's Triton top-k/top-p kernel is used from 8 requests up (topk_topp_sampler.py).
TRITON_TOPK_MIN_REQS = 8


@dataclass(frozen=True)
class MemoryPlan:
    """One rank's memory budget (bytes). ``num_blocks`` includes vLLM's null block."""
    device_bytes: int            # cudaMemGetInfo total
    utilization: float
    requested_bytes: int
    weight_bytes: int
    activation_bytes: int        # torch_peak_increase of the profile run
    non_torch_bytes: int         # non_torch_increase
    kv_bytes: int
    kv_bytes_per_token: int
    block_size: int
    num_blocks: int
    overridden: bool = False     # kv_pool_tokens given: the accounting above is not used

    @property
    def kv_pool_tokens(self) -> int:
        return (self.num_blocks - 1) * self.block_size

    @property
    def gpu_kv_cache_tokens(self) -> int:
        """What vLLM logs as "GPU KV cache size: N tokens" (counts the null block)."""
        return self.num_blocks * self.block_size

    def breakdown(self) -> dict:
        """The accounting as a JSON-ready mapping (GiB to 4 decimals, tokens exact)."""
        g = lambda b: round(b / GIB, 4)
        return {"device_gib": g(self.device_bytes), "gpu_memory_utilization": self.utilization,
                "requested_gib": g(self.requested_bytes), "weights_gib": g(self.weight_bytes),
                "activation_peak_gib": g(self.activation_bytes), "non_torch_gib": g(self.non_torch_bytes),
                "kv_cache_gib": g(self.kv_bytes), "kv_bytes_per_token": self.kv_bytes_per_token,
                "num_gpu_blocks": self.num_blocks, "gpu_kv_cache_tokens": self.gpu_kv_cache_tokens,
                "kv_pool_tokens": self.kv_pool_tokens, "overridden": self.overridden}

    def describe(self) -> str:
        g = lambda b: f"{b / GIB:.2f} GiB"
        if self.overridden:
            return f"KV pool {self.kv_pool_tokens} tokens (kv_pool_tokens override)"
        return (f"{g(self.device_bytes)} x {self.utilization} = {g(self.requested_bytes)} - weights "
                f"{g(self.weight_bytes)} - activations {g(self.activation_bytes)} - non-torch "
                f"{g(self.non_torch_bytes)} = KV {g(self.kv_bytes)} -> {self.gpu_kv_cache_tokens} tokens "
                f"({self.num_blocks} blocks)")


def shard(n: int, tp: int) -> int:
    """Rows of a tensor-parallel shard (vLLM divides heads and widths evenly; KV heads
    fewer than ranks are replicated)."""
    return max(n // tp, 1)


def weight_bytes(model: ModelSpec, tp: int, pp: int = 1, dp: int = 1, ep: int = 1) -> int:
    """``model_memory_usage`` of the heaviest rank (the first pipeline stage, which holds
    the embedding; with pp = 1 also the head): parameters as vLLM shards them plus the
    rotary cos/sin cache (``RotaryEmbedding.cos_sin_cache``: max_position x head_dim in the
    model dtype, one shared instance). Checked: Llama-3.1-8B 14.99 / 7.51 / 3.77 GiB at
    TP 1 / 2 / 4 as logged by vLLM 0.19.0. With data parallelism a MoE model's experts span
    the server's dp x tp GPUs (``expert_parallel``): E / ep whole experts under expert
    parallelism, else all E at width / (dp x tp); the router and the dense parts stay per rank."""
    h, d = model.hidden_size, model.dtype_bytes
    q = shard(model.num_heads, tp) * model.head_dim
    kv = shard(model.num_kv_heads, tp) * model.head_dim
    attn = h * (q + 2 * kv) + q * h
    if model.is_moe:
        par = MoEParallel(dp, tp, ep)
        mlp = par.local_experts(model) * 3 * h * shard(model.moe_intermediate_size, par.moe_tp) + h * model.num_experts
    else:
        mlp = 3 * h * shard(model.intermediate_size, tp)
    norms = 2 * h + (2 * model.head_dim if model.qk_norm else 0)
    layers = -(-model.num_layers // pp)
    vocab = shard(model.vocab_size, tp) * h
    per_rank = layers * (attn + mlp + norms) + vocab
    if pp == 1:
        per_rank += (0 if model.tie_embeddings else vocab) + h
    rope = model.max_model_len * model.head_dim
    return (per_rank + rope) * d


def forward_peak_bytes(model: ModelSpec, tp: int, tokens: int) -> int:
    """Allocation peak of the dummy forward over ``tokens`` tokens (torch.compile'd layer,
    attention skipped): inside the MLP of a layer the gate_up output (2 x I/tp), the
    activation output (I/tp), the residual stream and the layer's hidden states (2 x H) and
    the previous attention output (q heads / tp x head_dim) are alive at once, in the model
    dtype. Mixture-of-experts layers are counted by :func:`moe_workspace_bytes`."""
    q = shard(model.num_heads, tp) * model.head_dim
    inter = 0 if model.is_moe else 3 * shard(model.intermediate_size, tp)
    return tokens * (inter + 2 * model.hidden_size + q) * model.dtype_bytes


def moe_workspace_bytes(model: ModelSpec, tp: int, tokens: int) -> int:
    """The fused-MoE kernel's intermediate caches for ``tokens`` tokens, which vLLM keeps
    across calls (``fused_moe`` workspace: top-k x (2I + I)/tp for gate_up and activation,
    top-k x H for the expert outputs). Qwen3-30B-A3B at 8192 tokens: 0.53 GiB (logged peak
    2.68 GiB = 2.15 sampler + 0.53)."""
    if not model.is_moe:
        return 0
    k = model.experts_per_token
    return tokens * k * (3 * shard(model.moe_intermediate_size, tp) + model.hidden_size) * model.dtype_bytes


def sampler_peak_bytes(model: ModelSpec, tokens: int, reqs: int, sm_count: int) -> int:
    """Allocation peak of the dummy sampler pass (vLLM 0.19 ``_dummy_sampler_run``: top-k =
    V-1, top-p 0.9, temperature 0.5 on ``reqs`` requests): the forward's hidden states
    (tokens x H) stay alive; logits in the model dtype (gathered to the full vocabulary
    under TP) plus their float32 copy, the float32 probabilities and the float32
    exponential draw (2 + 4 + 4 + 4 bytes per logit), and the Triton top-k/top-p kernel's
    float32 row buffer (min(next_pow2(min(SMs, reqs)), SMs) rows, kept across calls).
    Checked against every sampler-bound vLLM 0.19.0 H100 log to 0.03 GiB."""
    V = model.vocab_size
    rows = 0
    if reqs >= TRITON_TOPK_MIN_REQS:
        programs = min(sm_count, reqs)
        rows = min(1 << (programs - 1).bit_length(), sm_count)
    return (tokens * model.hidden_size * model.dtype_bytes + (2 + 4 + 4 + 4) * reqs * V + 4 * rows * V
            + SAMPLER_FIXED_BYTES)


def activation_peak_bytes(model: ModelSpec, tp: int, max_num_batched_tokens: int, max_num_seqs: int,
                          sm_count: int, last_stage: bool = True, dp: int = 1, ep: int = 1) -> int:
    """``torch_peak_increase`` of vLLM 0.19's ``profile_run``: the larger of the forward
    and the sampler peaks (the sampler runs on the last pipeline stage only), plus the
    fused-MoE workspace that persists through both. With dp > 1 the MoE layers see the
    gathered tokens of all dp ranks' dummy runs at the experts' width (an estimate: no
    data-parallel vLLM log has checked it)."""
    T = max_num_batched_tokens
    R = min(T, max_num_seqs)
    peak = forward_peak_bytes(model, tp, T)
    if last_stage:
        peak = max(peak, sampler_peak_bytes(model, T, R, sm_count))
    return peak + moe_workspace_bytes(model, MoEParallel(dp, tp, ep).moe_tp, dp * T)


def non_torch_bytes(tp_group: int, tp_non_torch_bytes: int) -> int:
    """``non_torch_increase``: the single-GPU base, plus, when the rank talks to others,
    the communicator buffers NCCL allocates at the first collective (a device property:
    NVLink SHARP buffers on NVSwitch systems, ring buffers on PCIe; hardware/<device>.yaml
    ``tp_non_torch_gib``)."""
    return NON_TORCH_BASE_BYTES + (tp_non_torch_bytes if tp_group > 1 else 0)


def plan_memory(model: ModelSpec, device, tp: int, pp: int, block_size: int,
                gpu_memory_utilization: float, max_num_batched_tokens: int, max_num_seqs: int,
                kv_pool_tokens: int | None = None, dp: int = 1, ep: int = 1) -> MemoryPlan:
    """The KV pool of one instance. ``device`` supplies ``cuda_memory_bytes``, ``sm_count``
    and ``tp_non_torch_bytes`` (hardware/<device>.yaml). Ranks are symmetric but for the
    pipeline's first stage (embedding) and last (head, sampler); vLLM takes the minimum
    over ranks, which is the first stage's weights with the last stage's sampler when pp > 1
    (both bounded above by the pp = 1 shapes here). With data parallelism (``dp``, ``ep``)
    this is one rank's pool: every rank holds its dense weights, its share of the experts
    and a KV pool of its own."""
    per_token = model.kv_bytes_per_token(tp, pp)
    total = device.cuda_memory_bytes
    requested = math.ceil(total * gpu_memory_utilization)
    weights = weight_bytes(model, tp, pp, dp, ep)
    act = activation_peak_bytes(model, tp, max_num_batched_tokens, max_num_seqs, device.sm_count, dp=dp, ep=ep)
    # a MoE rank talks to the other DP ranks at every layer; a dense model's DP ranks never do
    non_torch = non_torch_bytes(tp * pp * (dp if model.is_moe else 1), device.tp_non_torch_bytes)
    if kv_pool_tokens is not None:
        num_blocks = kv_pool_tokens // block_size + 1
        kv = (num_blocks - 1) * block_size * per_token
        return MemoryPlan(total, gpu_memory_utilization, requested, weights, act, non_torch, kv, per_token,
                          block_size, int(num_blocks), overridden=True)
    kv = requested - weights - act - non_torch
    num_blocks = max(kv // (block_size * per_token), 0)
    return MemoryPlan(total, gpu_memory_utilization, requested, weights, act, non_torch, max(kv, 0),
                      per_token, block_size, int(num_blocks))
