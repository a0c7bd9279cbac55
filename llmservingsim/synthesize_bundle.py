"""Synthesize a profile bundle from a device's datasheet numbers and the shared efficiency fit.

Used where a (device, model) has no measured bundle at any TP degree (so nothing to derive a
TP from, llmservingsim/derive_bundle.py): every table a bundle holds
(docs/profile-bundles.md) is filled with

    t(op, size) = launch_c + max(bytes / (eta_bw_c * BW_peak), FLOPs / (eta_f_c * F_peak))

bytes and FLOPs from op_cost.py (one rank at the TP degree), ``BW_peak`` / ``F_peak`` the
device file's ``memory_bandwidth_gbs`` / ``peak_bf16_tflops``, and the per-class terms of the
efficiency fit (llmservingsim/device_efficiency.py; the shipped one by default). Mixed
prefill+decode attention points are one kernel: the prefill part's time plus the decode
part's roofline (one launch). No skew fit is written: under a bandwidth roofline the decode
attention time is linear in the summed KV length, so the lookup at the mean length is already
what uneven lengths cost. No step_overhead.csv (nothing was run).

Invariants: every time is finite and > 0; the output depends only on the model config, the
device file and the fit, so the same inputs give byte-identical tables; the folder's
PROVENANCE.md starts ``# SYNTHESIZED`` and says ``Synthesized from datasheet``, which
``profiles._provenance`` reads as the bundle's provenance ``synthesized from datasheet``.
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Optional

from .device_efficiency import EfficiencyFit, load_fit, op_synth_class, prefill_attention_work
from .hardware import Device
from .model_config import ModelSpec
from .op_cost import PER_SEQUENCE_OPS, attention_work, dense_ops, dense_work, moe_work, per_sequence_work
from .profiles import ProfileBundle, bundle_from_columns, table_columns

MAX_TOKENS = 32768          # dense.csv sizes (linear extrapolation beyond, profiles.interp)
MAX_SEQUENCES = 1024        # per_sequence.csv sizes
MAX_CHUNK = 16384           # attention prefill chunks


def sizes(hi: int) -> list[int]:
    """1..16 and then four points per octave (x1, x1.25, x1.5, x1.75) up to ``hi``: the
    roofline is piecewise linear in size, so linear interpolation between these is close."""
    out = set(range(1, 17))
    p = 16
    while p <= hi:
        out.update(int(p * f) for f in (1, 1.25, 1.5, 1.75) if p * f <= hi)
        p *= 2
    return sorted(out)


def pow2(lo: int, hi: int) -> list[int]:
    out, p = [], lo
    while p <= hi:
        out.append(p)
        p *= 2
    return out


def _max_kv(model: ModelSpec) -> int:
    kv = 16
    while kv < model.max_model_len:
        kv *= 2
    return kv


def _fmt(t: float) -> str:
    return f"{t:.4f}"


def synthesized_tables(device: Device, model: ModelSpec, tp: int,
                       fit: Optional[EfficiencyFit] = None) -> dict[str, tuple[list, list]]:
    """Per file name, the (header, rows) of every table ``synthesize`` writes, rows as
    csv.writer writes them (sizes as ints, times as ``%.4f`` strings), in file order.
    ``fit`` defaults to the shipped efficiency fit."""
    fit = fit or load_fit()
    roof = fit.rooflines(device)
    tables = {}
    tables["dense.csv"] = (["layer", "tokens", "time_us"],
                           [[op, T, _fmt(roof[op_synth_class(op)].time_us(dense_work(model, op, T, tp)))]
                            for op in dense_ops(model) for T in sizes(MAX_TOKENS)])
    tables["per_sequence.csv"] = (["layer", "sequences", "time_us"],
                                  [[op, S, _fmt(roof[op_synth_class(op)].time_us(per_sequence_work(model, op, S, tp)))]
                                   for op in PER_SEQUENCE_OPS for S in sizes(MAX_SEQUENCES)])
    kv_max = _max_kv(model)
    chunks, kvs, decodes = pow2(16, MAX_CHUNK), pow2(16, kv_max), pow2(1, 256)
    pre, dec = roof["attention_prefill"], roof["attention_decode"]

    # each prefill point and each decode point once: the mixed grid is their sums
    t_pre = {(c, p): pre.time_us(prefill_attention_work(model, c, p, tp, device.sm_count))
             for c in chunks for p in [0] + kvs}
    roof_dec = {(n, k): dec.time_us(attention_work(model, 0, 0, n, k, tp)) - dec.launch_us
                for n in decodes for k in kvs}
    rows = [[0, 0, n, k, _fmt(dec.launch_us + roof_dec[n, k])] for n in decodes for k in kvs]
    rows += [[c, p, 0, 0, _fmt(t_pre[c, p])] for c in chunks for p in [0] + kvs]
    rows += [[c, p, n, k, _fmt(t_pre[c, p] + roof_dec[n, k])]
             for c in chunks for p in [0] + kvs for n in decodes for k in kvs]
    tables["attention.csv"] = (["prefill_chunk", "kv_prefill", "n_decode", "kv_decode", "time_us"], rows)
    if model.is_moe:
        moe = roof["moe"]
        E = model.num_experts
        tables["moe.csv"] = (["tokens", "activated_experts", "time_us"],
                             [[T, a, _fmt(moe.time_us(moe_work(model, T, a, tp)))]
                              for T in pow2(1, MAX_TOKENS) for a in range(1, E + 1)])
    return tables


def synthesize(device: Device, model: ModelSpec, tp: int, out: Path, fit: Optional[EfficiencyFit] = None) -> Path:
    """Write the bundle of ``model`` on ``device`` at TP ``tp`` into ``out`` (a tp<N> folder)
    and return it. ``fit`` defaults to the shipped efficiency fit."""
    fit = fit or load_fit()
    roof = fit.rooflines(device)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name, (header, rows) in synthesized_tables(device, model, tp, fit).items():
        with open(out / name, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(header)
            w.writerows(rows)
    table = "\n".join(f"| {c} | {e.bandwidth:g} | {e.compute:g} | {e.launch_us:g} | {r.bandwidth_gbs:.1f} | {r.tflops:.1f} |"
                      for c, r in roof.items() for e in (fit.for_device(c, device),))
    (out / "PROVENANCE.md").write_text(
        f"# SYNTHESIZED bundle: {device.name} {model.name} bf16 tp{tp}\n\n"
        f"Not measured. Synthesized from datasheet: {device.name}'s memory_bandwidth_gbs "
        f"{device.memory_bandwidth_gbs:g} GB/s and peak_bf16_tflops {device.peak_bf16_tflops:g} ({device.path.name}"
        + (f"; FLOPs priced at the sustained clock, {device.sustained_clock_mhz:g} of the {device.boost_clock_mhz:g} MHz "
           f"the peak is stated at: {device.compute_tflops:.1f} TFLOP/s" if device.compute_tflops != device.peak_bf16_tflops else "")
        + ") "
        f"times the per-op-class efficiencies fitted across the measured devices (the gemm bandwidth "
        f"fraction and the elementwise launch those of its memory family, {device.memory_family or 'unknown: pooled'}) "
        f"(llmservingsim/device_efficiency.py, docs/datasheet-synthesis.md); every time is "
        f"launch + max(bytes / BW, FLOPs / F) of the op's work on one rank (llmservingsim/op_cost.py). "
        f"No skew fit, no step_overhead.csv. Replace with a measured bundle when one exists.\n\n"
        f"Fitted on: {'; '.join(fit.fitted_on) or 'n/a'}.\n\n"
        f"| class | bandwidth fraction | compute fraction | launch (µs) | BW (GB/s) | F (TFLOP/s) |\n"
        f"|---|---:|---:|---:|---:|---:|\n{table}\n", encoding="utf-8")
    return out


_SYNTHESIZED: dict = {}      # (device file, model, tp) -> bundle synthesized in this process


def load_synthesized(device: Device, model: ModelSpec, tp: int, where: Path) -> ProfileBundle:
    """The bundle ``synthesize`` writes, built in memory with the very tables ``load_bundle``
    would read back from it (profiles.table_columns; nothing is written anywhere); ``path``
    is ``where`` (the folder a measured bundle would have) and ``provenance`` "synthesized
    from datasheet on the fly". Kept per process."""
    key = (str(device.path), model.name, tp)
    if key not in _SYNTHESIZED:
        where = Path(where)
        tables = {name: table_columns(name, header, rows, where / name)
                  for name, (header, rows) in synthesized_tables(device, model, tp).items()}
        # no meta.yaml and no skew_fit.csv: the loader's {} and no skew fit
        _SYNTHESIZED[key] = bundle_from_columns(where, tp, {}, tables, where / "skew_fit.csv",
                                                where.parent / "meta.yaml",
                                                "synthesized from datasheet on the fly")
    return _SYNTHESIZED[key]
