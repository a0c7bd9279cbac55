"""Why the B200 leave-one-device-out fold misses (issue 11): candidate mechanisms, quantified.

    PYTHONPATH=.:astra-sim python benchmarks/synth_mechanisms.py

docs/datasheet-synthesis.md ("Why the B200 fold misses") is written from this output. Four parts:

1. What each measured bundle shows on its own (no cross-device fit): the fixed cost and
   streaming fraction of its decode-sized GEMMs (a roofline fitted on the GEMM rows below 32
   FLOP/byte, i.e. up to ~32 tokens, memory-bound on every device), the fraction of the
   datasheet bandwidth its one-token lm_head and its largest decode attention point reach, the
   one-token layernorm, decode attention at KV 16 (1 sequence and the most the bundle has) and sampler times, the
   GEMM rows measured faster than their DRAM roofline (bytes / datasheet bandwidth), and the
   device's datasheet bandwidth per SM; then a wave-quantization check on one B200 GEMM.
2. The B200 fold (fitted on RTX 4090 + RTX PRO 6000 only): step errors of each B200 bundle
   with one class of the synthesized bundle replaced by B200's measured tables, which says
   how much of the miss each class carries.
3. Leave-one-device-out, as benchmarks/synth_loo_check.py computes it (same steps, same
   error), for the shipped model and for each candidate: per held-out device the all-steps
   median / p90 |error| % and the signed median, plus the B200 fold's GEMM terms.
4. The constants the candidates read (clocks, L2 sizes) with their sources.

Nothing here changes the shipped fit; the candidates are evaluated, not adopted (the doc says
why). Same inputs, same output.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import tempfile
from pathlib import Path

import numpy as np

from derive_tp_check import _pct
from synth_loo_check import fold_errors, shapes
from llmservingsim.device_efficiency import (EfficiencyFit, bundle_samples, fit_efficiency, measured_bundles,
                                             occupancy, op_synth_class)
from llmservingsim.hardware import load_device
from llmservingsim.model_config import load_model
from llmservingsim.op_cost import Roofline, Work, dense_work, fit_roofline, per_sequence_work
from llmservingsim.paths import profiles_dir
from llmservingsim.perf_model import PerformanceModel
from llmservingsim.profiles import load_bundle
from llmservingsim.synthesize_bundle import synthesize


def pooled_fit(*args, **kw) -> EfficiencyFit:
    """``fit_efficiency`` with one GEMM bandwidth and one elementwise launch for every device, as
    when this analysis was made (before the per-memory-family terms), so the tables it prints
    stay those of docs/datasheet-synthesis.md "Why the B200 fold misses" (but for the RTX 4090
    rows now read at its sustained clock: prefill only, see that section)."""
    return dataclasses.replace(fit_efficiency(*args, **kw), gemm_bandwidth={}, elementwise_launch={})

# (b): SM clock at which each training device's datasheet BF16 peak is quoted (MHz).
CLOCK_MHZ = {
    "B200": 1965.0,        # the B200 SM clock public benchmark logs report; NVIDIA's datasheet gives none
    "RTX4090": 2520.0,     # NVIDIA spec boost clock (= "SM Default Clock Rate", NVIDIA/nvbench#207 listing)
    "RTXPRO6000": 2617.0,  # RTX Blackwell whitepaper boost clock (hardware/RTXPRO6000.yaml peak comment)
}
CLOCK_ALT = {"RTXPRO6000": 2430.0}   # LLMServingSim device query of the Server Edition (same comment)
# (c): L2 sizes (MiB) of the training devices.
L2_MIB = {
    "B200": 126.5,         # device query "L2 Cache Size: 126.50 MB" (pytorch/ao#4002)
    "RTX4090": 72.0,       # device query "L2 Cache Size: 73728 KiB" (NVIDIA/nvbench#207)
    "RTXPRO6000": 128.0,   # NVIDIA RTX Blackwell whitepaper: GB202, 128 MB L2, all of it on RTX PRO 6000
}
MEM_ROWS = 32.0            # FLOP/byte below which a GEMM row is memory-bound on every device
REF_MHZ = 2000.0


def dram_us(dev, w: Work) -> float:
    return w.bytes / (dev.memory_bandwidth_gbs * 1e3)


def weight_bytes(model, tp: int, op: str) -> float:
    """Bytes of an op's weight matrix on one rank: its work at zero tokens."""
    return (per_sequence_work(model, op, 0, tp) if op == "lm_head" else dense_work(model, op, 0, tp)).bytes


