"""Derive a TP=k profile bundle from the nearest measured TP bundle (documented, never silent).

Used where no measured tp<k> exists (the paper's artifact profiled B200 Llama-3.1-70B at TP1
only). Under tensor parallelism every rank runs the same layer with attention heads, the MLP
and expert widths and the vocabulary divided by k (llmservingsim/op_cost.py states exactly
what shards). Each measured time is scaled by the ratio of the op-level cost model's
roofline times at the two TP degrees:

    t_k(x) = t_m(x) * cost_k(x) / cost_m(x),   cost = launch + max(bytes / BW, FLOPs / F)

m is the nearest measured TP (the largest m <= k, else the smallest m > k). BW, F and launch
are fitted per op class (GEMMs, elementwise, attention, MoE) on the source tp<m> bundle only
(op_cost.fit_roofline, bounded by the device file's datasheet bandwidth and BF16 peak): the
derivation uses nothing but the source bundle, the model config and the device file, so the
same inputs give byte-identical outputs. Ops whose work does not depend on TP (layernorm,
final_layernorm, embedding, sampler) are copied unchanged. skew_fit.csv is copied;
step_overhead.csv is not (a residual only means something against the kernels and the
deployment it was measured with). The output folder gets a PROVENANCE.md saying all this.

Run: ``python -m llmservingsim.derive_bundle B200 meta-llama/Llama-3.1-70B --tp 2``.
"""
from __future__ import annotations

import argparse
import csv
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .errors import ConfigError, ProfileError, SimError, iter_lines
from .hardware import load_device
from .model_config import ModelSpec, load_model
from .op_cost import (UNSHARDED, Roofline, attention_work, dense_work, fit_roofline, moe_work,
                      op_class, per_sequence_work, size_weights)
from .paths import hardware_dir, profiles_dir
from .profiles import (ProfileBundle, bundle_dir, bundle_from_columns, load_bundle, load_meta, measured_tps,
                       table_columns)

TABLES = ("dense.csv", "per_sequence.csv", "attention.csv", "moe.csv")
ATTENTION_AXES = ("prefill_chunk", "kv_prefill", "n_decode", "kv_decode")


def nearest_measured(measured: list[int], k: int) -> int:
    """The TP to derive tp<k> from: the largest measured m <= k (fewer ranks share more of the
    work, so the scaling only divides), else the smallest m > k."""
    below = [m for m in measured if m <= k]
    return max(below) if below else min(measured)


def _work(model: ModelSpec, table: str, row: dict, tp: int):
    """The op's name and its work at this row's size on ``tp`` ranks."""
    if table == "dense.csv":
        return row["layer"], dense_work(model, row["layer"], float(row["tokens"]), tp)
    if table == "per_sequence.csv":
        return row["layer"], per_sequence_work(model, row["layer"], float(row["sequences"]), tp)
    if table == "attention.csv":
        return "attention", attention_work(model, *(float(row[a]) for a in ATTENTION_AXES), tp)
    return "moe", moe_work(model, float(row["tokens"]), float(row["activated_experts"]), tp)


@dataclass
class _Table:
    """A source profile table as read: its columns and rows (strings)."""
    name: str
    fields: list
    rows: list


def _read(path: Path, model: ModelSpec, tp: int = 1) -> tuple[_Table, list]:
    """A source table, every row checked against the cost model (an op it does not know, or
    a time that is not a number > 0, is a ProfileError naming the file and line), and per
    row (op, its work at ``tp``, the source's TP degree)."""
    reader = csv.DictReader(line for _, line in iter_lines(path, error=ProfileError, what="profile table"))
    rows = list(reader)
    fields = list(reader.fieldnames or [])
    works = []
    for i, r in enumerate(rows, start=2):
        try:
            works.append(_work(model, path.name, r, tp))
            ok = float(r["time_us"]) > 0
        except KeyError as exc:
            raise ProfileError(f"the op cost model does not know {exc.args[0]!r} (column or op name)",
                               file=str(path), line=i) from None
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ProfileError(f"time_us must be a number > 0, got {r.get('time_us')!r}", file=str(path), line=i)
    return _Table(path.name, fields, rows), works


def scaled_time(t_m: float, roof: Roofline, work_m, work_k) -> float:
    """The derivation's one rule: a measured time scaled by the ratio of the roofline times of
    the op's work at the target and the source TP. Positive whenever ``t_m`` is, and not
    larger than ``t_m`` when the target's work is not larger (Roofline is monotone)."""
    return t_m * roof.time_us(work_k) / roof.time_us(work_m)


