"""Candidate for issue 11 (docs/datasheet-synthesis.md, "What is not done"): does a compute-side
fixed cost make the GEMM class follow the size ramp of compute-bound GEMMs?

    PYTHONPATH=.:astra-sim python benchmarks/synth_gemm_ramp.py      # about 1-2 minutes

GEMM rows only (every measured bundle's gemm rows and every op table, fitted or not), each
row's bytes and FLOPs as times at its device's datasheet peaks, the fit's weights (size
buckets, then each device the same). Two forms, each fitted by a grid search of the weighted
log squared error on the other devices and scored on the held-out device's GEMM rows (op level,
|predicted / measured - 1| median / p90, signed median):

    plain: t = L + max(b / eb, f / ef)            (the shipped gemm class)
    ramp:  t = L + max(b / eb, (f + W0) / ef)      (W0: a fixed compute time at the peak)

Nothing here changes the shipped model. Same inputs, same output.
"""
from __future__ import annotations

import numpy as np

from llmservingsim.device_efficiency import (op_tables, table_samples, measured_bundles, bundle_samples)
from llmservingsim.op_cost import size_weights
from llmservingsim.hardware import load_device
from llmservingsim.model_config import load_model
from llmservingsim.paths import profiles_dir
rows = {}   # device -> list of (key, bytes_at_peak_us, flops_at_peak_us, t)
def add(dev, key, w, t):
    d = load_device(dev)
    rows.setdefault(dev, []).append((key, w.bytes / (d.memory_bandwidth_gbs * 1e3), w.flops / (d.peak_bf16_tflops * 1e6), t))
for hw, name, tp in measured_bundles():
    d, m = load_device(hw), load_model(name)
    for c, op, w, t in bundle_samples(m, profiles_dir() / hw / name / "bf16" / f"tp{tp}", tp, d.sm_count):
        if c == "gemm": add(hw, (hw, name, tp, op), w, t)
for tb in op_tables():
    for key, c, op, w, t in table_samples(tb.path): add(tb.device, (tb.device, *key), w, t)
def arrays(devs):
    R = [r for d in devs for r in rows[d]]
    from llmservingsim.op_cost import Work
    wt = np.array(size_weights([r[0] for r in R], [Work(r[1], r[2]) for r in R]))
    per = {}
    for r, x in zip(R, wt): per[r[0][0]] = per.get(r[0][0], 0) + x
    wt = np.array([x / per[r[0][0]] for r, x in zip(R, wt)])
    return np.array([r[1] for r in R]), np.array([r[2] for r in R]), np.array([r[3] for r in R]), wt
def pred(p, b, f):
    eb, ef, L, W0 = p
    return L + np.maximum(b / eb, (f + W0) / ef)
EB = np.linspace(0.6, 1.0, 41); EF = np.linspace(0.4, 1.0, 61); LL = np.linspace(0, 8, 33); W0S = [0.0, 0.5, 1, 2, 3, 4, 6, 8, 12, 16]
def fit(devs, ramp):
    b, f, t, wt = arrays(devs); lt = np.log(t); best = None
    for W0 in (W0S if ramp else [0.0]):
        for L in LL:
            if L > t.min(): continue
            for eb in EB:
                m = b / eb
                for ef in EF:
                    e = np.log(L + np.maximum(m, (f + W0) / ef)) - lt
                    s = float((wt * e * e).sum())
                    if best is None or s < best[0]: best = (s, (eb, ef, L, W0))
    return best[1]
def err(p, dev):
    b, f, t, _ = arrays([dev]); e = pred(p, b, f) / t - 1
    return 100 * np.median(abs(e)), 100 * np.percentile(abs(e), 90), 100 * np.median(e)
ALL = ["B200", "RTX4090", "RTXPRO6000", "H100"]


def main() -> int:
    print("| held-out device | form | eb | ef | L us | W0 us | GEMM rows: median / p90 % | signed median % |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for held in ALL + ["A100"]:
        train = [d for d in ALL if d != held]
        for ramp in (False, True):
            p = fit(train, ramp)
            med, p90, signed = err(p, held)
            print(f"| {held} | {'ramp' if ramp else 'plain'} | {p[0]:.3f} | {p[1]:.3f} | {p[2]:.2f} | {p[3]:.1f} | "
                  f"{med:.1f} / {p90:.1f} | {signed:+.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
