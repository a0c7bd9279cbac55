"""Performance model: the compute time of one engine step from a profile bundle.

A step is one flattened forward pass over every scheduled token (prefill chunks and
decodes together). Its compute time is, per rank (tensor parallelism is already in the
bundle: one layer profiled with heads and widths divided by TP):

- token-wise ops from ``dense.csv`` at the step's total token count, once per layer
  (``layernorm`` twice per layer: input and post-attention norms; ``embedding`` and
  ``final_layernorm`` once per model);
- attention from ``attention.csv`` per layer: a mixed batch is looked up on the 4-D grid at
  (sum of prefill chunks, their token-weighted mean prior context, number of decodes,
  mean decode KV length), then corrected for uneven decode lengths with the skew fit:
  t = t_mean + alpha * (t_max - t_mean), alpha from ``skew_fit.csv``'s bucket for the batch
  (default ``alpha_default`` from meta.yaml);
- mixture-of-experts layers from ``moe.csv`` at the expected number of distinct experts the
  step's tokens activate, E * (1 - (1 - k/E)^T);
- per-sequence ops (``lm_head``, ``sampler``) at the number of scheduled sequences.
Communication is not in the bundle (the execution-graph generator adds it), nor is the
framework's own cost per step (``overhead_model``).
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Sequence

from .interp import WeightedSum
from .model_config import ModelSpec
from .profiles import ProfileBundle

ONCE_PER_MODEL = {"embedding": 1, "final_layernorm": 1}
PER_LAYER_MULT = {"layernorm": 2}


@dataclass(slots=True)
class BatchShape:
    """What the performance model needs to know about a step."""
    prefill_tokens: int          # sum of prefill chunks
    prefill_ctx: float           # token-weighted mean prior context of the chunks
    num_prefills: int
    num_decodes: int
    decode_kv_sum: int           # sum of decode KV lengths (context incl. the new token)
    decode_kv_max: int
    decode_kv_min: int

    @property
    def num_tokens(self) -> int:
        return self.prefill_tokens + self.num_decodes

    @property
    def num_seqs(self) -> int:
        return self.num_prefills + self.num_decodes


def batch_shape(prefills: Sequence[tuple[int, int]], decode_kvs: Sequence[int]) -> BatchShape:
    pt = sum(c for c, _ in prefills)
    pctx = (sum(c * k for c, k in prefills) / pt) if pt else 0.0
    if decode_kvs:
        return BatchShape(pt, pctx, len(prefills), len(decode_kvs), sum(decode_kvs),
                          max(decode_kvs), min(decode_kvs))
    return BatchShape(pt, pctx, len(prefills), 0, 0, 0, 0)


def _no_skew(rate: float, kv_max: int) -> float:
    return 0.0


def _label(bins: list, labels: list, x: float):
    """The profiler's bucketing (LLMServingSim ``_bucket_label``): label i covers
    (bins[i], bins[i+1]]; a value beyond the last edge takes the last label."""
    return _label_at(labels, bisect.bisect_left(bins, x))


def _label_at(labels: list, k: int):
    """``_label``'s label for ``k = bisect_left(bins, x)``."""
    i = k - 1
    if i < 0:
        i = 0
    return labels[min(i, len(labels) - 1)] if labels else None


def _label_span(bins: list, labels: list, x: float) -> tuple:
    """``(_label(bins, labels, x), lo, hi)``: the label and the interval lo < x <= hi over
    which it holds (``bisect_left`` gives the same index there), for a caller whose x moves
    little from call to call."""
    k = bisect.bisect_left(bins, x)
    return (_label_at(labels, k), bins[k - 1] if k > 0 else -math.inf,
            bins[k] if k < len(bins) else math.inf)