# ---- 1. per bundle -----------------------------------------------------------------------------------
def _table(folder: Path, name: str) -> list[dict]:
    with open(folder / name, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def per_bundle(bundles) -> list[str]:
    lines = ["| bundle | BW / SM (GB/s) | decode GEMM fixed µs / stream fraction | lm_head 1 tok / BW | "
             "attention best / BW | layernorm 1 tok µs | attn (1, kv16) µs | attn (most decodes, kv16) µs | "
             "sampler 1 seq µs | GEMM rows below DRAM roofline |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for hw, name, tp in bundles:
        dev, model = load_device(hw), load_model(name)
        folder = profiles_dir() / hw / name / "bf16" / f"tp{tp}"
        rows = list(bundle_samples(model, folder, tp, dev.sm_count))
        mem = [(Work(w.bytes / dev.memory_bandwidth_gbs, 0.0), t) for c, op, w, t in rows
               if c == "gemm" and w.flops / w.bytes < MEM_ROWS]
        r = fit_roofline([w for w, _ in mem], [t for _, t in mem], 1.0, 1.0)
        lm = min(((w.flops, t, w) for c, op, w, t in rows if op == "lm_head"), key=lambda x: x[0])[1:]
        att = max(dram_us(dev, w) / t for c, op, w, t in rows if c == "attention_decode")
        below = sum(1 for c, op, w, t in rows if c == "gemm" and t < dram_us(dev, w))
        ngemm = sum(1 for c, *_ in rows if c == "gemm")
        att_rows = {(int(float(x["n_decode"])), int(float(x["kv_decode"]))): float(x["time_us"])
                    for x in _table(folder, "attention.csv")
                    if float(x["prefill_chunk"]) == 0 and float(x["kv_prefill"]) == 0}
        nmax = max(n for n, k in att_rows if k == 16)
        ln = next(float(x["time_us"]) for x in _table(folder, "dense.csv") if x["layer"] == "layernorm"
                  and float(x["tokens"]) == 1)
        smp = next(float(x["time_us"]) for x in _table(folder, "per_sequence.csv") if x["layer"] == "sampler"
                   and float(x["sequences"]) == 1)
        lines.append(f"| {hw} {name} tp{tp} | {dev.memory_bandwidth_gbs / dev.sm_count:.1f} | "
                     f"{r.launch_us:.2f} / {r.bandwidth_gbs:.3f} | {dram_us(dev, lm[1]) / lm[0]:.2f} | {att:.2f} | "
                     f"{ln:.1f} | {att_rows[1, 16]:.1f} | {att_rows[nmax, 16]:.1f} ({nmax}) | {smp:.1f} | "
                     f"{below} of {ngemm} |")
    return lines


def tile_waves(tokens=(512, 768, 1024, 1536, 2048), tile=128) -> str:
    """(b) wave quantization: the occupancy of a 128 x 128 tile grid on B200's SMs against the
    fraction of the BF16 peak B200's measured Llama-3.1-8B o_proj reaches."""
    dev, model = load_device("B200"), load_model("meta-llama/Llama-3.1-8B")
    rows = {float(x["tokens"]): float(x["time_us"])
            for x in _table(profiles_dir() / "B200" / model.name / "bf16" / "tp1", "dense.csv") if x["layer"] == "o_proj"}
    cells = []
    for T in tokens:
        tiles = -(-T // tile) * -(-model.hidden_size // tile)
        occ = occupancy(tiles, dev.sm_count)
        frac = dense_work(model, "o_proj", T, 1).flops / (rows[float(T)] * dev.peak_bf16_tflops * 1e6)
        cells.append(f"{T}: {occ:.2f} / {frac:.2f}")
    return "B200 8B o_proj, tokens: tile-grid occupancy / measured fraction of peak: " + ", ".join(cells)


# ---- 2. attribution ----------------------------------------------------------------------------------
def attribution(bundles) -> list[str]:
    fit = pooled_fit([b for b in bundles if b[0] != "B200"])
    swaps = [("none (synthesized)", ()), ("gemm", ("gemm",)), ("elementwise", ("elementwise",)),
             ("sampler", ("sampler",)), ("attention", ("attention",)),
             ("all but gemm", ("elementwise", "sampler", "attention")),
             ("all but attention", ("gemm", "elementwise", "sampler"))]
    lines = ["| B200 bundle | measured tables swapped in | decode median / p90 % | prefill median / p90 % | "
             "all median / p90 % | signed median % |", "|---|---|---:|---:|---:|---:|"]
    with tempfile.TemporaryDirectory() as tmp:
        for hw, name, tp in (b for b in bundles if b[0] == "B200"):
            model = load_model(name)
            m = load_bundle(hw, name, tp, cache=False)
            synthesize(load_device(hw), model, tp, Path(tmp) / hw / name / "bf16" / f"tp{tp}", fit=fit)
            s = load_bundle(hw, name, tp, root=Path(tmp), cache=False)
            pm, (dec, pre) = PerformanceModel(model, m), shapes(m)
            for label, what in swaps:
                b = dataclasses.replace(
                    s, dense={op: (m.dense[op] if op_synth_class(op) in what else t) for op, t in s.dense.items()},
                    per_sequence={op: (m.per_sequence[op] if op_synth_class(op) in what else t)
                                  for op, t in s.per_sequence.items()},
                    attention=m.attention if "attention" in what else s.attention)
                pb = PerformanceModel(model, b)
                ed = np.array([pb.compute_us(x) / pm.compute_us(x) - 1 for x in dec])
                ep = np.array([pb.compute_us(x) / pm.compute_us(x) - 1 for x in pre])
                a = np.concatenate([ed, ep])
                lines.append(f"| {name} tp{tp} | {label} | {_pct(abs(ed))} | {_pct(abs(ep))} | {_pct(abs(a))} | "
                             f"{100 * np.median(a):+.1f} |")
    return lines


# ---- 3. candidates -----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class CycleFit(EfficiencyFit):
    """(b): every fixed cost is a number of SM cycles, the same on every device: fitted in µs at
    REF_MHZ, priced at the device's clock."""
    clock: dict = None

    def rooflines(self, device):
        k = REF_MHZ / self.clock[device.name]
        return {c: Roofline(r.bandwidth_gbs, r.tflops, r.launch_us * k)
                for c, r in EfficiencyFit.rooflines(self, device).items()}


class TwoRegimes:
    """GEMM with one fixed cost per regime: max(L_mem + bytes / BW, L_cmp + FLOPs / F)."""

    def __init__(self, mem: Roofline, cmp_: Roofline):
        self.mem, self.cmp = mem, cmp_
        self.bandwidth_gbs, self.tflops, self.launch_us = mem.bandwidth_gbs, cmp_.tflops, mem.launch_us

    def time_us(self, w: Work) -> float:
        return max(self.mem.launch_us + w.bytes / (self.mem.bandwidth_gbs * 1e3),
                   self.cmp.launch_us + w.flops / (self.cmp.tflops * 1e6))


@dataclasses.dataclass(frozen=True)
class TwoRegimeFit(EfficiencyFit):
    gemm_mem: object = None
    gemm_cmp: object = None

    def rooflines(self, device):
        out = EfficiencyFit.rooflines(self, device)
        out["gemm"] = TwoRegimes(self.gemm_mem.roofline(device), self.gemm_cmp.roofline(device))
        if "moe" not in self.classes:
            out["moe"] = out["gemm"]
        return out


def drop_cached(dev, model, tp, c, op, w, t):
    """(c1) a weight or KV row measured faster than streaming its bytes from DRAM was served from
    L2 in the one-layer profiler (serving streams every layer's weights and KV from DRAM)."""
    return None if c in ("gemm", "moe", "attention_decode") and t < dram_us(dev, w) else (w, t)


def drop_l2_weights(dev, model, tp, c, op, w, t):
    """(c2) memory-bound GEMM rows whose weight matrix fits the device's L2 are left out."""
    if c == "gemm" and dram_us(dev, w) >= w.flops / (dev.peak_bf16_tflops * 1e6) \
            and weight_bytes(model, tp, op) <= L2_MIB[dev.name] * 2 ** 20:
        return None
    return w, t


def in_cycles(clock):
    def adjust(dev, model, tp, c, op, w, t):
        s = clock[dev.name] / REF_MHZ        # t * s = launch_ref + max(bytes * s / BW, FLOPs * s / F)
        return Work(w.bytes * s, w.flops * s), t * s
    return adjust


def regime(ratio: float, which: str):
    """Rows of one regime of the GEMM class, fitted on that regime's term alone: memory rows
    (byte time >= ratio x FLOP time at the datasheet peaks) on their bytes, compute rows
    (FLOP time >= ratio x byte time) on their FLOPs."""
    def adjust(dev, model, tp, c, op, w, t):
        if c != "gemm":
            return w, t
        tb, tf = dram_us(dev, w), w.flops / (dev.peak_bf16_tflops * 1e6)
        if which == "mem":
            return (Work(w.bytes, 0.0), t) if tb >= ratio * tf else None
        return (Work(0.0, w.flops), t) if tf >= ratio * tb else None
    return adjust


def candidates(bundles):
    """(label, fold -> fit): the fit a held-out device is synthesized with, from the training
    bundles ``train`` (``all_`` = every bundle, for the in-sample row)."""
    def two(ratio):
        def f(train, all_):
            base = pooled_fit(train)
            return TwoRegimeFit(base.classes, base.fitted_on,
                                gemm_mem=pooled_fit(train, adjust=regime(ratio, "mem")).classes["gemm"],
                                gemm_cmp=pooled_fit(train, adjust=regime(ratio, "cmp")).classes["gemm"])
        return f

    def cycles(clock):
        def f(train, all_):
            base = pooled_fit(train, adjust=in_cycles(clock))
            return CycleFit(base.classes, base.fitted_on, clock=clock)
        return f
    return [
        ("shipped model", lambda train, all_: pooled_fit(train)),
        ("(c1) rows faster than DRAM out", lambda train, all_: pooled_fit(train, adjust=drop_cached)),
        ("(c2) memory-bound GEMM rows with weights <= L2 out",
         lambda train, all_: pooled_fit(train, adjust=drop_l2_weights)),
        ("(b) fixed costs in SM cycles", cycles(CLOCK_MHZ)),
        ("(b) same, RTX PRO 6000 at 2430 MHz", cycles({**CLOCK_MHZ, **CLOCK_ALT})),
        ("two GEMM regimes, ratio 2", two(2.0)),
        ("two GEMM regimes, ratio 4", two(4.0)),
        ("GDDR training on Llama bundles only (post hoc)",
         lambda train, all_: pooled_fit([b for b in train if not b[1].startswith("Qwen/")])),
        ("in-sample: every device fitted on", lambda train, all_: pooled_fit(all_)),
    ]


def loo(bundles) -> list[str]:
    devices = sorted({b[0] for b in bundles})
    lines = ["| model | " + " | ".join(f"{d}: median / p90 % (signed)" for d in devices) +
             " | all | B200 fold GEMM: bw / F / launch µs |", "|---|" + "---:|" * (len(devices) + 2)]
    for label, make in candidates(bundles):
        pooled, gemm = {}, ""
        with tempfile.TemporaryDirectory() as tmp:
            for held in devices:
                fit = make([b for b in bundles if b[0] != held], bundles)
                if held == "B200":
                    e = fit.classes["gemm"]
                    gemm = f"{e.bandwidth:.3f} / {e.compute:.3f} / {e.launch_us:.2f}"
                    if isinstance(fit, TwoRegimeFit):
                        gemm = (f"memory {fit.gemm_mem.bandwidth:.3f} / {fit.gemm_mem.launch_us:.2f}; "
                                f"compute {fit.gemm_cmp.compute:.3f} / {fit.gemm_cmp.launch_us:.2f}")
                    elif isinstance(fit, CycleFit):
                        gemm += f" (at {REF_MHZ:g} MHz)"
                for hw, name, tp, sd, sp in fold_errors(held, fit, bundles, Path(tmp)):
                    if sd is not None:
                        pooled.setdefault(hw, []).append(np.concatenate([sd, sp]))
        cells = []
        for d in devices:
            x = np.concatenate(pooled[d])
            cells.append(f"{_pct(abs(x))} ({100 * np.median(x):+.1f})")
        x = np.concatenate([np.concatenate(v) for v in pooled.values()])
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {_pct(abs(x))} ({100 * np.median(x):+.1f}) | {gemm} |")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.parse_args(argv)
    bundles = measured_bundles()
    print("\n".join(per_bundle(bundles)))
    print()
    print(tile_waves())
    print()
    print("\n".join(attribution(bundles)))
    print()
    print("\n".join(loo(bundles)))
    print()
    print("constants: clocks (MHz) " + ", ".join(f"{k} {v:g}" for k, v in CLOCK_MHZ.items()) +
          f" (alt {CLOCK_ALT}); L2 (MiB) " + ", ".join(f"{k} {v:g}" for k, v in L2_MIB.items()) +
          f"; memory-bound GEMM rows below {MEM_ROWS:g} FLOP/byte")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
