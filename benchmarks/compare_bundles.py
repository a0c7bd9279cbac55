"""Compare two profile bundles: per-op and per-step |A / B - 1| (median and 90th percentile).

    PYTHONPATH=.:astra-sim python benchmarks/compare_bundles.py A B [--model M]

A and B are ``tp<N>`` folders (``<root>/<HARDWARE>/<org>/<model>/bf16/tp<N>``), B the
reference. Per op: every row both bundles hold, matched by table, op and size (as
``derive_tp_check.py`` matches them); attention is split into its prefill-only, decode-only
and mixed points. Per step: ``PerformanceModel.compute_us`` of the pure-decode and
single-prefill steps of ``derive_tp_check.step_shapes`` with each bundle. ``--model`` (a
registry name or config.json) defaults to ``<org>/<model>`` of A's path.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from derive_tp_check import _pct, _rows, step_shapes
from llmservingsim.errors import SimError
from llmservingsim.model_config import load_model
from llmservingsim.perf_model import PerformanceModel
from llmservingsim.profiles import load_bundle


def _group(key: tuple) -> str:
    """The op a row belongs to; attention rows by their part of the grid."""
    if key[0] != "attention.csv":
        return key[1]
    chunk, _, n_decode, _ = (float(x) for x in key[2:6])
    return "attention prefill" if not n_decode else "attention decode" if not chunk else "attention mixed"


def op_errors(a: Path, b: Path) -> dict[str, np.ndarray]:
    ra, rb = _rows(a), _rows(b)
    out: dict = {}
    for key in sorted(ra.keys() & rb.keys()):
        out.setdefault(_group(key), []).append(abs(ra[key] / rb[key] - 1))
    return {op: np.array(v) for op, v in sorted(out.items())}


def _load(tp_dir: Path, model_name: str):
    """The bundle in ``tp_dir`` through the simulator's own loader (and its checks)."""
    depth = len(Path(model_name).parts)
    root, hardware = tp_dir.parents[depth + 2], tp_dir.parents[depth + 1].name
    return load_bundle(hardware, model_name, int(tp_dir.name[2:]), tp_dir.parent.name, root=root, cache=False)


def step_errors(a: Path, b: Path, model_ref: str) -> tuple[np.ndarray, int]:
    spec = load_model(model_ref)
    name = f"{a.parents[2].name}/{a.parents[1].name}"
    pa, pb = (PerformanceModel(spec, _load(d.resolve(), name)) for d in (a, b))
    shapes = list(step_shapes())
    return np.array([abs(pa.compute_us(s) / pb.compute_us(s) - 1) for s in shapes]), len(shapes)


def report(a: Path, b: Path, model_ref: str) -> list[str]:
    lines = [f"A = {a}", f"B = {b} (reference)", "",
             "| op | rows | median / p90 |A/B - 1| % |", "|---|---:|---:|"]
    errs = op_errors(a, b)
    if not errs:
        raise SimError(f"{a} and {b} have no row in common", file=str(a))
    for op, e in errs.items():
        lines.append(f"| {op} | {len(e)} | {_pct(e)} |")
    allr = np.concatenate(list(errs.values()))
    lines.append(f"| **all rows** | {len(allr)} | {_pct(allr)} |")
    steps, n = step_errors(a, b, model_ref)
    lines.append(f"| **steps** (decode 1-256 x 512-32k, prefill 128-8k) | {n} | {_pct(steps)} |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("--model", default=None, help="model registry name or config.json (default: from A's path)")
    args = ap.parse_args(argv)
    for d in (args.a, args.b):
        if not d.is_dir() or not d.name.startswith("tp") or not d.name[2:].isdigit():
            print(f"error: {d}: not a bundle's tp<N> folder", file=sys.stderr)
            return 2
    model = args.model or f"{args.a.resolve().parents[2].name}/{args.a.resolve().parents[1].name}"
    try:
        print("\n".join(report(args.a.resolve(), args.b.resolve(), model)))
    except SimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
