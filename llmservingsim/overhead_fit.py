"""Fits of the overhead model (``overhead_model``) to the measured step-residual tables.

A bundle's ``step_overhead.csv`` (the AgentServeSim artifact: ``prefill_chunk, n_decode,
wall_us, kernel_us, overhead_us``) times real vLLM steps of one prefill chunk plus
``n_decode`` decodes, synchronous scheduling, against the sum of the bundle's profiled
kernels (``kernel_us``, the artifact's simulator with log-space attention interpolation;
ours interpolates linearly, within 1 % of it at the tables' shapes, docs/overhead-model.md)
and, at TP > 1, a bandwidth-only all-reduce model (``wall - kernel - overhead`` equals
(tokens x hidden x 2 B) x 2 x layers / 35.2 GB/s in every row). Here every row is reduced to
``wall - kernel``: what a step costs beyond its kernels.

Two fits:
* ``fit_framework(rows)``: robust (Huber) least squares of
  ``wall - kernel = step_us + prefill_us [pc > 0] + prefill_compute * kernel * pc / (pc + nd)``
  over TP1 rows (no collectives), residuals relative to the step's wall time (a 2-second
  prefill must not outweigh a 5 ms decode step), with leave-one-out residuals;
* ``fit_collectives(rows, layers, hidden, framework)``: at TP2, the per-all-reduce cost
  ``(wall - kernel - framework) / (2 layers)`` against the message size, split where vLLM
  switches from its custom all-reduce to NCCL (8 MiB on 2 GPUs), a line
  ``latency_us + bytes / bandwidth`` in each regime.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from .overhead_model import Framework, Regime

CUSTOM_ALLREDUCE_MAX_BYTES = 8 * 1024 * 1024     # vLLM CustomAllreduce max_size (world size 2)


@dataclass(frozen=True)
class Row:
    pc: int
    nd: int
    wall_us: float
    kernel_us: float

    @property
    def extra_us(self) -> float:
        return self.wall_us - self.kernel_us


def read_rows(path) -> list:
    with open(path, newline="", encoding="utf-8") as f:
        return [Row(int(float(r["prefill_chunk"])), int(float(r["n_decode"])), float(r["wall_us"]),
                    float(r["kernel_us"])) for r in csv.DictReader(f)]


def _features(r: Row) -> list:
    share = r.pc / (r.pc + r.nd) if r.pc + r.nd else 0.0
    return [1.0, 1.0 if r.pc > 0 else 0.0, r.kernel_us * share]


def huber_lstsq(X: np.ndarray, y: np.ndarray, iters: int = 50) -> np.ndarray:
    """Iteratively reweighted least squares with Huber weights (c = 1.345 robust sigma):
    a few bimodal measurements must not set the fit."""
    w = np.ones(len(y))
    coef = np.zeros(X.shape[1])
    for _ in range(iters):
        sw = np.sqrt(w)
        coef, *_ = np.linalg.lstsq(X * sw[:, None], y * sw, rcond=None)
        r = y - X @ coef
        s = 1.4826 * np.median(np.abs(r - np.median(r))) + 1e-9
        c = 1.345 * s
        w_new = np.where(np.abs(r) <= c, 1.0, c / np.maximum(np.abs(r), 1e-12))
        if np.allclose(w_new, w):
            break
        w = w_new
    return coef


def fit_framework(rows: list, fixed: dict | None = None) -> Framework:
    """Framework terms from TP1 residual rows; ``fixed`` pins some terms (by name)."""
    fixed = dict(fixed or {})
    names = ["step_us", "prefill_us", "prefill_compute"]
    X = np.array([_features(r) for r in rows])
    y = np.array([r.extra_us for r in rows])
    free = [i for i, n in enumerate(names) if n not in fixed]
    for i, n in enumerate(names):
        if n in fixed:
            y = y - X[:, i] * fixed[n]
    scale = 1.0 / np.array([r.wall_us for r in rows])
    coef = huber_lstsq(X[:, free] * scale[:, None], y * scale) if free else np.zeros(0)
    vals = dict(fixed)
    vals.update({names[i]: float(c) for i, c in zip(free, coef)})
    return Framework(**vals)


def predict(fw: Framework, r: Row) -> float:
    return fw.us(1 if r.pc else 0, r.pc, r.pc + r.nd, r.kernel_us)


def leave_one_out(rows: list, fixed: dict | None = None) -> list:
    """(row, prediction of the fit without it) for every row."""
    out = []
    for i, r in enumerate(rows):
        fw = fit_framework(rows[:i] + rows[i + 1:], fixed)
        out.append((r, predict(fw, r)))
    return out


def per_allreduce(rows: list, layers: int, hidden: int, framework: Framework, dtype_bytes: int = 2) -> list:
    """(bytes, µs) of one all-reduce for every TP row: the step's cost beyond kernels and
    framework overhead, shared by its 2 x layers all-reduces."""
    pts = []
    for r in rows:
        size = (r.pc + r.nd) * hidden * dtype_bytes
        pts.append((size, (r.extra_us - predict(framework, r)) / (2 * layers), r))
    return pts


def fit_line(pts: list) -> tuple:
    """latency (µs, clamped at 0) and bandwidth (decimal GB/s) of ``t = latency + S / bw``."""
    S = np.array([p[0] for p in pts], dtype=float)
    t = np.array([p[1] for p in pts], dtype=float)
    A = np.column_stack([np.ones_like(S), S])
    (a, b), *_ = np.linalg.lstsq(A, t, rcond=None)
    if a < 0 or S.max() < 2 * S.min():   # through the origin (or too narrow a range for an intercept)
        a, b = 0.0, float(np.dot(S, t) / np.dot(S, S))
    return float(a), float(1e-3 / b)


def implausible(pts: list, busbw_gbs: float) -> list:
    """Points whose all-reduce would beat the measured NCCL bus bandwidth of the pair: no
    collective does, so the step's kernel sum (not the collective) is off there."""
    return [p for p in pts if p[1] < p[0] / (busbw_gbs * 1e3)]


