"""Derived TP2 (from measured TP1) against measured TP2, old derivation vs new (issue 11).

    PYTHONPATH=.:astra-sim python benchmarks/derive_tp_check.py [--markdown]

For every shipped device/model with measured tp1 and tp2 bundles, derive tp2 from tp1 into a
scratch root twice: with the op-level cost model (llmservingsim/derive_bundle.py, whose
rooflines are fitted on the tp1 tables only, never on the tp2 it is checked against) and with
the previous rule ``t_min + (t_1 - t_min) / k`` (reproduced here as ``old_derive`` for the
comparison only). Reports |derived / measured - 1|:
- per op: every row of dense.csv, per_sequence.csv, attention.csv and moe.csv, matched by
  its key (op name and size), median and 90th percentile per op;
- per step: ``PerformanceModel.compute_us`` of pure-decode steps (1-256 sequences x 512-32k
  context, powers of two) and single-prefill steps (128-8k tokens, no prior context).
Then the B200 Llama-3.1-70B batch-1 decode step (compute from derived bundles + the step's
all-reduces as a run charges them, 2 per layer: ``step_comm_us``) for TP1/2/4/8 against (weight bytes per rank / memory
bandwidth) + the same all-reduces, and the same step on the bundle a run loads from the shipped
profile tree (``derive_bundle.load_or_derive``: measured tp1, every other TP derived on the fly).
Same inputs, same output.
"""
from __future__ import annotations

import argparse
import csv
import shutil
import tempfile
from pathlib import Path

import numpy as np

from llmservingsim.derive_bundle import TABLES, derive, load_or_derive
from llmservingsim.hardware import load_device
from llmservingsim.model_config import load_model
from llmservingsim.op_cost import UNSHARDED
from llmservingsim.paths import profiles_dir
from llmservingsim.perf_model import PerformanceModel, batch_shape
from llmservingsim.profiles import load_bundle

PAIRS = [("RTXPRO6000", "meta-llama/Llama-3.1-8B"), ("RTXPRO6000", "meta-llama/Llama-3.1-70B"),
         ("RTXPRO6000", "Qwen/Qwen3-32B"), ("RTXPRO6000", "Qwen/Qwen3-30B-A3B-Instruct-2507")]
DECODE_N = [2 ** i for i in range(9)]                 # 1 .. 256
DECODE_CTX = [512 * 2 ** i for i in range(7)]         # 512 .. 32768
PREFILL = [128 * 2 ** i for i in range(7)]            # 128 .. 8192


def step_comm_us(hw: str, model, tp: int, shape) -> float:
    """The step's TP all-reduces (µs) as a run charges them: the execution graph with the
    device's fitted collective regimes where it has them (hardware/overhead/), else its
    ring on the device network."""
    from llmservingsim.execution_graph import GraphCommModel
    from llmservingsim.overhead_model import load_overhead
    if tp == 1:
        return 0.0
    regimes = load_overhead(hw).regimes_for(tp)
    return GraphCommModel(model, load_device(hw), tp, 1, regimes=regimes).exposed_comm_ns(shape) / 1000.0


