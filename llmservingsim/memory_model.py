"""How many KV blocks an instance gets (vLLM 0.19 ``determine_available_memory``).

    available = device_memory * gpu_memory_utilization
                - weights - activation peak of the profiling run - non-torch memory
    num_blocks = available // (block_size * KV bytes per token per rank)

vLLM measures the last two with a dummy forward pass of ``max_num_batched_tokens`` tokens
(and a dummy sampler pass over ``max_num_seqs`` sequences); we estimate them from the
architecture (documented below). ``kv_pool_tokens`` in the config overrides all of this
(vLLM's ``num_gpu_blocks_override``; best taken from a real server log).
"""
from __future__ import annotations

from dataclasses import dataclass

from .model_config import ModelSpec

GIB = 1 << 30
MIB = 1 << 20

# Memory that is not allocated through torch's caching allocator but grows during the
# profiling run: cuBLAS/cuBLASLt workspaces and CUDA graph pools of the warm-up (the
# baseline CUDA context is excluded by vLLM's measurement). 512 MiB is the order of what
# vLLM 0.19 logs as "non-torch memory" on a single GPU.
NON_TORCH_BASE_BYTES = 512 * MIB
# NCCL communicators for tensor parallelism add their buffers (NCCL_BUFFSIZE 4 MiB per
# channel and peer, up to 32 channels on PCIe/NVLink rings): about 256 MiB per rank.
NON_TORCH_NCCL_BYTES = 256 * MIB


@dataclass(frozen=True)
class MemoryPlan:
    device_bytes: int
    utilization: float
    weight_bytes: int
    activation_bytes: int
    non_torch_bytes: int
    kv_bytes: int
    kv_bytes_per_token: int
    block_size: int
    num_blocks: int              # including vLLM's reserved null block

    @property
    def kv_pool_tokens(self) -> int:
        return (self.num_blocks - 1) * self.block_size

    def describe(self) -> str:
        g = lambda b: f"{b / GIB:.2f} GiB"
        return (f"device {g(self.device_bytes)} x {self.utilization} - weights {g(self.weight_bytes)} - "
                f"activations {g(self.activation_bytes)} - non-torch {g(self.non_torch_bytes)} = "
                f"KV {g(self.kv_bytes)} -> {self.kv_pool_tokens} tokens")


def activation_peak_bytes(model: ModelSpec, tp: int, max_num_batched_tokens: int, max_num_seqs: int) -> int:
    """Peak of the profiling forward pass: within one layer, the residual stream, the norm
    output and the attention output (3 x hidden), the fused QKV output, and the MLP's
    gate_up output plus the activation output (3 x intermediate / tp; for MoE the routed
    tokens' expert intermediate, top-k of them), all in the model dtype; then the sampler
    pass over max_num_seqs sequences keeps fp32 logits and probabilities (2 x vocab x 4 B)."""
    T = max_num_batched_tokens
    d = model.dtype_bytes
    qkv = (model.num_heads + 2 * model.num_kv_heads) * model.head_dim // tp
    if model.is_moe:
        mlp = 3 * model.moe_intermediate_size * model.experts_per_token // tp
    else:
        mlp = 3 * model.intermediate_size // tp
    layer = T * (3 * model.hidden_size + qkv + mlp) * d
    sampler = max_num_seqs * model.vocab_size * 4 * 2
    return layer + sampler


def plan_memory(model: ModelSpec, device_memory_gib: float, tp: int, pp: int, block_size: int,
                gpu_memory_utilization: float, max_num_batched_tokens: int, max_num_seqs: int,
                kv_pool_tokens: int | None = None) -> MemoryPlan:
    per_token = model.kv_bytes_per_token(tp, pp)
    device = int(device_memory_gib * GIB)
    weights = model.weight_bytes_per_rank(tp, pp)
    act = activation_peak_bytes(model, tp, max_num_batched_tokens, max_num_seqs)
    non_torch = NON_TORCH_BASE_BYTES + (NON_TORCH_NCCL_BYTES if tp * pp > 1 else 0)
    if kv_pool_tokens is not None:
        num_blocks = kv_pool_tokens // block_size + 1
        kv = (num_blocks - 1) * block_size * per_token
    else:
        kv = int(device * gpu_memory_utilization) - weights - act - non_torch
        num_blocks = max(kv // (block_size * per_token), 0)
    return MemoryPlan(device, gpu_memory_utilization, weights, act, non_torch, max(kv, 0), per_token,
                      block_size, int(num_blocks))
