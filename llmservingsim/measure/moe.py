"""One mixture-of-experts layer on one rank, at (tokens, distinct activated experts): the
moe.csv rows (docs/profiler.md, "Mixture-of-experts layers").

What runs, in vLLM's order (``fused_moe``): the router GEMM over all E experts (replicated on
every rank), softmax and top-k of the logits with the k weights renormalised, the gather of
each routed (token, expert) pair's hidden state in expert order, one grouped GEMM for the
experts' gate/up projections, SiLU-and-mul, one grouped GEMM for their down projections, the
routing weights applied and the k outputs of every token summed back (``index_add_``). Each
expert's gate/up/down widths are ``moe_intermediate_size / tp`` (vLLM's TP without expert
parallelism shards every expert); expert parallelism is priced from this table by
``expert_parallel.MoERankTimer`` (docs/data-expert-parallel.md).

Which experts the tokens go to: the table's axis is the number of distinct experts a step
activates, so the measurement must activate exactly that many; the learned router of random
weights would not. The top-k *weights* come from the router that ran, the expert *ids* from a
fixed balanced assignment (:func:`balanced_assignment`): pair ``p = t * k + j`` (token t's
j-th choice) goes to expert ``p mod A``. Invariants: exactly ``A`` experts get pairs, each
token's k experts are distinct (``k <= A``), and the experts' pair counts differ by at most
one. Balanced load is what the performance model prices (it looks the table up at the
expected distinct experts, never at an uneven load) and how the shipped measured moe.csv
was made (the LLMServingSim profiler forces the same cyclic assignment). Uniform random
top-k would hit an ``A`` that varies with the seed, not the grid point.

Grouped GEMM: ``torch._grouped_mm`` over the activated experts' weights and the pairs' expert
offsets where this torch and device run it (probed once, :func:`grouped_mm_works`), else one
``torch.mm`` per activated expert on its contiguous slice of pairs (same arithmetic, more
launches). meta.yaml ``moe`` records which.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn.functional as F

from .ops import DTYPE, RankShapes, _randn


def balanced_assignment(tokens: int, activated: int, k: int) -> torch.Tensor:
    """Expert id of every routed pair, shape (tokens, k): pair ``t * k + j`` -> ``(t * k + j)
    mod activated`` (see the module docstring for the invariants)."""
    if not 1 <= k <= activated <= tokens * k:
        raise ValueError(f"need k <= activated experts <= tokens * k, got k={k}, activated={activated}, "
                         f"tokens={tokens}")
    return (torch.arange(tokens * k) % activated).view(tokens, k)


def grouped_mm_works(device: torch.device) -> bool:
    """Whether ``torch._grouped_mm`` exists and runs bf16 groups (one empty) on ``device``."""
    if not hasattr(torch, "_grouped_mm"):
        return False
    try:
        a = torch.ones(32, 64, device=device, dtype=DTYPE)
        w = torch.ones(2, 32, 64, device=device, dtype=DTYPE)
        offs = torch.tensor([0, 32], device=device, dtype=torch.int32)
        out = torch._grouped_mm(a, w.transpose(-2, -1), offs=offs)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return tuple(out.shape) == (32, 32) and float(out[0, 0]) == 64.0
    except (RuntimeError, NotImplementedError, TypeError):
        return False


class MoELayer:
    """Builds the closure of one MoE layer at (tokens, activated experts) on one rank. Router
    and expert weights (all E experts, random normal) are allocated once and shared."""

    def __init__(self, shapes: RankShapes, device: torch.device, grouped: bool | None = None):
        s = shapes
        if not s.num_experts:
            raise ValueError("not a mixture-of-experts model")
        self.s, self.device = s, device
        self.grouped = grouped_mm_works(device) if grouped is None else grouped
        h, mi, E = s.hidden, s.moe_intermediate, s.num_experts
        self.router = _randn(E, h, device=device)
        self.w13 = _randn(E, 2 * mi, h, device=device)      # (out, in) per expert, as nn.Linear
        self.w2 = _randn(E, h, mi, device=device)

    @property
    def gemm(self) -> str:
        return "torch._grouped_mm" if self.grouped else "torch.mm per activated expert"

    def __call__(self, tokens: int, activated: int, x: Optional[torch.Tensor] = None) -> Callable[[], torch.Tensor]:
        """The layer over ``tokens`` hidden states (``x``, default random) routed to
        ``activated`` experts; the closure returns the layer's output (tokens x hidden)."""
        s, dev, k, mi = self.s, self.device, self.s.top_k, self.s.moe_intermediate
        experts = balanced_assignment(tokens, activated, k).reshape(-1)
        order = torch.argsort(experts, stable=True)                 # pairs in expert order
        counts = torch.bincount(experts, minlength=activated)
        token_of = (order // k).to(dev)                             # token of each sorted pair
        order = order.to(dev)
        bounds = torch.cumsum(counts, 0).tolist()
        offs = torch.tensor(bounds, device=dev, dtype=torch.int32)
        slices = list(zip([0] + bounds[:-1], bounds))
        w13, w2 = self.w13[:activated], self.w2[:activated]        # the activated experts' weights
        x = _randn(tokens, s.hidden, device=dev) if x is None else x
        h13 = torch.empty(tokens * k, 2 * mi, device=dev, dtype=DTYPE)
        down = torch.empty(tokens * k, s.hidden, device=dev, dtype=DTYPE)
        out = torch.empty(tokens, s.hidden, device=dev, dtype=DTYPE)

        def grouped(a, w, dst):
            if self.grouped:
                return torch._grouped_mm(a, w.transpose(-2, -1), offs=offs)
            for e, (lo, hi) in enumerate(slices):
                torch.mm(a[lo:hi], w[e].t(), out=dst[lo:hi])
            return dst

        def run() -> torch.Tensor:
            logits = F.linear(x, self.router)                           # router / gate GEMM
            weights, _ = torch.topk(torch.softmax(logits.float(), dim=-1), k, dim=-1)
            weights = weights / weights.sum(dim=-1, keepdim=True)      # renormalised top-k
            xs = x.index_select(0, token_of)
            g = grouped(xs, w13, h13)
            act = F.silu(g[:, :mi]) * g[:, mi:]
            y = grouped(act, w2, down)
            y = y * weights.reshape(-1)[order].unsqueeze(1).to(DTYPE)
            return out.zero_().index_add_(0, token_of, y)
        return run