def old_derive(src: Path, dst: Path, k: int) -> None:
    """The previous derivation: sharded ops t_min + (t_1 - t_min) / k, t_min the op's
    smallest time in the table; norms, embedding and sampler unchanged."""
    dst.mkdir(parents=True, exist_ok=True)
    for name in TABLES:
        if not (src / name).exists():
            continue
        with open(src / name, newline="") as f:
            reader = csv.DictReader(f)
            fields, rows = reader.fieldnames, list(reader)
        mins: dict = {}
        for r in rows:
            op = r.get("layer", "attention")
            mins[op] = min(mins.get(op, float("inf")), float(r["time_us"]))
        for r in rows:
            op = r.get("layer", "attention")
            if op not in UNSHARDED:
                t, m = float(r["time_us"]), mins[op]
                r["time_us"] = f"{m + (t - m) / k:.4f}"
        with open(dst / name, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
    if (src / "skew_fit.csv").exists():
        shutil.copyfile(src / "skew_fit.csv", dst / "skew_fit.csv")


def _rows(d: Path) -> dict:
    """(table, op, size...) -> time_us over a bundle folder's tables (duplicates averaged)."""
    acc: dict = {}
    for name in TABLES:
        if not (d / name).exists():
            continue
        with open(d / name, newline="") as f:
            for r in csv.DictReader(f):
                key = (name, r.get("layer", name[:-4])) + tuple(v for k, v in r.items() if k not in ("layer", "time_us"))
                acc.setdefault(key, []).append(float(r["time_us"]))
    return {k: float(np.mean(v)) for k, v in acc.items()}


def op_errors(derived: Path, measured: Path) -> dict[str, np.ndarray]:
    """|derived / measured - 1| per op over the rows both bundles hold."""
    a, b = _rows(derived), _rows(measured)
    out: dict = {}
    for key in sorted(a.keys() & b.keys()):
        out.setdefault(key[1], []).append(abs(a[key] / b[key] - 1))
    return {op: np.array(v) for op, v in out.items()}


def step_shapes():
    for n in DECODE_N:
        for ctx in DECODE_CTX:
            yield batch_shape([], [ctx] * n)
    for c in PREFILL:
        yield batch_shape([(c, 0)], [])


def step_errors(model, derived_root: Path, hw: str, name: str, tp: int) -> np.ndarray:
    pd = PerformanceModel(model, load_bundle(hw, name, tp, root=derived_root, cache=False))
    pm = PerformanceModel(model, load_bundle(hw, name, tp))
    return np.array([abs(pd.compute_us(s) / pm.compute_us(s) - 1) for s in step_shapes()])


def _pct(x: np.ndarray) -> str:
    return f"{100 * np.median(x):.1f} / {100 * np.percentile(x, 90):.1f}"


def check_pairs(scratch: Path) -> list[str]:
    lines = ["| device | model | op | n | old: median / p90 % | new: median / p90 % |",
             "|---|---|---|---:|---:|---:|"]
    for hw, name in PAIRS:
        model = load_model(name)
        base = profiles_dir() / hw / name / "bf16"
        roots = {"old": scratch / "old", "new": scratch / "new"}
        for root in roots.values():
            dst = root / hw / name / "bf16"
            shutil.copytree(base / "tp1", dst / "tp1")
            if (base / "meta.yaml").exists():
                shutil.copy(base / "meta.yaml", dst / "meta.yaml")
        old_derive(base / "tp1", roots["old"] / hw / name / "bf16" / "tp2", 2)
        derive(hw, name, 2, root=roots["new"])
        errs = {k: op_errors(r / hw / name / "bf16" / "tp2", base / "tp2") for k, r in roots.items()}
        for op in sorted(errs["new"]):
            lines.append(f"| {hw} | {name} | {op} | {len(errs['new'][op])} | {_pct(errs['old'][op])} | "
                         f"{_pct(errs['new'][op])} |")
        allo = np.concatenate(list(errs["old"].values()))
        alln = np.concatenate(list(errs["new"].values()))
        lines.append(f"| {hw} | {name} | **all rows** | {len(alln)} | {_pct(allo)} | {_pct(alln)} |")
        if model.is_moe and not (base / "tp2" / "moe.csv").exists():
            # the measured tp2 bundle has no moe.csv, so it cannot price a step
            lines.append(f"| {hw} | {name} | **steps** | 0 | n/a (measured tp2 has no moe.csv) | n/a |")
            continue
        so, sn = (step_errors(model, roots[k], hw, name, 2) for k in ("old", "new"))
        lines.append(f"| {hw} | {name} | **steps** | {len(sn)} | {_pct(so)} | {_pct(sn)} |")
    return lines


def b200_bound(scratch: Path) -> list[str]:
    hw, name = "B200", "meta-llama/Llama-3.1-70B"
    model, dev = load_model(name), load_device(hw)
    base = profiles_dir() / hw / name / "bf16"
    root = scratch / "b200"
    dst = root / hw / name / "bf16"
    shutil.copytree(base / "tp1", dst / "tp1")
    shutil.copy(base / "meta.yaml", dst / "meta.yaml")
    old_root = scratch / "b200old"
    shutil.copytree(root, old_root)
    lines = ["| TP | a run's bundle (shipped tree) | bound (µs) | old compute + comm (µs) | old / bound "
             "| new compute + comm (µs) | new / bound | run's compute + comm (µs) |",
             "|---:|---|---:|---:|---:|---:|---:|---:|"]
    shape = batch_shape([], [1024])
    for tp in (1, 2, 4, 8):
        if tp > 1:
            derive(hw, name, tp, root=root)
            old_derive(dst / "tp1", old_root / hw / name / "bf16" / f"tp{tp}", tp)
        comm = step_comm_us(hw, model, tp, shape)
        bound = model.weight_bytes_per_rank(tp) / (dev.memory_bandwidth_gbs * 1e3) + comm
        new = PerformanceModel(model, load_bundle(hw, name, tp, root=root, cache=False)).compute_us(shape) + comm
        old = PerformanceModel(model, load_bundle(hw, name, tp, root=old_root, cache=False)).compute_us(shape) + comm
        shipped = load_or_derive(hw, name, tp)       # what `agentservesim run` prices a step with
        run = PerformanceModel(model, shipped).compute_us(shape) + comm
        lines.append(f"| {tp} | {shipped.provenance} | {bound:.1f} | {old:.1f} | {old / bound:.2f} | {new:.1f} "
                     f"| {new / bound:.2f} | {run:.1f} |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        print("\n".join(check_pairs(Path(tmp))))
        print()
        print("B200 Llama-3.1-70B, one decode at context 1024:")
        print("\n".join(b200_bound(Path(tmp))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
