"""Measure one model's bundle at one TP degree on the local device and write it in the format
of docs/profile-bundles.md: ``<out>/<HARDWARE>/<model>/bf16/tp<N>/{dense,per_sequence,
attention}.csv``, ``moe.csv`` for a mixture-of-experts model, and ``meta.yaml`` (provenance
per TP degree under ``measurements``).

Invariants:
- every written time is a measurement of this run (timing.Timer), except the mixed attention
  rows: the backends run a mixed batch as two kernels (the prefill chunk, then the decodes),
  so a mixed point's time is the sum of its measured prefill-only and decode-only points,
  written as such and recorded in meta.yaml (``attention_mixed``);
- the tables are written into a staging folder renamed to ``tp<N>`` only when complete; an
  existing ``tp<N>`` is never overwritten;
- no skew fit (uneven decode lengths are not measured): the loader applies no correction.
"""
from __future__ import annotations

import csv
import datetime
import os
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Callable, Optional

import torch
import yaml

from ..errors import ConfigError, load_yaml
from ..model_config import ModelSpec
from ..op_cost import PER_SEQUENCE_OPS, dense_ops
from .grids import Grid
from .moe import MoELayer
from .ops import Attention, OpFactory, RankShapes
from .timing import Timer

PROFILER = "agentservesim profile measure"


