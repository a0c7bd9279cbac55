"""Op-level cost model: the bytes and FLOPs of each profiled op, and a roofline time for them.

One concept: for every op name a profile bundle holds (docs/profile-bundles.md), the work one
rank does at a given size under tensor parallelism TP = ``tp``, from the model config alone:

- ``dense.csv`` ops at ``tokens`` tokens: qkv_proj, o_proj, gate_up_proj, down_proj (GEMMs),
  act_fn, rotary_emb, qk_norm, layernorm, final_layernorm, embedding (memory-bound);
- ``per_sequence.csv`` ops at ``sequences`` sequences: lm_head (GEMM), sampler;
- ``attention.csv`` at (prefill chunk, its prior context, decodes, their KV length);
- ``moe.csv`` at (tokens, distinct activated experts).

Invariants (tests/derive/test_op_cost.py pins them with exact numbers):
- Weights and attention heads shard by TP (vLLM's column/row-parallel layers): q heads
  ``num_heads / tp``; KV heads ``max(num_kv_heads // tp, 1)`` (replicated once tp exceeds
  them, as ``ModelSpec.kv_bytes_per_token`` counts them); MLP, expert and vocabulary widths
  divided by tp. Activations per token on the full hidden state do not shard.
- ``UNSHARDED`` ops (layernorm, final_layernorm, embedding, sampler) do the same work at every
  tp: the norms and the embedding output act on the full hidden state; the sampler runs on the
  gathered full-vocabulary logits.
- Work is non-negative, and for every op outside ``UNSHARDED`` non-increasing in tp.
- Bytes count each tensor read or written once (weights, inputs, outputs, KV cache), in the
  model's dtype; FLOPs count a multiply-add as 2.

``Roofline`` turns work into time: ``launch_us + max(bytes / bandwidth, flops / compute)``,
with the effective bandwidth and compute of one op class on one device. ``fit_roofline``
fits them (deterministically) on measured times; derive_bundle.py fits them on the source
bundle it derives from and uses only the ratio of two roofline times.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Sequence


from .model_config import ModelSpec

UNSHARDED = frozenset({"layernorm", "final_layernorm", "embedding", "sampler"})
GEMM_OPS = frozenset({"qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head"})
ELEMENTWISE_OPS = frozenset({"act_fn", "rotary_emb", "qk_norm", "layernorm", "final_layernorm",
                             "embedding", "sampler"})
# The bundles' dense.csv ops in layer order: the one place that says which rows the profiler
# (llmservingsim/measure/) and the synthesis (synthesize_bundle.py) write for a model.
LAYER_ORDER = ("embedding", "layernorm", "qkv_proj", "qk_norm", "rotary_emb", "o_proj", "gate_up_proj",
               "act_fn", "down_proj", "final_layernorm")
DENSE_OPS = frozenset(LAYER_ORDER)
MLP_OPS = frozenset({"gate_up_proj", "act_fn", "down_proj"})
PER_SEQUENCE_OPS = ("lm_head", "sampler")


def dense_ops(model: ModelSpec) -> tuple:
    """The dense.csv ops vLLM runs for this architecture, in layer order: ``qk_norm`` only for
    Qwen3-style per-head q/k norms; a mixture-of-experts model has no dense MLP (its experts
    are moe.csv)."""
    return tuple(op for op in LAYER_ORDER if not (op == "qk_norm" and not model.qk_norm)
                 and not (op in MLP_OPS and model.is_moe))


def op_class(op: str) -> str:
    """The class whose device efficiencies an op shares: "gemm", "elementwise", "attention"
    or "moe" (op names as in the bundles; "attention" and "moe" name their whole tables)."""
    if op in GEMM_OPS:
        return "gemm"
    if op in ELEMENTWISE_OPS:
        return "elementwise"
    if op in ("attention", "moe"):
        return op
    raise KeyError(op)


@dataclass(frozen=True, slots=True)
class Work:
    """What one op moves and computes on one rank: bytes to and from memory, and FLOPs."""
    bytes: float
    flops: float


@dataclass(frozen=True, slots=True)
class Shards:
    """Per-rank widths of a model at one TP degree (see the module's sharding invariants)."""
    hidden: int
    q_heads: float
    kv_heads: int
    head_dim: int
    intermediate: float
    moe_intermediate: float
    vocab: float
    dtype: int

    @classmethod
    def of(cls, model: ModelSpec, tp: int) -> "Shards":
        if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
            raise ValueError(f"tp must be an integer >= 1, got {tp!r}")
        return _shards(model, tp)


@functools.lru_cache(maxsize=64)
def _shards(model: ModelSpec, tp: int) -> Shards:
    """``Shards.of`` once per (model, tp): a derivation asks for it once per profile row."""
    return Shards(hidden=model.hidden_size, q_heads=model.num_heads / tp,
                  kv_heads=max(model.num_kv_heads // tp, 1), head_dim=model.head_dim,
                  intermediate=model.intermediate_size / tp,
                  moe_intermediate=model.moe_intermediate_size / tp,
                  vocab=model.vocab_size / tp, dtype=model.dtype_bytes)


def _gemm(m: float, k: float, n: float, dtype: int) -> Work:
    """C[m, n] = A[m, k] @ W[k, n]: read A and W, write C."""
    return Work(dtype * (m * k + k * n + m * n), 2.0 * m * k * n)


def dense_work(model: ModelSpec, op: str, tokens: float, tp: int) -> Work:
    """Work of one ``dense.csv`` op over ``tokens`` tokens on one rank (once; the
    performance model multiplies by layers). KeyError for an op this model does not know."""
    s, T = Shards.of(model, tp), float(tokens)
    h, d, b = s.hidden, s.head_dim, s.dtype
    qkv_width = (s.q_heads + 2 * s.kv_heads) * d
    if op == "qkv_proj":
        return _gemm(T, h, qkv_width, b)
    if op == "o_proj":
        return _gemm(T, s.q_heads * d, h, b)
    if op == "gate_up_proj":
        return _gemm(T, h, 2 * s.intermediate, b)
    if op == "down_proj":
        return _gemm(T, s.intermediate, h, b)
    if op == "act_fn":           # SiluAndMul: read gate and up, write their product
        return Work(b * T * 3 * s.intermediate, 4.0 * T * s.intermediate)
    if op == "rotary_emb":       # rotate q and k in place, read the cos/sin cache per token
        return Work(b * T * (2 * (s.q_heads + s.kv_heads) * d + d), 3.0 * T * (s.q_heads + s.kv_heads) * d)
    if op == "qk_norm":          # per-head RMSNorm of q and k in place, plus the two weights
        return Work(b * (T * 2 * (s.q_heads + s.kv_heads) * d + 2 * d), 4.0 * T * (s.q_heads + s.kv_heads) * d)
    if op in ("layernorm", "final_layernorm"):   # fused add + RMSNorm: x, residual in and out
        return Work(b * (4 * T * h + h), 5.0 * T * h)
    if op == "embedding":        # gather T rows of the table, write them
        return Work(b * 2 * T * h, 0.0)
    raise KeyError(op)


def per_sequence_work(model: ModelSpec, op: str, sequences: float, tp: int) -> Work:
    """Work of one ``per_sequence.csv`` op for ``sequences`` sequences on one rank."""
    s, S = Shards.of(model, tp), float(sequences)
    if op == "lm_head":
        return _gemm(S, s.hidden, s.vocab, s.dtype)
    if op == "sampler":          # on the gathered fp32 logits of the full vocabulary
        return Work(4.0 * S * model.vocab_size * 3, 8.0 * S * model.vocab_size)
    raise KeyError(op)


def attention_work(model: ModelSpec, prefill_chunk: float, kv_prefill: float, n_decode: float,
                   kv_decode: float, tp: int) -> Work:
    """One layer's attention on one rank: a causal prefill chunk of ``prefill_chunk`` tokens
    after ``kv_prefill`` cached tokens plus ``n_decode`` decodes over ``kv_decode`` tokens
    each. Reads q and the KV it attends to, writes the output and the new K and V."""
    s = Shards.of(model, tp)
    d, b, hq, hkv = s.head_dim, s.dtype, s.q_heads, s.kv_heads
    c, p, n, kd = float(prefill_chunk), float(kv_prefill), float(n_decode), float(kv_decode)
    flops = 4.0 * d * hq * (c * (p + (c + 1) / 2) + n * kd)
    byts = b * d * (2 * hq * (c + n) + 2 * hkv * (p + c + n * kd) + 2 * hkv * (c + n))
    return Work(byts, flops)


def moe_work(model: ModelSpec, tokens: float, activated_experts: float, tp: int) -> Work:
    """One MoE layer on one rank: the replicated router over all experts, then each token's
    top-k experts (each expert's gate/up/down widths divided by tp); every activated expert's
    weights are read once."""
    s, T, A = Shards.of(model, tp), float(tokens), float(activated_experts)
    h, b, E, k, mi = s.hidden, s.dtype, model.num_experts, model.experts_per_token, s.moe_intermediate
    router = _gemm(T, h, E, b)
    weights = b * A * 3 * h * mi
    acts = b * T * k * (h + 3 * mi + h)        # per routed token: x in, gate/up/act, down out
    return Work(router.bytes + weights + acts + b * T * h, router.flops + 2.0 * T * k * 3 * h * mi)


@dataclass(frozen=True, slots=True)
class Roofline:
    """Achieved time of one op class on one device: ``launch_us + max(bytes / (bandwidth_gbs
    GB/s), flops / (tflops TFLOP/s))``. Invariant: all three are finite, bandwidth and
    compute > 0, launch >= 0; so time is > 0 and non-decreasing in bytes and flops."""
    bandwidth_gbs: float
    tflops: float
    launch_us: float

    def time_us(self, w: Work) -> float:
        return self.launch_us + max(w.bytes / (self.bandwidth_gbs * 1e3), w.flops / (self.tflops * 1e6))


def size_weights(keys: Sequence[tuple], works: Sequence[Work]) -> Sequence[float]:
    """Fit weights that give every (key, octave of bytes, octave of FLOPs) bucket the same
    total weight. Why: profile grids are dense at large sizes (dense.csv steps by 16 tokens up
    to 2k-16k), so an unweighted fit is decided by the compute-bound rows and leaves the
    memory-bound small-batch rows, where launch and bandwidth are identified, to chance."""
    import numpy as np     # fits only: a run that loads a bundle never imports numpy
    buckets = [(k, math.floor(math.log2(w.bytes + 1)), math.floor(math.log2(w.flops + 1)))
               for k, w in zip(keys, works)]
    count: dict = {}
    for b in buckets:
        count[b] = count.get(b, 0) + 1
    return np.array([1.0 / count[b] for b in buckets])


def _sse_exact(mem_i, cmp_j, L: float, logt, wt):
    """sum_n wt * (log(max(mem_i, cmp_j) + L) - logt)^2 for rows (i, j) of ``mem_i`` (k, N) and
    ``cmp_j`` (k, N), by the very expression (and einsum) fit_roofline always used, so a grid
    point's value has the same bits however many points are evaluated with it."""
    import numpy as np
    err = np.log(np.maximum(mem_i, cmp_j)[None, :, :] + L) - logt
    return np.einsum("ijn,ijn,n->ij", err, err, wt)[0]


def _segment_sums(terms, cuts):
    """``out[r, t] = sum(terms[r, cuts[t]:cuts[t + 1]])`` for strictly increasing ``cuts`` from
    0 to ``terms.shape[1]`` (so no segment is empty)."""
    import numpy as np
    if len(cuts) < 2:
        return np.zeros((terms.shape[0], 0))
    return np.add.reduceat(terms, cuts[:-1], axis=1)


def _errors(x_s, L: float, logt_s, wt_s):
    """``wt * (log(x + L) - logt)^2`` elementwise, in one buffer."""
    import numpy as np
    e = np.add(x_s, L)
    with np.errstate(divide="ignore", invalid="ignore"):   # log(0) at L = 0: a row no point uses
        np.log(e, out=e)
        e -= logt_s
        np.square(e, out=e)
        e *= wt_s
    return e


def _screen(mem_s, cmp_s, L: float, logt_s, wt_s, k):
    """The (25, 25) SSE of every (bandwidth i, compute j) grid point at launch ``L``, up to float
    rounding, in O(25 N) logs instead of O(25 * 25 * N): rows sorted by arithmetic intensity
    (FLOPs / byte), the rows a point (i, j) holds memory-bound are the first ``k[i, j]``, so its
    SSE is a prefix sum of the memory-bound errors at i plus a suffix sum of the compute-bound
    errors at j (sums of non-negative terms, so no cancellation). Only the rows some point
    holds memory- (compute-) bound are evaluated."""
    import numpy as np
    n = mem_s.shape[1]
    lo, hi = int(k.min()), int(k.max())
    cuts = np.unique(np.concatenate(([0, n], k.ravel())))
    mcuts, ccuts = cuts[cuts <= hi], cuts[cuts >= lo]      # 0 .. hi and lo .. n
    mseg = _segment_sums(_errors(mem_s[:, :hi], L, logt_s[:hi], wt_s[:hi]), mcuts)
    cseg = _segment_sums(_errors(cmp_s[:, lo:], L, logt_s[lo:], wt_s[lo:]), ccuts - lo)
    pre = np.zeros((mseg.shape[0], len(mcuts)))            # pre[i, t] = sum over rows < mcuts[t]
    np.cumsum(mseg, axis=1, out=pre[:, 1:])
    suf = np.zeros((cseg.shape[0], len(ccuts)))            # suf[j, t] = sum over rows >= ccuts[t]
    if cseg.shape[1]:
        suf[:, :-1] = np.cumsum(cseg[:, ::-1], axis=1)[:, ::-1]
    i = np.arange(mem_s.shape[0])[:, None]
    j = np.arange(cmp_s.shape[0])[None, :]
    return pre[i, np.searchsorted(mcuts, k)] + suf[j, np.searchsorted(ccuts, k)]


def fit_roofline(works: Sequence[Work], times_us: Sequence[float], peak_bandwidth_gbs: float,
                 peak_tflops: float, weights: Sequence[float] | None = None) -> Roofline:
    """The roofline that best fits measured ``times_us`` of ``works`` in relative error
    (weighted least squares of log(predicted / measured); ``weights`` default to 1), with
    bandwidth and compute between 1 % and 100 % of the device's datasheet peaks and launch
    between 0 and the smallest measured time.
    Deterministic: an exhaustive grid (efficiencies log-spaced, launch linear), then the same
    grid again around the best point, so the same inputs always give the same fit.
    Fast and exact: per launch value, ``_screen`` bounds every grid point's SSE (to ~1e-12
    relative) in O(25 N); only the points within 1e-9 of the smallest are evaluated again by
    ``_sse_exact``, the full (25, 25, N) expression, whose minimum (first in i, j order on a
    tie) is the point chosen, with the same bits as evaluating all 625 points that way."""
    import numpy as np     # fits only: a run that loads a bundle never imports numpy
    B = np.array([w.bytes for w in works], dtype=float)
    F = np.array([w.flops for w in works], dtype=float)
    t = np.array(times_us, dtype=float)
    if not len(t) or not np.all(t > 0):
        raise ValueError("fit_roofline needs at least one measured time, all > 0")
    logt = np.log(t)
    wt = np.ones_like(t) if weights is None else np.asarray(weights, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        intensity = np.where(B > 0, F / B, np.inf)           # a row is memory-bound below cb / cf
    order = np.argsort(intensity, kind="stable")
    inten_s, B_s, F_s, logt_s, wt_s = intensity[order], B[order], F[order], logt[order], wt[order]
    lo_l, hi_l = 0.0, float(t.min()) * 0.999
    lo_b, hi_b = math.log(0.01), 0.0
    lo_f, hi_f = math.log(0.01), 0.0
    best = None
    for _round in range(4):
        eb = np.linspace(lo_b, hi_b, 25)
        ef = np.linspace(lo_f, hi_f, 25)
        ls = np.linspace(lo_l, hi_l, 25)
        cb = peak_bandwidth_gbs * 1e3 * np.exp(eb)
        cf = peak_tflops * 1e6 * np.exp(ef)
        mem = B[None, :] / cb[:, None]                                          # (25, N)
        cmp_ = F[None, :] / cf[:, None]                                         # (25, N)
        mem_s, cmp_s = B_s[None, :] / cb[:, None], F_s[None, :] / cf[:, None]
        # rows with FLOPs / byte <= cf_j / cb_i are memory-bound at (i, j): the first k[i, j]
        k = np.searchsorted(inten_s, cf[None, :] / cb[:, None], side="right")
        for li, L in enumerate(ls):
            approx = _screen(mem_s, cmp_s, float(L), logt_s, wt_s, k)
            lowest = float(approx.min())
            if math.isfinite(lowest):
                cand = np.flatnonzero(approx.ravel() <= lowest + 1e-9 * abs(lowest) + 1e-300)
            else:                                    # log(0) or overflow: evaluate every point
                cand = np.arange(approx.size)
            ci, cj = cand // 25, cand % 25
            sse = _sse_exact(mem[ci], cmp_[cj], L, logt, wt)
            c = int(np.argmin(sse))
            i, j = int(ci[c]), int(cj[c])
            if best is None or sse[c] < best[0]:
                best = (float(sse[c]), float(eb[i]), float(ef[j]), float(L), li)
        _, b0, f0, l0, _ = best
        db, df, dl = (hi_b - lo_b) / 12, (hi_f - lo_f) / 12, (hi_l - lo_l) / 12
        lo_b, hi_b = max(b0 - db, math.log(0.01)), min(b0 + db, 0.0)
        lo_f, hi_f = max(f0 - df, math.log(0.01)), min(f0 + df, 0.0)
        lo_l, hi_l = max(l0 - dl, 0.0), min(l0 + dl, float(t.min()) * 0.999)
    _, b0, f0, l0, _ = best
    return Roofline(peak_bandwidth_gbs * math.exp(b0), peak_tflops * math.exp(f0), l0)


def fit_launch(works: Sequence[Work], times_us: Sequence[float], bandwidth: float, compute: float,
               weights: Sequence[float] | None = None) -> float:
    """The launch term (µs) that best fits ``times_us`` of ``works`` (expressed at 1 GB/s and
    1 TFLOP/s, as ``fit_roofline`` with unit peaks reads them) when the bandwidth and compute
    fractions are held at ``bandwidth`` and ``compute``: weighted least squares of
    log(predicted / measured), launch between 0 and the smallest measured time (fit_roofline's
    bounds). Deterministic: a 201-point grid, then the same grid around the best point, 4 times."""
    import numpy as np
    t = np.array(times_us, dtype=float)
    if not len(t) or not np.all(t > 0):
        raise ValueError("fit_launch needs at least one measured time, all > 0")
    roof = np.maximum(np.array([w.bytes for w in works], dtype=float) / (bandwidth * 1e3),
                      np.array([w.flops for w in works], dtype=float) / (compute * 1e6))
    wt = np.ones_like(t) if weights is None else np.asarray(weights, dtype=float)
    logt = np.log(t)
    lo, hi = 0.0, float(t.min()) * 0.999
    best = lo
    for _round in range(4):
        ls = np.linspace(lo, hi, 201)
        sse = ((np.log(ls[:, None] + roof[None, :]) - logt[None, :]) ** 2 * wt[None, :]).sum(axis=1)
        best = float(ls[int(np.argmin(sse))])
        step = (hi - lo) / 200
        lo, hi = max(best - step, 0.0), min(best + step, float(t.min()) * 0.999)
    return best