def fit_source(tables: list[_Table], works: list, bandwidth_gbs: float, tflops: float) -> dict[str, Roofline]:
    """One roofline per op class, fitted on the source tables' rows at TP m (the unsharded
    embedding and sampler are left out: they are copied, and the sampler is many kernels).
    Rows are weighted by ``op_cost.size_weights`` per op, so small and large sizes count alike.
    ``works``: per table, per row, (op, its work at TP m), as ``_read`` gives them."""
    groups: dict[str, tuple[list, list, list]] = {}
    for t, t_works in zip(tables, works):
        for r, (op, w) in zip(t.rows, t_works):
            if op in ("embedding", "sampler"):
                continue
            ops, ws, ts = groups.setdefault(op_class(op), ([], [], []))
            ops.append((op,))
            ws.append(w)
            ts.append(float(r["time_us"]))
    return {c: fit_roofline(ws, ts, bandwidth_gbs, tflops, size_weights(ops, ws))
            for c, (ops, ws, ts) in sorted(groups.items())}


def check_tp(spec: ModelSpec, tp: int, key: str = "tp") -> None:
    """A TP degree vLLM accepts for this model (heads divisible by it, KV heads divisible by it
    or it by them), else a ConfigError on ``key`` (the caller's name for the TP degree)."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ConfigError(f"--tp must be an integer >= 1, got {tp!r}", key=key)
    if spec.num_heads % tp or (spec.num_kv_heads % tp and tp % spec.num_kv_heads):
        raise ConfigError(f"{spec.name} has {spec.num_heads} attention heads and {spec.num_kv_heads} KV "
                          f"heads; TP={tp} does not divide them (vLLM requires it)", key=key)


@dataclass
class Derivation:
    """A derived tp<tp> bundle before it is written: the source TP ``m`` and folder, the
    fitted rooflines, and the tables with every sharded op's ``time_us`` replaced by its
    scaled time as the file holds it (``%.4f``)."""
    hardware: str
    model: str
    variant: str
    tp: int
    m: int
    src: Path
    bandwidth_gbs: float
    tflops: float
    fits: dict
    tables: list


def derivation(hardware: str, model: str, tp: int, variant: str = "bf16", root: Path | None = None,
               from_tp: Optional[int] = None, spec: Optional[ModelSpec] = None, device=None) -> Derivation:
    """The tp<tp> bundle of (hardware, model, variant) derived from the nearest measured TP
    bundle (or ``from_tp``); ``spec`` and ``device`` are loaded by name when not given.
    A measured tp<tp> is never replaced (ProfileError)."""
    spec = spec or load_model(model)
    check_tp(spec, tp)
    device = device or load_device(hardware)
    base = Path(root or profiles_dir()) / hardware / model / variant
    measured = measured_tps(base)
    if not measured:
        raise ProfileError(f"no measured bundle to derive from (expected {base}/tp<N>/dense.csv without a "
                           f"PROVENANCE.md)", file=str(base))
    if tp in measured:
        raise ProfileError(f"tp{tp} is measured; a derived bundle never replaces it", file=str(base / f"tp{tp}"))
    m = nearest_measured(measured, tp) if from_tp is None else from_tp
    if m not in measured:
        raise ProfileError(f"tp{m} is not a measured bundle (measured: {measured})", file=str(base / f"tp{m}"))
    src = base / f"tp{m}"
    read = [_read(src / name, spec, m) for name in TABLES if (src / name).exists()]
    tables = [t for t, _ in read]
    works = [w for _, w in read]          # each row's work at the source TP, once
    fits = fit_source(tables, works, device.memory_bandwidth_gbs, device.peak_bf16_tflops)
    out = []
    for t, t_works in zip(tables, works):
        rows = []
        for r, (op, w_m) in zip(t.rows, t_works):
            if op not in UNSHARDED:
                _, w_k = _work(spec, t.name, r, tp)
                t_k = scaled_time(float(r["time_us"]), fits[op_class(op)], w_m, w_k)
                r = dict(r, time_us=f"{t_k:.4f}")
            rows.append(r)
        out.append(_Table(t.name, t.fields, rows))
    return Derivation(hardware, model, variant, tp, m, src, device.memory_bandwidth_gbs,
                      device.peak_bf16_tflops, fits, out)


def provenance_note(d: Derivation) -> str:
    """The PROVENANCE.md of a derived folder (``profiles._provenance`` reads "derived from
    tp<m>" from its "Generated from ../tp<m>")."""
    hardware, model, variant, tp, m = d.hardware, d.model, d.variant, d.tp, d.m
    fit_lines = "\n".join(
        f"| {c} | {r.bandwidth_gbs:.1f} | {r.tflops:.1f} | {r.launch_us:.3f} |" for c, r in d.fits.items())
    return (
        f"# DERIVED bundle: {hardware} {model} {variant} tp{tp}\n\n"
        f"Not measured. Generated from ../tp{m} by `python -m llmservingsim.derive_bundle {hardware} {model} "
        f"--tp {tp}` (see llmservingsim/derive_bundle.py and llmservingsim/op_cost.py): every sharded op "
        f"t_tp{tp}(x) = t_tp{m}(x) * cost_tp{tp}(x) / cost_tp{m}(x), cost = launch + max(bytes / BW, FLOPs / F) "
        f"from the op's bytes and FLOPs per rank under the model config; layernorm, final_layernorm, "
        f"embedding and sampler unchanged; skew_fit.csv copied from tp{m}; no step_overhead.csv (tp{m}'s "
        f"residual belongs to tp{m}'s kernels). Replace with a measured tp{tp} bundle when one exists.\n\n"
        f"Rooflines fitted on the tp{m} tables only (relative least squares, each op's size octaves weighted alike, bounded by {hardware}'s "
        f"datasheet {d.bandwidth_gbs:g} GB/s and {d.tflops:g} TFLOP/s):\n\n"
        f"| op class | BW (GB/s) | F (TFLOP/s) | launch (µs) |\n|---|---:|---:|---:|\n{fit_lines}\n")


def derive(hardware: str, model: str, tp: int, variant: str = "bf16", root: Path | None = None,
           from_tp: Optional[int] = None, out: Optional[Path] = None) -> Path:
    """Write ``tp<tp>/`` of (hardware, model, variant) from the nearest measured TP bundle
    (or ``from_tp``) and return its folder (``out`` instead of the bundle's own ``tp<tp>``
    when given). Never overwrites a measured bundle."""
    d = derivation(hardware, model, tp, variant, root, from_tp)
    dst = Path(out) if out is not None else d.src.parent / f"tp{tp}"
    dst.mkdir(parents=True, exist_ok=True)
    for t in d.tables:
        with open(dst / t.name, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=t.fields, lineterminator="\n")
            w.writeheader()
            w.writerows(t.rows)
    if (d.src / "skew_fit.csv").exists():
        shutil.copyfile(d.src / "skew_fit.csv", dst / "skew_fit.csv")
    (dst / "PROVENANCE.md").write_text(provenance_note(d), encoding="utf-8")
    return dst


_DERIVED: dict = {}          # (bundle folder, tp) -> bundle derived on the fly in this process


def load_or_derive(hardware: str, model: str, tp: int, variant: str = "bf16",
                   root: Optional[Path] = None, tp_key: str = "tp", device=None, spec=None) -> ProfileBundle:
    """The bundle ``load_bundle`` finds; where the TP degree has no folder but another TP is
    measured, one derived now from the nearest measured TP, built in memory with the very
    tables ``derive`` writes and ``load_bundle`` would read back (profiles.table_columns): a
    run never writes into the profile tree, and its bundle's ``provenance`` says "derived
    from tp<m> on the fly". Where no TP of the
    model is measured on the device (and the profile root exists), one synthesized from the
    device's datasheet numbers (synthesize_bundle.load_synthesized: "synthesized from
    datasheet on the fly"); ``device`` and ``spec`` are the run's Device and ModelSpec
    (loaded by name when not given). ``tp_key`` names the TP degree in errors (a run
    config's ``parallelism.tp``)."""
    base = bundle_dir(hardware, model, variant, root)
    if (base / f"tp{tp}").is_dir() or not Path(root or profiles_dir()).is_dir():
        return load_bundle(hardware, model, tp, variant, root)     # or its own error
    if not measured_tps(base):
        from .synthesize_bundle import load_synthesized
        spec = spec or load_model(model)
        check_tp(spec, tp, key=tp_key)
        return load_synthesized(device or load_device(hardware), spec, tp, base / f"tp{tp}")
    key = (str(base), tp)
    if key not in _DERIVED:
        if device is not None and Path(device.path) != hardware_dir() / f"{hardware}.yaml":
            device = None       # a device file of another folder: derive from the named one, as the CLI does
        try:
            d = derivation(hardware, model, tp, variant, root=root, device=device)   # the model by name, as the CLI
        except ConfigError as exc:          # a TP the model cannot take: the caller's key
            raise ConfigError(exc.message, key=tp_key) from None
        where = base / f"tp{tp}"            # where it would live (nothing is written)
        tables = {t.name: table_columns(t.name, t.fields, t.rows, where / t.name) for t in d.tables}
        _DERIVED[key] = bundle_from_columns(where, tp, load_meta(base / "meta.yaml"), tables,
                                            d.src / "skew_fit.csv", base / "meta.yaml",
                                            f"derived from tp{d.m} on the fly")
    return _DERIVED[key]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m llmservingsim.derive_bundle", description=__doc__.splitlines()[0])
    ap.add_argument("hardware")
    ap.add_argument("model")
    ap.add_argument("--tp", type=int, required=True)
    ap.add_argument("--from-tp", type=int, default=None, help="measured TP to derive from (default: nearest)")
    ap.add_argument("--variant", default="bf16")
    ap.add_argument("--profiles", type=Path, default=None, help="bundle root (default: profiles/)")
    a = ap.parse_args(argv)
    try:
        print(derive(a.hardware, a.model, a.tp, a.variant, root=a.profiles, from_tp=a.from_tp))
    except SimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