class Progress:
    """Prints one line per table and about every 10 % of its points (to stderr)."""

    def __init__(self, out=sys.stderr):
        self.out, self.t0 = out, time.monotonic()

    def table(self, name: str, total: int) -> Callable[[int], None]:
        start, step = time.monotonic(), max(1, total // 10)
        print(f"[{time.monotonic() - self.t0:7.1f} s] {name}: {total} points", file=self.out, flush=True)

        def tick(done: int) -> None:
            if done % step == 0 or done == total:
                spent = time.monotonic() - start
                eta = spent / done * (total - done)
                print(f"[{time.monotonic() - self.t0:7.1f} s]   {name} {done}/{total} (eta {eta:.0f} s)",
                      file=self.out, flush=True)
        return tick


def measure_bundle(model: ModelSpec, tp: int, out_root: Path, hardware: str, device: torch.device,
                   grid: Grid, timer: Timer, command: str, progress: Optional[Progress] = None) -> Path:
    """Measure and write the bundle; returns its ``tp<N>`` folder."""
    shapes = RankShapes.of(model, tp)
    base = Path(out_root) / hardware / model.name / "bf16"
    dst = base / f"tp{tp}"
    if dst.exists():
        raise ConfigError(f"{dst} exists; a measured bundle is never overwritten (remove it or choose "
                          f"another --out)", key="--out")
    progress = progress or Progress()
    ops, attn = OpFactory(shapes, device), Attention(shapes, device)
    staging = base / f".tp{tp}.partial"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    started = time.monotonic()
    _write(staging / "dense.csv", ("layer", "tokens", "time_us"),
           _sweep(progress, "dense.csv", [(op, t) for op in dense_ops(model) for t in grid.tokens],
                  lambda op, t: timer.measure(op, ops.dense(op, t))))
    _write(staging / "per_sequence.csv", ("layer", "sequences", "time_us"),
           _sweep(progress, "per_sequence.csv", [(op, n) for op in PER_SEQUENCE_OPS for n in grid.sequences],
                  lambda op, n: timer.measure(op, ops.per_sequence(op, n))))
    pre = _sweep(progress, "attention prefill", grid.prefill_points(),
                 lambda c, k: timer.measure("attention", attn.prefill(c, k)))
    dec = _sweep(progress, "attention decode", grid.decode_points(),
                 lambda n, k: timer.measure("attention", attn.decode(n, k)))
    rows = [(c, k, 0, 0, t) for c, k, t in pre] + [(0, 0, n, k, t) for n, k, t in dec]
    rows += [(c, k, n, kd, tp_ + td) for c, k, tp_ in pre for n, kd, td in dec]
    _write(staging / "attention.csv", ("prefill_chunk", "kv_prefill", "n_decode", "kv_decode", "time_us"), rows)
    moe_record, moe_points = None, None
    if model.is_moe:
        layer = MoELayer(shapes, device)
        moe_points = grid.moe_points(shapes.num_experts, shapes.top_k)
        _write(staging / "moe.csv", ("tokens", "activated_experts", "time_us"),
               _sweep(progress, "moe.csv", moe_points, lambda t, a: timer.measure("moe", layer(t, a))))
        moe_record = {"routing": "router GEMM, softmax top-k (renormalised weights); expert ids from the "
                                 "balanced assignment pair t*k+j -> expert (t*k+j) mod activated_experts",
                      "grouped_gemm": layer.gemm}
    record = {"profiled_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "command": command, "grid": grid.describe(moe_points), "rank_shapes": shapes.describe(),
              "attention_backend": attn.backend,
              "attention_mixed": "sum of the measured prefill-only and decode-only times (the backend runs "
                                 "a mixed batch as two kernels)",
              "timing": _timing(timer, device), "wall_s": round(time.monotonic() - started, 1),
              "not_measured": ["collectives (TP all-reduce: the network model adds them)",
                               "framework overhead per step (hardware/overhead/<device>.yaml)",
                               "skew of uneven decode lengths (no skew fit)"]}
    if moe_record:
        record["moe"] = moe_record
        record["not_measured"].append("uneven expert load (moe.csv: balanced routing)")
    _write_meta(base / "meta.yaml", model, hardware, tp, device, record)
    os.replace(staging, dst)
    return dst


def _sweep(progress: Progress, name: str, points: list[tuple], measure) -> list[tuple]:
    """(point..., µs) for each point, in order."""
    tick, out = progress.table(name, len(points)), []
    for i, p in enumerate(points, start=1):
        out.append(p + (measure(*p),))
        tick(i)
    return out


def _write(path: Path, header: tuple, rows: list[tuple]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(r[:-1] + (f"{r[-1]:.4f}",) for r in rows)


def _timing(timer: Timer, device: torch.device) -> dict:
    if device.type == "cuda":
        method = ("CUDA events around a CUDA-graph replay of `inner` calls" if timer.cuda_graphs
                  else "CUDA events around `inner` eager calls")
    else:
        method = "time.perf_counter_ns around `inner` calls"
    out = {"method": method, "warmup_calls": timer.warmup, "repeats": timer.repeats, "statistic": "median",
           "region_target_us": timer.target_us}
    if timer.eager_ops:
        out["eager_ops"] = sorted(timer.eager_ops)       # capture failed: timed eagerly
    return out


def _write_meta(path: Path, model: ModelSpec, hardware: str, tp: int, device: torch.device, record: dict) -> None:
    """meta.yaml of the bundle: descriptive fields and, per TP degree, this run's record. A
    meta.yaml this profiler wrote before (another TP degree) is extended, not replaced."""
    meta: dict = {}
    if path.exists():
        meta = load_yaml(path, what="bundle meta.yaml") or {}
        if not isinstance(meta, dict) or meta.get("profiler") != PROFILER:
            raise ConfigError(f"{path} was not written by {PROFILER}; measure into another --out",
                              file=str(path))
        if meta.get("model") != model.name or meta.get("hardware") != hardware:
            raise ConfigError(f"{path} is for {meta.get('model')} on {meta.get('hardware')}", file=str(path))
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or platform.machine())
    meta.update({"profiler": PROFILER, "torch_version": str(torch.__version__),
                 "cuda_version": torch.version.cuda, "gpu": gpu, "hardware": hardware,
                 "model": model.name, "variant": "bf16"})
    measurements = meta.setdefault("measurements", {})
    measurements[tp] = record
    meta["tp_degrees"] = sorted(int(k) for k in measurements)
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(meta, f, sort_keys=False, allow_unicode=True)
