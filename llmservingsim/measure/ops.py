"""What each profiled op runs, at one rank's shard shapes (docs/profiler.md).

Op names and their per-rank shapes are those of the shipped bundles and of
``llmservingsim/op_cost.py``: under tensor parallelism TP = k one rank holds ``num_heads / k``
query heads, ``max(num_kv_heads // k, 1)`` KV heads, ``intermediate_size / k`` of the MLP and
``vocab_size / k`` (rounded up) of the embedding and LM head; the norms act on the full hidden
state and the sampler on the gathered full-vocabulary logits. No collective runs here: TP's
all-reduces come from the network model.

Every factory allocates its inputs and weights once (bf16, the bundle variant) and returns a
closure that runs the op once; the timer calls it. Weights are random normal (scale 0.02):
the values do not change the kernels' time, only that they are finite.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from ..errors import ConfigError
from ..model_config import ModelSpec

DTYPE = torch.bfloat16
EPS = 1e-5


@dataclass(frozen=True)
class RankShapes:
    """One rank's widths at TP = ``tp`` (see the module docstring)."""
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab_shard: int
    vocab: int
    qk_norm: bool
    num_experts: int = 0         # mixture of experts: all E on the rank, each expert's width / tp
    top_k: int = 0
    moe_intermediate: int = 0

    @classmethod
    def of(cls, model: ModelSpec, tp: int) -> "RankShapes":
        if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
            raise ConfigError(f"must be an integer >= 1, got {tp!r}", key="--tp")
        if model.num_heads % tp or (model.num_kv_heads % tp and tp % model.num_kv_heads):
            raise ConfigError(f"{model.name} has {model.num_heads} attention heads and {model.num_kv_heads} KV "
                              f"heads; TP={tp} does not divide them (vLLM requires it)", key="--tp")
        mlp_key, mlp = (("moe_intermediate_size", model.moe_intermediate_size) if model.is_moe
                        else ("intermediate_size", model.intermediate_size))
        if mlp % tp:
            raise ConfigError(f"{model.name}'s {mlp_key} {mlp} is not divisible by TP={tp}", key="--tp")
        if model.is_moe and not 1 <= model.experts_per_token <= model.num_experts:
            raise ConfigError(f"{model.name} has {model.num_experts} experts and num_experts_per_tok "
                              f"{model.experts_per_token}; need 1 <= k <= experts", key="--model")
        return cls(hidden=model.hidden_size, q_heads=model.num_heads // tp,
                   kv_heads=max(model.num_kv_heads // tp, 1), head_dim=model.head_dim,
                   intermediate=0 if model.is_moe else model.intermediate_size // tp,
                   vocab_shard=-(-model.vocab_size // tp), vocab=model.vocab_size, qk_norm=model.qk_norm,
                   num_experts=model.num_experts, top_k=model.experts_per_token,
                   moe_intermediate=model.moe_intermediate_size // tp if model.is_moe else 0)

    def describe(self) -> dict:
        out = {"hidden": self.hidden, "q_heads": self.q_heads, "kv_heads": self.kv_heads,
               "head_dim": self.head_dim, "intermediate": self.intermediate,
               "vocab_shard": self.vocab_shard, "sampler_vocab": self.vocab}
        if self.num_experts:
            del out["intermediate"]          # no dense MLP
            out.update(experts=self.num_experts, experts_per_token=self.top_k,
                       expert_intermediate=self.moe_intermediate)
        return out


def _randn(*shape, device) -> torch.Tensor:
    return torch.randn(*shape, device=device, dtype=DTYPE) * 0.02


def _rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), w, EPS)


class OpFactory:
    """Builds the closure of each op at one size on one device, for one rank's shapes.
    Weights are shared across sizes (allocated on first use)."""

    def __init__(self, shapes: RankShapes, device: torch.device):
        self.s = shapes
        self.device = device
        self._weights: dict[str, torch.Tensor] = {}

    def _w(self, name: str, *shape) -> torch.Tensor:
        if name not in self._weights:
            self._weights[name] = _randn(*shape, device=self.device)
        return self._weights[name]

    def dense(self, op: str, tokens: int) -> Callable[[], object]:
        s, T, dev = self.s, tokens, self.device
        q_width, kv_width = s.q_heads * s.head_dim, s.kv_heads * s.head_dim
        if op == "embedding":
            table = self._w("embedding", s.vocab_shard, s.hidden)
            ids = torch.randint(0, s.vocab_shard, (T,), device=dev)
            return lambda: F.embedding(ids, table)
        if op in ("layernorm", "final_layernorm"):      # vLLM's fused residual add + RMSNorm
            w = torch.ones(s.hidden, device=dev, dtype=DTYPE)
            x, res = _randn(T, s.hidden, device=dev), _randn(T, s.hidden, device=dev)
            return lambda: _rms_norm(x + res, w)
        if op in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"):
            k_in, n_out = {"qkv_proj": (s.hidden, q_width + 2 * kv_width), "o_proj": (q_width, s.hidden),
                           "gate_up_proj": (s.hidden, 2 * s.intermediate),
                           "down_proj": (s.intermediate, s.hidden)}[op]
            w = self._w(op, n_out, k_in)
            x = _randn(T, k_in, device=dev)
            return lambda: F.linear(x, w)
        if op == "act_fn":                               # SiluAndMul
            x = _randn(T, 2 * s.intermediate, device=dev)
            half = s.intermediate
            return lambda: F.silu(x[:, :half]) * x[:, half:]
        if op == "rotary_emb":                           # neox-style rotation of q and k
            cos = self._w("rope_cos", 8192, s.head_dim // 2)
            sin = self._w("rope_sin", 8192, s.head_dim // 2)
            pos = torch.randint(0, 8192, (T,), device=dev)
            q = _randn(T, s.q_heads, s.head_dim, device=dev)
            k = _randn(T, s.kv_heads, s.head_dim, device=dev)
            return lambda: (_rotate(q, cos, sin, pos), _rotate(k, cos, sin, pos))
        if op == "qk_norm":                              # per-head RMSNorm of q and k
            wq = torch.ones(s.head_dim, device=dev, dtype=DTYPE)
            q = _randn(T * s.q_heads, s.head_dim, device=dev)
            k = _randn(T * s.kv_heads, s.head_dim, device=dev)
            return lambda: (_rms_norm(q, wq), _rms_norm(k, wq))
        raise KeyError(op)

    def per_sequence(self, op: str, seqs: int) -> Callable[[], object]:
        s, dev = self.s, self.device
        if op == "lm_head":
            w = self._w("lm_head", s.vocab_shard, s.hidden)
            x = _randn(seqs, s.hidden, device=dev)
            return lambda: F.linear(x, w)
        if op == "sampler":      # vLLM's random sampling: fp32 logits / T, softmax, exponential race
            logits = _randn(seqs, s.vocab, device=dev)
            return lambda: _sample(logits)
        raise KeyError(op)


def _rotate(x: torch.Tensor, cos_cache, sin_cache, pos) -> torch.Tensor:
    half = x.shape[-1] // 2
    cos, sin = cos_cache[pos].unsqueeze(1), sin_cache[pos].unsqueeze(1)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def _sample(logits: torch.Tensor) -> torch.Tensor:
    probs = torch.softmax(logits.float() / 0.7, dim=-1)
    q = torch.empty_like(probs).exponential_()
    return probs.div_(q).argmax(dim=-1)


class Attention:
    """One layer's attention on one rank: a prefill chunk after a prior context (causal,
    aligned bottom-right: the chunk's last query sees every key), and a batch of decodes each
    with its own KV. ``backend`` is "flash-attn" (``flash_attn_func``, when the package is
    installed and the device is CUDA) or "sdpa" (``scaled_dot_product_attention``, GQA
    without copying KV heads)."""

    def __init__(self, shapes: RankShapes, device: torch.device, backend: Optional[str] = None):
        self.s, self.device = shapes, device
        self.backend = backend or default_backend(device)
        self.scale = 1.0 / math.sqrt(shapes.head_dim)
        if self.backend == "flash-attn":
            from flash_attn import flash_attn_func
            self._flash = flash_attn_func

    def prefill(self, chunk: int, context: int) -> Callable[[], object]:
        s, dev, L = self.s, self.device, context + chunk
        if self.backend == "flash-attn":          # (batch, seq, heads, dim); causal is bottom-right
            q = _randn(1, chunk, s.q_heads, s.head_dim, device=dev)
            k, v = (_randn(1, L, s.kv_heads, s.head_dim, device=dev) for _ in range(2))
            return lambda: self._flash(q, k, v, softmax_scale=self.scale, causal=True)
        q = _randn(1, s.q_heads, chunk, s.head_dim, device=dev)
        k, v = (_randn(1, s.kv_heads, L, s.head_dim, device=dev) for _ in range(2))
        mask = _lower_right(chunk, L, dev)
        if mask is None:
            return lambda: _sdpa(q, k, v, is_causal=True)
        return lambda: _sdpa(q, k, v, attn_mask=mask)

    def decode(self, n: int, kv: int) -> Callable[[], object]:
        s, dev = self.s, self.device
        if self.backend == "flash-attn":
            q = _randn(n, 1, s.q_heads, s.head_dim, device=dev)
            k, v = (_randn(n, kv, s.kv_heads, s.head_dim, device=dev) for _ in range(2))
            return lambda: self._flash(q, k, v, softmax_scale=self.scale, causal=False)
        q = _randn(n, s.q_heads, 1, s.head_dim, device=dev)
        k, v = (_randn(n, s.kv_heads, kv, s.head_dim, device=dev) for _ in range(2))
        return lambda: _sdpa(q, k, v)


def default_backend(device: torch.device) -> str:
    if device.type == "cuda":
        try:
            import flash_attn  # noqa: F401
            return "flash-attn"
        except ImportError:
            pass
    return "sdpa"


def _sdpa(q, k, v, **kw):
    if q.shape[1] != k.shape[1]:
        kw["enable_gqa"] = True          # reads each KV head once for its group of query heads
    return F.scaled_dot_product_attention(q, k, v, **kw)


def _lower_right(chunk: int, total: int, dev):
    """The chunk's causal mask against ``total`` keys (prior context first), or None when
    there is no prior context (plain causal). ``causal_lower_right`` is not a dense mask:
    SDPA keeps its fused kernels for it."""
    if chunk == total:
        return None
    from torch.nn.attention.bias import causal_lower_right
    return causal_lower_right(chunk, total)
