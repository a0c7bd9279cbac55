"""Min-waste retention: InferCept's retain-versus-discard test (paper §3.4, Appendix E).

At completion of a call with context n tokens, predicted gap g (per-tool quantile of observed
gaps, ``default_s`` = 1 s for an unseen tool), the policy compares

    W_preserve(n) = g * n                       token-seconds the KV sits idle in the gap
    W_discard(n)                                 token-seconds wasted by evicting now and
                                                 re-prefilling n tokens at the next call

and protects until c + g if W_preserve <= W_discard, else evicts at completion. No value is
set (reclamation among retained entries falls back to deadline order).

W_discard is InferCept's Equation 4 (Abhyankar et al., ICML 2024, "InferCept: Efficient
Intercept Support for Augmented LLM Inference", §4: chunked recomputation), with forward time
t(x) = (a*x + c)/1000 s and chunk budget S from a per-device profile
(profiles/infercept/*.json). With I the tokens in flight on the instance and R the KV tokens
held by its running batch:

    c_h = max(S - I, 1)                      recompute chunk: the budget left beside the batch
    N   = max(ceil(n / c_h) - 1, 0)          full chunks before the last one
    L   = n - N*c_h                          tokens of the last chunk (1..c_h for n >= 1)
    W_discard = t(S) * c_h * N(N+1)/2        recomputed chunks held in memory while the
                                             remaining chunks are computed (saturated passes)
              + (a*c_h/1000) * N * R         slowdown each full chunk imposes on the batch
              + (a*L/1000) * R               ... and the last, partial chunk

This is the form the AgentServeSim paper describes (Appendix E: "chunks of
c_h = max(S - n_inflight, 1) ... including the slowdown imposed on the running batch").
InferCept's reference code (WukLab/InferCept, vllm/core/scheduler_v2.py, ``discard_waste``)
has the same first two terms and charges the last chunk as (a*r/1000)*(R + r) with
r = n mod c_h; the two differ only in that last-chunk term.

Profile choice (``profile`` path, or ``hardware``/``model``/``tp``): ``profile`` names a JSON
file (relative paths resolve against the config folder); otherwise the file in
profiles/infercept/ whose ``gpu_name`` contains ``hardware`` (letters and digits only, case
folded: "B200", "RTXPRO6000"), whose ``model`` equals or ends with ``model``
("meta-llama/Llama-3.1-8B" or "Llama-3.1-8B") and whose ``tensor_parallel_size`` is ``tp``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from llmservingsim.errors import ConfigError, ProfileError, load_json

from ._params import integer, real
from .base import RetentionPolicy
from .quantile import GapQuantile

__all__ = ["WasteProfile", "MinWaste", "discard_waste", "preserve_waste", "resolve_profile"]

_KEY = "policies.retention"


@dataclass(frozen=True, slots=True)
class WasteProfile:
    """A forward pass's time as InferCept profiles it: ``a * tokens + c`` ms, saturating at ``S`` tokens."""
    a: float      # ms per token (forward-time slope)
    c: float      # ms (forward-time intercept)
    S: int        # chunked-prefill budget: tokens per saturated forward pass
    source: str = ""

    def t_fwd_s(self, tokens: float, with_intercept: bool = True) -> float:
        return (self.a * tokens + (self.c if with_intercept else 0.0)) / 1000.0

    @classmethod
    def from_json(cls, path: Path) -> "WasteProfile":
        data = load_json(path, error=ProfileError, what="InferCept profile",
                         problem="InferCept profile is not valid JSON")
        try:
            return cls(a=float(data["a"]), c=float(data["c"]), S=int(data["S"]),
                       source=str(path))
        except (ValueError, KeyError, TypeError, OverflowError) as exc:
            raise ProfileError(f"cannot read InferCept profile ({type(exc).__name__}: {exc})",
                               file=str(path)) from None


def preserve_waste(context_tokens: int, gap_s: float) -> float:
    """Token-seconds the context occupies while retained over the gap."""
    return max(0.0, gap_s) * context_tokens


def discard_waste(context_tokens: int, inflight_tokens: int, running_tokens: int,
                  profile: WasteProfile) -> float:
    """InferCept Eq. 4 as documented in the module docstring (token-seconds)."""
    n = context_tokens
    if n <= 0:
        return 0.0
    c_h = max(profile.S - inflight_tokens, 1)
    full = max(-(-n // c_h) - 1, 0)
    last = n - full * c_h
    w_self = profile.t_fwd_s(profile.S) * c_h * full * (full + 1) / 2
    w_batch = (profile.t_fwd_s(c_h, False) * full + profile.t_fwd_s(last, False)) * running_tokens
    return w_self + w_batch


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", str(text).lower())


def resolve_profile(hardware: str, model: str, tp: int,
                    directory: Optional[Path] = None) -> Path:
    """The profile file measured for (hardware, model, tp); ConfigError listing the
    available ones otherwise."""
    if directory is None:
        from llmservingsim.paths import profiles_dir
        directory = profiles_dir() / "infercept"
    found, have = [], []
    for path in sorted(Path(directory).glob("*.json")):
        try:
            meta = load_json(path, error=ProfileError)
        except ProfileError:
            continue
        if not isinstance(meta, dict):
            continue
        name, mdl, mtp = meta.get("gpu_name", ""), str(meta.get("model", "")), meta.get(
            "tensor_parallel_size")
        have.append(f"{name}/{mdl}/tp{mtp}")
        if (_norm(hardware) and _norm(hardware) in _norm(name)
                and (_norm(mdl) == _norm(model) or _norm(mdl).endswith(_norm(model)))
                and mtp == tp):
            found.append(path)
    if len(found) != 1:
        why = "no" if not found else "more than one"
        raise ConfigError(f"min-waste: {why} InferCept profile for hardware={hardware!r} "
                          f"model={model!r} tp={tp} in {directory}; available: "
                          f"{', '.join(have) or 'none'}", key=_KEY)
    return found[0]


class MinWaste(RetentionPolicy):
    """Retain (protect until c + g) iff g*n <= W_discard(n), else evict at completion."""
    name = "min-waste"
    path_params = ("profile",)

    def __init__(self, profile: Optional[str] = None, hardware: Optional[str] = None,
                 model: Optional[str] = None, tp: int = 1, quantile: float = 0.9,
                 default_s: float = 1.0):
        if profile is not None:
            self.profile = WasteProfile.from_json(Path(profile))
        elif hardware is not None and model is not None:
            self.profile = WasteProfile.from_json(
                resolve_profile(hardware, model, integer("tp", tp, lo=1)))
        else:
            raise ValueError("min-waste needs 'profile' (a JSON path) or 'hardware', 'model' "
                             "and 'tp' to pick one from profiles/infercept/")
        self._q = GapQuantile(real("quantile", quantile, lo=0.0, hi=1.0),
                              real("default_s", default_s, lo=0.0))

    def wastes(self, pcb) -> tuple[float, float, float]:
        """(predicted gap g, W_preserve, W_discard) for the program's current context."""
        gap = self._q.predict(pcb, pcb.tool_name)
        sig = self.signals
        n = pcb.context_tokens
        return (gap, preserve_waste(n, gap),
                discard_waste(n, sig.inflight_tokens, sig.running_context_tokens, self.profile))

    def on_turn_complete(self, pcb, request_id, now):
        gap, w_keep, w_drop = self.wastes(pcb)
        if w_keep <= w_drop:
            return ("protect", now + gap)
        return "evict"

    def on_turn_arrival(self, pcb, now):
        return "release"

