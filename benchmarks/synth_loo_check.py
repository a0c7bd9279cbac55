"""Leave-one-device-out check of datasheet synthesis (issue 11): docs/datasheet-synthesis.md.

    PYTHONPATH=.:astra-sim python benchmarks/synth_loo_check.py

For every device with measured bundles, fit the per-class efficiencies
(llmservingsim/device_efficiency.py) on the measured bundles of the *other* devices only,
synthesize each of the held-out device's measured (model, TP) bundles from its datasheet
numbers with that fit (llmservingsim/synthesize_bundle.py), and compare steps the way
benchmarks/derive_tp_check.py does: ``PerformanceModel.compute_us`` of pure-decode steps
(1-256 sequences x 512-32k context, powers of two: 63 shapes) and single-prefill steps
(128-8k tokens, no prior context: 7 shapes), |synthesized / measured - 1|, median and 90th
percentile, decode and prefill apart and together. A bundle without the tables to price a
step (a MoE bundle without moe.csv) is listed as such. The fitted terms of each fold are
printed too. Last, the shipped fit's Llama-3.1-70B batch-1 decode (context 1024) on the
datasheet-only devices at TP 1/2/4/8, against the weight-streaming bound, both with the
step's all-reduces as a run charges them (2 per layer, the device's collective regimes where
it has them: derive_tp_check.step_comm_us), as benchmarks/derive_tp_check.py does for B200.
Same inputs, same output.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from derive_tp_check import DECODE_CTX, DECODE_N, PREFILL, _pct, step_comm_us    # the same step grid, errors, comm
from llmservingsim.device_efficiency import CLASSES, fit_efficiency, measured_bundles, op_tables, table_samples
from llmservingsim.hardware import load_device
from llmservingsim.model_config import load_model
from llmservingsim.perf_model import PerformanceModel, batch_shape
from llmservingsim.profiles import load_bundle
from llmservingsim.synthesize_bundle import synthesize

def shapes(bundle):
    """The grid's steps inside what ``bundle`` measured: decode contexts up to its largest
    decode KV length, prefills up to its largest dense size and attention chunk (the
    LLMServingSim bundles stop at 2048 tokens and 16k KV; beyond, a measured table is a
    linear extrapolation, down to negative times, not a measurement)."""
    kv = max(bundle.attention.decode.axes[1])
    toks = min(max(t.xs) for t in bundle.dense.values())
    chunk = max(bundle.attention.prefill.axes[0])
    dec = [batch_shape([], [ctx] * n) for n in DECODE_N for ctx in DECODE_CTX if ctx + 1 <= kv]
    pre = [batch_shape([(c, 0)], []) for c in PREFILL if c <= min(toks, chunk)]
    return dec, pre


def tp_scaling(tmp: Path) -> list[str]:
    """Batch-1 decode of Llama-3.1-70B at context 1024 on synthesized bundles (shipped fit)."""
    name = "meta-llama/Llama-3.1-70B"
    model = load_model(name)
    lines = ["| device | TP | bound (µs) | synthesized compute + comm (µs) | / bound |", "|---|---:|---:|---:|---:|"]
    shape = batch_shape([], [1024])
    for hw in ("H100", "H200", "A100", "MI300X"):
        dev = load_device(hw)
        for tp in (1, 2, 4, 8):
            out = tmp / "tp" / hw / name / "bf16" / f"tp{tp}"
            synthesize(dev, model, tp, out)
            b = load_bundle(hw, name, tp, root=tmp / "tp", cache=False)
            comm = step_comm_us(hw, model, tp, shape)
            bound = model.weight_bytes_per_rank(tp) / (dev.memory_bandwidth_gbs * 1e3) + comm
            t = PerformanceModel(model, b).compute_us(shape) + comm
            lines.append(f"| {hw} | {tp} | {bound:.1f} | {t:.1f} | {t / bound:.2f} |")
    return lines


def fold_errors(held: str, fit, bundles: list[tuple], tmp: Path):
    """(hardware, model, tp, decode errors, prefill errors) of every measured bundle of the
    held-out device ``held``, synthesized with ``fit``; errors are synthesized / measured - 1
    per step of ``shapes``, None for a bundle that cannot price a step (MoE without moe.csv)."""
    dev = load_device(held)
    for hw, name, tp in (b for b in bundles if b[0] == held):
        model = load_model(name)
        measured = load_bundle(hw, name, tp, cache=False)
        if model.is_moe and measured.moe is None:
            yield hw, name, tp, None, None
            continue
        out = tmp / hw / name / "bf16" / f"tp{tp}"
        synthesize(dev, model, tp, out, fit=fit)
        synth = load_bundle(hw, name, tp, root=tmp, cache=False)
        pm, ps = PerformanceModel(model, measured), PerformanceModel(model, synth)
        dec, pre = shapes(measured)
        yield (hw, name, tp, np.array([ps.compute_us(s) / pm.compute_us(s) - 1 for s in dec]),
               np.array([ps.compute_us(s) / pm.compute_us(s) - 1 for s in pre]))


def _pct_or_na(x) -> str:
    """``_pct``, or "n/a" for no rows (an elementwise table has no compute-bound row)."""
    return _pct(x) if len(x) else "n/a"


def table_folds(bundles: list[tuple], tables: list) -> list[str]:
    """Op-level leave-one-device-out on the public op tables: each row's class fitted on every
    measured bundle and every *other* fitted table, priced on the held-out table's device
    from its datasheet numbers, against each row (|predicted / measured - 1| per row; a
    table not read by the shipped fit is held out of every fit anyway)."""
    lines = ["| held-out table | device | read by the shipped fit | rows | memory-bound rows: median / p90 % | "
             "compute-bound rows: median / p90 % | all rows: median / p90 % | signed median % |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for held in tables:
        fit = fit_efficiency(bundles, tables=[t for t in tables if t.fit and t.device != held.device])
        dev = load_device(held.device)
        err, mem = [], []
        for _key, c, _op, w, t in table_samples(held.path):
            roof = fit.for_device(c, dev).roofline(dev)
            err.append(roof.time_us(w) / t - 1)
            mem.append(w.bytes / (roof.bandwidth_gbs * 1e3) >= w.flops / (roof.tflops * 1e6))
        err, mem = np.array(err), np.array(mem)
        lines.append(f"| {held.path.name} | {held.device} | {'yes' if held.fit else 'no'} | {len(err)} | "
                     f"{_pct_or_na(abs(err[mem]))} | {_pct_or_na(abs(err[~mem]))} | {_pct(abs(err))} | {100 * np.median(err):+.1f} |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.parse_args(argv)
    bundles = measured_bundles()
    tables = op_tables()
    fitted = [t for t in tables if t.fit]
    devices = sorted({b[0] for b in bundles})
    lines = ["| held-out device | model | TP | steps (decode + prefill) | decode: median / p90 % | "
             "prefill: median / p90 % | all steps: median / p90 % | signed median % |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    folds = []
    pooled: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for held in devices:
            fit = fit_efficiency([b for b in bundles if b[0] != held], tables=[t for t in fitted if t.device != held])
            folds.append((held, fit))
            for hw, name, tp, sd, sp in fold_errors(held, fit, bundles, Path(tmp)):
                if sd is None:
                    lines.append(f"| {hw} | {name} | {tp} | 0 | n/a (measured bundle has no moe.csv) | | | |")
                    continue
                alls = np.concatenate([sd, sp])
                pooled.setdefault(hw, []).append(alls)
                lines.append(f"| {hw} | {name} | {tp} | {len(sd)} + {len(sp)} | {_pct(abs(sd))} | {_pct(abs(sp))} | {_pct(abs(alls))} | "
                             f"{100 * np.median(alls):+.1f} |")
    everything = np.concatenate([np.concatenate(v) for v in pooled.values()])
    for hw, v in pooled.items():
        x = np.concatenate(v)
        lines.append(f"| **{hw}** | all its bundles | | {len(x)} | | | {_pct(abs(x))} | {100 * np.median(x):+.1f} |")
    lines.append(f"| **all** | | | {len(everything)} | | | {_pct(abs(everything))} | {100 * np.median(everything):+.1f} |")
    print("\n".join(lines))
    print()
    print("| held-out device | " + " | ".join(f"{c} (bw / F / launch µs)" for c in CLASSES) + " |")
    print("|---|" + "---:|" * len(CLASSES))
    for held, fit in folds:
        cells, dev = [], load_device(held)
        for c in CLASSES:
            e = fit.for_device(c, dev)
            cells.append(f"{e.bandwidth:.3f} / {e.compute:.3f} / {e.launch_us:.2f}" + ("" if c in fit.classes else " (gemm)"))
        print(f"| {held} | " + " | ".join(cells) + " |")
    print()
    print("\n".join(table_folds(bundles, tables)))
    print()
    with tempfile.TemporaryDirectory() as tmp:
        print("\n".join(tp_scaling(Path(tmp))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
