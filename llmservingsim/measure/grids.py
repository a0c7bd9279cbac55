"""The sizes a measured bundle covers (docs/profile-bundles.md; no torch needed here).

``FULL`` is the grid of the shipped LLMServingSim bundles (profiles/RTXPRO6000/.../tp1):
dense ops at 1-16 tokens, then every 4 to 64, then every 16 to 2048; per-sequence ops at
1-16, every 4 to 64, every 16 to 256; attention on the power-of-two grid the loader reads
(chunk 0 and 16-2048, n_decode 0 and 1-256, KV 0 and 16-16384). ``TINY`` is a small grid
with the same structure, for tests and for trying the profiler on a CPU.

Invariants: every axis is sorted and duplicate-free; the attention axes are powers of two
(``llmservingsim.profiles`` ignores other values); ``kv`` starts with 0 (no prior context)
and every decode has at least ``kv[1]`` tokens of KV, as in the shipped grids.
"""
from __future__ import annotations

from dataclasses import dataclass


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

    def prefill_points(self) -> list[tuple[int, int]]:
        """(chunk, prior context) of the prefill-only grid."""
        return [(c, k) for c in self.chunks for k in self.kv]

    def decode_points(self) -> list[tuple[int, int]]:
        """(decodes, KV length per decode) of the decode-only grid."""
        return [(n, k) for n in self.n_decode for k in self.kv if k > 0]

    def describe(self) -> dict:
        """The grid as meta.yaml records it."""
        return {"name": self.name, "tokens": _span(self.tokens), "sequences": _span(self.sequences),
                "chunks": "0, " + _span(self.chunks), "n_decode": "0, " + _span(self.n_decode),
                "kv": _span(self.kv)}


def _span(xs: tuple[int, ...]) -> str:
    return ", ".join(map(str, xs)) if len(xs) <= 6 else f"{xs[0]}..{xs[-1]} ({len(xs)} points)"


FULL = Grid("full",
            tokens=_steps((1, 16, 1), (20, 64, 4), (80, 2048, 16)),
            sequences=_steps((1, 16, 1), (20, 64, 4), (80, 256, 16)),
            chunks=_pow2(16, 2048), kv=(0,) + _pow2(16, 16384), n_decode=_pow2(1, 256))

TINY = Grid("tiny", tokens=(1, 2, 4, 8, 16, 32), sequences=(1, 2, 4),
            chunks=(16, 32), kv=(0, 16, 32), n_decode=(1, 2))

GRIDS = {"full": FULL, "tiny": TINY}
