"""Architecture facts from a Hugging Face ``config.json`` (no per-model code paths)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError, load_json
from .paths import models_dir

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "fp8": 1}
# Architectures whose attention normalises q and k per head (vLLM qwen3.py / qwen3_moe.py).
QK_NORM_MODEL_TYPES = ("qwen3", "qwen3_moe")


@dataclass(frozen=True)
class ModelSpec:
    """The architecture figures of a model that timing and memory need (from its config.json)."""
    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_model_len: int
    tie_embeddings: bool
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    dtype_bytes: int = 2
    qk_norm: bool = False          # per-head RMSNorm on q and k (Qwen3 families)
    architecture: str = ""         # config.json model_type (a cluster serves one family)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def kv_bytes_per_token(self, tp: int, pp: int = 1) -> int:
        """K and V for every layer held by one rank (KV heads split over TP, layers over PP)."""
        kv_heads = max(self.num_kv_heads // tp, 1)
        layers = -(-self.num_layers // pp)
        return 2 * layers * kv_heads * self.head_dim * self.dtype_bytes

    def num_params(self) -> int:
        h, L = self.hidden_size, self.num_layers
        q = h * self.num_heads * self.head_dim
        kv = 2 * h * self.num_kv_heads * self.head_dim
        o = self.num_heads * self.head_dim * h
        if self.is_moe:
            mlp = self.num_experts * 3 * h * self.moe_intermediate_size + h * self.num_experts
        else:
            mlp = 3 * h * self.intermediate_size
        per_layer = q + kv + o + mlp + 2 * h
        emb = self.vocab_size * h
        head = 0 if self.tie_embeddings else self.vocab_size * h
        return L * per_layer + emb + head + h

    def weight_bytes_per_rank(self, tp: int, pp: int = 1) -> int:
        """Weights one GPU holds: everything sharded over TP (norms are negligible and
        counted in full), layers over PP."""
        return self.num_params() * self.dtype_bytes // (tp * pp)


def _find_config(name: str) -> Path:
    p = Path(name)
    if p.suffix == ".json" and p.exists():
        return p
    if p.is_dir() and (p / "config.json").exists():
        return p / "config.json"
    cand = models_dir() / f"{name}.json"
    if cand.exists():
        return cand
    known = sorted(str(q.relative_to(models_dir()))[:-5] for q in models_dir().rglob("*.json"))
    raise ConfigError(f"unknown model '{name}' (registry: {', '.join(known)}; or give a path to config.json)",
                      key="model")


def load_model(name: str) -> ModelSpec:
    path = _find_config(name)
    cfg = load_json(path, what="model config", problem="model config is not valid JSON")

    if not isinstance(cfg, dict):
        raise ConfigError("a model config must be a JSON object", file=str(path))

    def need(key, default=None, minimum=1):
        if key not in cfg and default is None:
            raise ConfigError("missing field", file=str(path), key=key)
        v = cfg.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise ConfigError(f"must be an integer >= {minimum}, got {v!r}", file=str(path), key=key)
        return v

    heads = need("num_attention_heads")
    hidden = need("hidden_size")
    registry_name = name if not Path(name).exists() else cfg.get("_name_or_path", path.stem)
    return ModelSpec(
        name=registry_name,
        hidden_size=hidden,
        num_layers=need("num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=need("num_key_value_heads", heads),
        head_dim=need("head_dim", hidden // heads) if cfg.get("head_dim") is not None else hidden // heads,
        intermediate_size=need("intermediate_size", 4 * hidden),
        vocab_size=need("vocab_size"),
        max_model_len=need("max_position_embeddings", 131072),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        num_experts=int(cfg.get("num_experts", cfg.get("num_local_experts", 0)) or 0),
        experts_per_token=int(cfg.get("num_experts_per_tok", 0) or 0),
        moe_intermediate_size=int(cfg.get("moe_intermediate_size", cfg.get("intermediate_size", 0)) or 0),
        dtype_bytes=DTYPE_BYTES.get(str(cfg.get("torch_dtype", "bfloat16")), 2),
        qk_norm=str(cfg.get("model_type", "")) in QK_NORM_MODEL_TYPES,
        architecture=str(cfg.get("model_type", "")),
    )