def fit_collectives(rows: list, layers: int, hidden: int, framework: Framework,
                    busbw_gbs: float | None = None) -> tuple:
    """Two regimes of a 2-GPU all-reduce: vLLM's custom all-reduce below 8 MiB, NCCL above.
    NCCL points faster than the measured bus bandwidth ``busbw_gbs`` are left out."""
    pts = per_allreduce(rows, layers, hidden, framework)
    small = [p for p in pts if p[0] < CUSTOM_ALLREDUCE_MAX_BYTES]
    large = [p for p in pts if p[0] >= CUSTOM_ALLREDUCE_MAX_BYTES]
    if busbw_gbs is not None:
        bad = {id(p) for p in implausible(large, busbw_gbs)}
        large = [p for p in large if id(p) not in bad] or large
    a_s, bw_s = fit_line(small)
    a_l, bw_l = fit_line(large)
    return (Regime(a_s, bw_s, CUSTOM_ALLREDUCE_MAX_BYTES), Regime(a_l, bw_l, None))


def table_path(root: Path, hardware: str, model: str, tp: int) -> Path:
    return Path(root) / hardware / model / "bf16" / f"tp{tp}" / "step_overhead.csv"


# ---------------------------------------------------------------- isolated all-reduce benchmarks
# For devices without TP step tables: regimes fitted on public microbenchmarks of vLLM's own
# all-reduce backends (hardware/measurements/allreduce/, README.md there for provenance).

@dataclass(frozen=True)
class ARPoint:
    """One measured all-reduce: ``us`` for ``bytes`` on ``tp`` GPUs with ``backend``;
    ``cuda_graph`` False for a benchmark that launched each kernel eagerly."""
    source: str
    device: str
    backend: str
    cuda_graph: bool
    tp: int
    bytes: int
    us: float


def read_allreduce_table(path) -> list:
    with open(path, newline="", encoding="utf-8") as f:
        return [ARPoint(r["source"], r["device"], r["backend"], r["cuda_graph"] == "yes", int(r["tp"]),
                        int(r["bytes"]), float(r["time_us"])) for r in csv.DictReader(f)]


