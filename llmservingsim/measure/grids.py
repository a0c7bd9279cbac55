"""The sizes a measured bundle covers (docs/profile-bundles.md; no torch needed here).

``FULL`` is the grid of the shipped LLMServingSim bundles (profiles/RTXPRO6000/.../tp1):
dense ops at 1-16 tokens, then every 4 to 64, then every 16 to 2048; per-sequence ops at
1-16, every 4 to 64, every 16 to 256; attention on the power-of-two grid the loader reads
(chunk 0 and 16-2048, n_decode 0 and 1-256, KV 0 and 16-16384). ``TINY`` is a small grid
with the same structure, for tests and for trying the profiler on a CPU.

moe.csv (mixture-of-experts models) is measured at ``moe_tokens`` tokens, powers of two, and
at each token count T at every distinct-expert count ``A`` of the model's expert axis,
k, 2k, 4k, ... below E and E itself (k experts per token, E experts), that T tokens can
activate (``A <= T * k``): the shipped measured moe.csv's points (Qwen3-30B-A3B: T 1-2048,
A 8-128). The token axis is extended by doublings until ``T * k >= E``, so the largest token
count holds every expert count (the loader requires it).

Invariants: every axis is sorted and duplicate-free; the attention axes are powers of two
(``llmservingsim.profiles`` ignores other values); ``kv`` starts with 0 (no prior context)
and every decode has at least ``kv[1]`` tokens of KV, as in the shipped grids.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


def _steps(*spans: tuple[int, int, int]) -> tuple[int, ...]:
    """The union of ``range(start, stop + 1, step)`` for each span, sorted."""
    return tuple(sorted({x for a, b, s in spans for x in range(a, b + 1, s)}))


def _pow2(lo: int, hi: int) -> tuple[int, ...]:
    out, x = [], lo
    while x <= hi:
        out.append(x)
        x *= 2
    return tuple(out)


@dataclass(frozen=True)
class Grid:
    name: str
    tokens: tuple[int, ...]          # dense.csv
    sequences: tuple[int, ...]       # per_sequence.csv
    chunks: tuple[int, ...]          # attention prefill chunk (> 0)
    kv: tuple[int, ...]              # attention context lengths; kv[0] == 0
    n_decode: tuple[int, ...]        # attention decode batch sizes (> 0)
    moe_tokens: tuple[int, ...] = ()  # moe.csv token counts (powers of two)

    def prefill_points(self) -> list[tuple[int, int]]:
        """(chunk, prior context) of the prefill-only grid."""
        return [(c, k) for c in self.chunks for k in self.kv]

    def decode_points(self) -> list[tuple[int, int]]:
        """(decodes, KV length per decode) of the decode-only grid."""
        return [(n, k) for n in self.n_decode for k in self.kv if k > 0]

    def moe_points(self, num_experts: int, k: int) -> list[tuple[int, int]]:
        """(tokens, distinct activated experts) of moe.csv for E = ``num_experts`` experts, k
        per token (see the module docstring)."""
        axis, a = [], k
        while a < num_experts:
            axis.append(a)
            a *= 2
        axis.append(num_experts)
        tokens = list(self.moe_tokens)
        while tokens[-1] * k < num_experts:
            tokens.append(tokens[-1] * 2)
        return [(t, a) for t in tokens for a in axis if a <= t * k]

    def describe(self, moe_points: Optional[list[tuple[int, int]]] = None) -> dict:
        """The grid as meta.yaml records it, with the moe.csv axes of ``moe_points``."""
        out = {"name": self.name, "tokens": _span(self.tokens), "sequences": _span(self.sequences),
               "chunks": "0, " + _span(self.chunks), "n_decode": "0, " + _span(self.n_decode),
               "kv": _span(self.kv)}
        if moe_points:
            out["moe_tokens"] = _span(tuple(sorted({t for t, _ in moe_points})))
            out["moe_activated_experts"] = _span(tuple(sorted({a for _, a in moe_points})))
        return out


def _span(xs: tuple[int, ...]) -> str:
    return ", ".join(map(str, xs)) if len(xs) <= 6 else f"{xs[0]}..{xs[-1]} ({len(xs)} points)"


FULL = Grid("full",
            tokens=_steps((1, 16, 1), (20, 64, 4), (80, 2048, 16)),
            sequences=_steps((1, 16, 1), (20, 64, 4), (80, 256, 16)),
            chunks=_pow2(16, 2048), kv=(0,) + _pow2(16, 16384), n_decode=_pow2(1, 256),
            moe_tokens=_pow2(1, 2048))

TINY = Grid("tiny", tokens=(1, 2, 4, 8, 16, 32), sequences=(1, 2, 4),
            chunks=(16, 32), kv=(0, 16, 32), n_decode=(1, 2), moe_tokens=(1, 2, 4, 8))

GRIDS = {"full": FULL, "tiny": TINY}