class PerformanceModel:
    def __init__(self, model: ModelSpec, bundle: ProfileBundle, pp: int = 1):
        self.model = model
        self.bundle = bundle
        self.layers_per_stage = -(-model.num_layers // pp)
        self.pp = pp
        self._dense_memo: dict[int, float] = {}
        self._seq_memo: dict[int, float] = {}
        self._decode_memo: dict = {}        # decodes -> decode_fn
        self._stretch_memo: dict = {}       # decodes -> what decode_stretch fixes
        dense = bundle.dense
        L = self.layers_per_stage
        self._dense_terms = []
        for name, table in sorted(dense.items()):
            if name in ONCE_PER_MODEL:
                mult = ONCE_PER_MODEL[name]         # see once_us for pipeline parallelism
            else:
                mult = PER_LAYER_MULT.get(name, 1) * L
            self._dense_terms.append((mult, table))
        self._dense_sum = WeightedSum(self._dense_terms)
        self._seq_tables = [bundle.per_sequence[k] for k in sorted(bundle.per_sequence)]
        if model.is_moe and bundle.moe is None:
            from .errors import ProfileError
            raise ProfileError(f"{model.name} is a mixture-of-experts model but the bundle has no moe.csv "
                               f"(expected {bundle.path / 'moe.csv'})", file=str(bundle.path / "moe.csv"))

    # ---- pieces (µs, per stage) ------------------------------------------------------------
    def dense_us(self, tokens: int) -> float:
        v = self._dense_memo.get(tokens)
        if v is None:
            v = self._dense_sum(tokens)
            if self.bundle.moe is not None and self.model.is_moe:
                v += self.layers_per_stage * self.moe_us(tokens)
            self._dense_memo[tokens] = v
        return v

    def moe_us(self, tokens: int) -> float:
        """One MoE layer at the expected number of distinct experts T tokens activate."""
        E, k = self.model.num_experts, self.model.experts_per_token
        return self.bundle.moe(tokens, E * (1.0 - (1.0 - k / E) ** tokens))

    def once_us(self, b: BatchShape) -> float:
        """Ops that run once per step whatever the pipeline depth: embedding, final norm,
        lm_head and sampler (on the first / last stage)."""
        dense = self.bundle.dense
        return (sum(dense[name](b.num_tokens) for name in ONCE_PER_MODEL if name in dense)
                + self.per_sequence_us(b.num_seqs))

    def per_sequence_us(self, seqs: int) -> float:
        v = self._seq_memo.get(seqs)
        if v is None:
            v = sum(t(seqs) for t in self._seq_tables)
            self._seq_memo[seqs] = v
        return v

    def attention_us(self, b: BatchShape) -> float:
        """Per-layer attention time for the batch."""
        att = self.bundle.attention
        nd = b.num_decodes
        if nd == 0:
            return att.prefill(b.prefill_tokens, b.prefill_ctx) if b.prefill_tokens else 0.0
        if not b.prefill_tokens:
            decode = att.decode
            return self._skewed(decode.at_row(nd), self._alpha_of(0, nd, 0.0), nd,
                                b.decode_kv_sum / nd, b.decode_kv_min, b.decode_kv_max)
        return self._skewed(att.mixed.line(b.prefill_tokens, b.prefill_ctx, nd),
                            self._alpha_of(b.prefill_tokens, nd, b.prefill_ctx),
                            nd, b.decode_kv_sum / nd, b.decode_kv_min, b.decode_kv_max)

    def decode_fn(self, nd: int):
        """``decode_us`` at ``nd`` sequences as a function ``(kv_sum, kv_max, kv_min) -> µs``,
        built once per batch size (it runs every decode step): the dense and per-sequence
        terms, the decode grid's row at ``nd`` and the skew fit's buckets fixed by ``nd``
        are looked up here."""
        f = self._decode_memo.get(nd)
        if f is None:
            decode = self.bundle.attention.decode
            dense, seq, L = self.dense_us(nd), self.per_sequence_us(nd), self.layers_per_stage
            at, alpha_of, skewed = decode.at_row(nd), self._alpha_of(0, nd, 0.0), self._skewed

            def f(kv_sum: int, kv_max: int, kv_min: int) -> float:
                return dense + L * skewed(at, alpha_of, nd, kv_sum / nd, kv_min, kv_max) + seq
            self._decode_memo[nd] = f
        return f

    @staticmethod
    def _skewed(at, alpha_of, nd: int, mean_kv: float, kv_min: int, kv_max: int) -> float:
        """Attention at the decodes' mean KV length ``at(mean_kv)``, corrected for uneven
        lengths with the skew fit: t_mean + alpha * (t_max - t_mean), ``at(kv)`` being the
        grid's time with the decodes at KV length kv and ``alpha_of(rate, kv_max)`` the
        batch's alpha (``_alpha_of``)."""
        t_mean = at(mean_kv)
        if nd < 2 or kv_max == kv_min:
            return t_mean
        alpha = alpha_of((mean_kv - kv_min) / (kv_max - kv_min), kv_max)
        if alpha == 0.0:
            return t_mean
        t_max = at(kv_max)
        if t_max <= t_mean:       # interpolation at an axis edge: no negative correction
            return t_mean
        return t_mean + alpha * (t_max - t_mean)

    def _alpha_of(self, prefill_tokens: int, nd: int, prefill_ctx: float):
        """The skew fit's alpha for a batch with these prefill tokens, decodes and prefill
        context, as a function ``(rate, kv_max) -> alpha`` of the decodes' spread rate
        (mean - min) / (max - min) and longest KV length, looked up as the profiler fitted it
        (LLMServingSim ``_skew_alpha``): the bucket key's prefill chunk must be a profiled
        grid value (a step's summed chunk rarely is), otherwise the pooled
        ``alpha_default``; no fit (or ``skew_fit.enabled: false``) means no correction. The
        labels fixed by the arguments are looked up here, once."""
        const, by_labels = self._alpha_parts(prefill_tokens, nd, prefill_ctx)
        if by_labels is None:
            return _no_skew if const == 0.0 else (lambda rate, kv_max: const)
        sk = self.bundle.skew
        sr_bins, sr_labels, kvb_bins, kvb_labels = sk.sr_bins, sk.sr_labels, sk.kvb_bins, sk.kvb_labels
        return lambda rate, kv_max: by_labels(_label(sr_bins, sr_labels, rate), _label(kvb_bins, kvb_labels, kv_max))

    def _alpha_parts(self, prefill_tokens: int, nd: int, prefill_ctx: float) -> tuple:
        """``_alpha_of``'s lookup in two parts: ``(alpha, None)`` when alpha does not depend
        on the decodes (no fit: 0.0; a prefill chunk off the grid: ``alpha_default``), else
        ``(None, f)`` with ``f(rate_label, kv_max_label) -> alpha`` (the labels of the
        spread rate and of the longest KV length, ``_label`` over the fit's bins)."""
        sk = self.bundle.skew
        if sk is None:
            return 0.0, None
        pc = float(prefill_tokens)
        if pc not in sk.pc_set:
            return sk.alpha_default, None
        n_label = _label(sk.n_bins, sk.n_labels, nd)
        kp_label = _label(sk.kp_bins, sk.kp_labels, prefill_ctx)
        get, default = sk.table.get, sk.alpha_default
        return None, lambda rate_label, kv_label: get((pc, n_label, rate_label, kv_label, kp_label), default)

    def compute_us(self, b: BatchShape) -> float:
        """Compute time of one pipeline stage with the once-per-step ops (µs): dense +
        attention + per-sequence. With pp stages a step is pp x (this - once_us) + once_us."""
        if not b.prefill_tokens and b.num_decodes:
            return self.decode_us(b.num_decodes, b.decode_kv_sum, b.decode_kv_max, b.decode_kv_min)
        return (self.dense_us(b.num_tokens) + self.layers_per_stage * self.attention_us(b)
                + self.per_sequence_us(b.num_seqs))

    def decode_us(self, nd: int, kv_sum: int, kv_max: int, kv_min: int) -> float:
        """``compute_us`` of a pure-decode step of ``nd`` sequences whose KV lengths sum to
        ``kv_sum`` (fast-forward times its steps this way, without building their shapes)."""
        return self.decode_fn(nd)(kv_sum, kv_max, kv_min)

    def decode_stretch(self, nd: int, kv_sum: int, kv_max: int, kv_min: int, timing=None):
        """``decode_us(nd, kv_sum + nd * j, kv_max + j, kv_min + j)`` for j = 0, 1, 2, ...
        (a generator): the steps of a fast-forwarded run, where every sequence grows by one
        token a step. ``timing``: ``(cls, comm_ns, overhead_ns, min_ns)``, then each step is
        yielded as the ``cls`` record ``StepTimer`` makes of that float instead (``step_timer._timing``'s
        fields in its integers: compute ``round(us * 1000.0)``, total compute + comm + overhead,
        at least ``min_ns``), built here so that a run resumes one generator a step, not two, and
        without the record's ``__init__`` (an instance of the slotted class, its four slots
        stored: the same object ``cls(total, compute, comm, overhead)`` is). Each value is the same float ``decode_us`` gives (the same operations
        in the same order: ``decode_fn``, ``_skewed`` and ``GridND.at_row`` written out),
        with what ``nd`` fixes looked up once per batch size, the grid's row read through
        the piece that holds each KV length (``GridND.row_piece``, looked up again only when
        the mean or the longest length leaves its piece) and the skew fit's alpha looked up
        once per pair of bucket labels, each label kept with the interval where it holds
        (``_label_span``).

        Pieces, label intervals and alphas are functions of their arguments (the batch size
        fixes the rest), so they are kept per batch size for the next run (``_StretchState``:
        fast-forward's runs are short, and the next run of a size starts where the last one
        stopped)."""
        fixed = self._stretch_memo.get(nd)
        if fixed is None:       # what nd fixes, once per batch size
            decode = self.bundle.attention.decode
            const, by_labels = self._alpha_parts(0, nd, 0.0)
            fixed = self._stretch_memo[nd] = (self.dense_us(nd), self.per_sequence_us(nd), decode.row(nd),
                                              decode.row_piece, const, by_labels, _StretchState())
        dense, seq, row, piece, const, by_labels, held = fixed
        if timing is None:
            make = None
        else:
            make = object.__new__
            cls, comm, overhead, min_ns = timing
            fixed_ns = comm + overhead
        w = row[0]
        L = self.layers_per_stage
        m_lo, m_hi, ma, ms, m0, md0, m1, md1 = held.mean_piece
        x_lo, x_hi, xa, xs, x0, xd0, x1, xd1 = held.max_piece
        if by_labels is not None:
            sk = self.bundle.skew
            sr_bins, sr_labels, kvb_bins, kvb_labels = sk.sr_bins, sk.sr_labels, sk.kvb_bins, sk.kvb_labels
            # kv_max grows by one a step; the spread rate is the same real number every step
            # (mean, min and max all grow by one) but its float may move by an ulp
            kv_label, kv_lo, kv_hi, sr_label, sr_lo, sr_hi, alpha = held.labels
            alphas = held.alphas
        else:
            alpha = const
        # _skewed's test, the same every step: the longest and shortest lengths both grow by one
        skewed = nd >= 2 and kv_max != kv_min
        while True:
            mean_kv = kv_sum / nd
            if not m_lo <= mean_kv < m_hi:
                held.mean_piece = p = piece(row, mean_kv)
                m_lo, m_hi, ma, ms, m0, md0, m1, md1 = p
            u = (mean_kv - ma) / ms
            lo = m0 + u * md0
            t = lo + w * ((m1 + u * md1) - lo)          # at(mean_kv)
            if skewed:          # _skewed's correction
                if by_labels is not None:
                    rate = (mean_kv - kv_min) / (kv_max - kv_min)
                    kv_new = not kv_lo < kv_max <= kv_hi
                    sr_new = not sr_lo < rate <= sr_hi
                    if kv_new or sr_new:
                        if kv_new:
                            kv_label, kv_lo, kv_hi = _label_span(kvb_bins, kvb_labels, kv_max)
                        if sr_new:
                            sr_label, sr_lo, sr_hi = _label_span(sr_bins, sr_labels, rate)
                        key = (sr_label, kv_label)
                        alpha = alphas.get(key)
                        if alpha is None:
                            alpha = alphas[key] = by_labels(*key)
                        # written as one: the alpha is that of these two labels
                        held.labels = (kv_label, kv_lo, kv_hi, sr_label, sr_lo, sr_hi, alpha)
                if alpha != 0.0:
                    if not x_lo <= kv_max < x_hi:
                        held.max_piece = p = piece(row, kv_max)
                        x_lo, x_hi, xa, xs, x0, xd0, x1, xd1 = p
                    u = (kv_max - xa) / xs
                    lo = x0 + u * xd0
                    t_max = lo + w * ((x1 + u * xd1) - lo)      # at(kv_max)
                    if t_max > t:
                        t = t + alpha * (t_max - t)
            if make is None:
                yield dense + L * t + seq
            else:
                compute = round((dense + L * t + seq) * 1000.0)
                total = compute + fixed_ns
                st = make(cls)
                st.total_ns = total if total >= min_ns else min_ns
                st.compute_ns = compute
                st.comm_ns = comm
                st.overhead_ns = overhead
                yield st
            kv_sum += nd
            kv_max += 1
            kv_min += 1


#: a piece that holds no x (``not lo <= x < hi``): the first read looks one up
_NO_PIECE = (math.inf, math.inf, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0)


class _StretchState:
    """What ``decode_stretch`` keeps of its last run at one batch size: the row's pieces
    at the mean and at the longest KV length (``GridND.row_piece``); ``labels``: the skew
    labels of the longest length and of the spread rate, each with the interval where it
    holds (``_label_span``: lo < x <= hi), and the alpha of that label pair, one tuple
    ``(kv_label, kv_lo, kv_hi, sr_label, sr_lo, sr_hi, alpha)``; the alphas by label pair.
    Each holds wherever its interval does, so any run of the size may start from them; a
    run writes back what it looks up."""
    __slots__ = ("mean_piece", "max_piece", "labels", "alphas")

    def __init__(self) -> None:
        self.mean_piece = self.max_piece = _NO_PIECE
        self.labels = (None, math.inf, math.inf, None, math.inf, math.inf, None)
        self.alphas: dict = {}
