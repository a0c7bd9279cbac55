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

from llmservingsim.device_efficiency import device_weights, fit_samples, measured_bundles, op_tables

# GEMM rows as the fit reads them (device_efficiency.fit_samples: every bundle, every op table),
# bytes and FLOPs as µs at the device's datasheet peaks; keys start with the device
_KEYS, _WORKS, _TIMES = fit_samples(measured_bundles(), tables=op_tables())["gemm"]


def arrays(devs):
    """(bytes µs, FLOPs µs, measured µs, fit weights) of the GEMM rows of ``devs``."""
    idx = [i for i, k in enumerate(_KEYS) if k[0] in devs]
    keys, works = [_KEYS[i] for i in idx], [_WORKS[i] for i in idx]
    return (np.array([w.bytes / 1e3 for w in works]), np.array([w.flops / 1e6 for w in works]),
            np.array([_TIMES[i] for i in idx]), device_weights(keys, works))


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