KiB, MiB = 1024, 1024 * 1024
# What vLLM 0.19 (V1, defaults: torch symmetric memory on, NCCL symmetric memory off) runs for
# an all-reduce of S bytes, per device capability and TP size: (backend, S below which it is
# chosen), in dispatch order. Custom all-reduce below min(8 MiB, CUSTOM_ALL_REDUCE_MAX_SIZES),
# 1-stage or 2-stage by its kernel's own switch (2 GPUs always 1-stage; below 512 KiB on 4 and
# 256 KiB on 8: custom_all_reduce.cuh); then torch symmetric memory below
# SYMM_MEM_ALL_REDUCE_MAX_SIZES (multimem on 4-8 GPUs of capability 9.0, two-shot otherwise);
# then NCCL (vllm/distributed/device_communicators/all_reduce_utils.py, symm_mem.py).
# Capability 8.0 (A100) has no row in either max-size table: custom all-reduce keeps its
# default 8 MiB limit and torch symmetric memory is not used, so NCCL takes over at 8 MiB.
VLLM_DISPATCH = {
    "8.0": {
        2: (("ca_1stage", 8 * MiB), ("pynccl", None)),
        4: (("ca_1stage", 512 * KiB), ("ca_2stage", 8 * MiB), ("pynccl", None)),
        8: (("ca_1stage", 256 * KiB), ("ca_2stage", 8 * MiB), ("pynccl", None)),
    },
    "9.0": {
        2: (("ca_1stage", 8 * MiB), ("symm_mem_two_shot", 64 * MiB), ("pynccl", None)),
        4: (("ca_1stage", 512 * KiB), ("ca_2stage", 8 * MiB), ("symm_mem_multimem", 32 * MiB), ("pynccl", None)),
        8: (("ca_1stage", 256 * KiB), ("symm_mem_multimem", 64 * MiB), ("pynccl", None)),
    },
}


def regime_points(points: list, tp: int, backend: str, lo: int, hi) -> tuple:
    """The measurements a regime of ``backend`` on [lo, hi) bytes is fitted on, and how:
    CUDA-graph points of that backend and TP inside the range ("in range"); with fewer than
    two, every CUDA-graph point of it ("extrapolated"); with fewer than two, the eager points
    ("eager": launch cost included, an upper bound); else none (the device's NCCL model)."""
    mine = [p for p in points if p.tp == tp and p.backend == backend]
    graph = [p for p in mine if p.cuda_graph]
    inside = [p for p in graph if p.bytes >= lo and (hi is None or p.bytes < hi)]
    for pts, how in ((inside, "in range"), (graph, "extrapolated"), ([p for p in mine if not p.cuda_graph], "eager")):
        if len({p.bytes for p in pts}) >= 2:
            return pts, how
    return [], "none"


def _line(pts: list) -> Regime:
    a, bw = fit_line([(p.bytes, p.us) for p in pts])
    return Regime(a, bw)


def fit_measured_collectives(points: list, tp: int, dispatch: tuple, fallback: Regime) -> tuple:
    """Regimes of a ``tp``-GPU all-reduce from isolated benchmarks: one line per backend of
    ``dispatch`` (``VLLM_DISPATCH`` row) on its points (``regime_points``), bounded where vLLM
    leaves that backend; a backend without points gets ``fallback`` (the device's NCCL model),
    and neighbouring fallback regimes merge. Returns (regimes, [(backend, lo, hi, how, points)])."""
    regimes, notes, lo = [], [], 0
    for backend, hi in dispatch:
        pts, how = regime_points(points, tp, backend, lo, hi)
        r = replace(_line(pts), max_bytes=hi) if pts else replace(fallback, max_bytes=hi)
        if not pts and regimes and notes[-1][3] == "none":
            regimes[-1] = r
            notes[-1] = (notes[-1][0] + " + " + backend, notes[-1][1], hi, "none", [])
        else:
            regimes.append(r)
            notes.append((backend, lo, hi, how, pts))
        lo = hi
    return tuple(regimes), notes


def leave_one_size_out(pts: list) -> list:
    """(point, prediction of the line fitted without every point of its size) per point."""
    out = []
    for p in pts:
        rest = [q for q in pts if q.bytes != p.bytes]
        out.append((p, _line(rest).us(p.bytes) if len({q.bytes for q in rest}) >= 2 else float("nan")))
    return out
