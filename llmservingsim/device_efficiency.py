"""Device efficiency learned from measured bundles, transferable to a GPU known only by its datasheet.

One concept: the achieved time of a profiled op is a roofline on the device's *datasheet*
peaks scaled by efficiencies that belong to the op class, not to the device:

    t(op) = launch_c + max(bytes / (eta_bw_c * BW_peak), FLOPs / (eta_f_c * F_peak))

``c`` is the op's class (``CLASSES``), ``BW_peak`` and ``F_peak`` the device file's
``memory_bandwidth_gbs`` and ``peak_bf16_tflops`` (the latter scaled to the SM clock the part
holds under load where the file gives one: ``Device.compute_tflops``), bytes and FLOPs the op's work on one rank
(llmservingsim/op_cost.py). Read as an efficiency curve over problem size, the achieved
fraction of the peak a class reaches on work ``w`` is

    e_c(w) = roof(w) / (launch_c + roof(w) / eta_c)       (roof(w): time at the datasheet peak)

so small problems (decode GEMMs of one token, attention over a short context) sit far below
the asymptote ``eta_c`` and large ones approach it: a half-efficiency size of
``roof = launch_c * eta_c`` (equivalently a Little's-law ramp of the bandwidth with bytes in
flight, whose latency is ``launch_c``). Three numbers per class, shared by every device:
that is what lets a new device use them (docs/datasheet-synthesis.md). One exception: the
``gemm`` bandwidth fraction is also fitted per memory family (HBM, GDDR: the device file's
``memory_technology``), and a device of a known family uses its family's value; so is the
``elementwise`` class's fixed cost (its launch term alone, bandwidth and compute pooled:
``elementwise_launch_by_family``).

Invariants: every efficiency is in [0.01, 1] and every launch term >= 0 (op_cost.fit_roofline's
bounds), so a synthesized time is > 0 and never faster than the datasheet roofline; the fit
is deterministic (same bundles, same numbers); each training device weighs the same in the
fit whatever the number or size of its bundles.

Fitting reads measured bundles (``measured_tps``: no PROVENANCE.md) and the public op tables
of ``hardware/efficiency/ops/`` that its manifest marks ``fit: true`` (GEMMs measured on a
device without a bundle: ``op_tables``, ``table_samples``); mixed
prefill+decode attention points are not fitted (they are synthesized as the sum of the two
parts, one launch). The shipped fit is ``hardware/efficiency/datasheet_fit.yaml``, written by
``python -m llmservingsim.device_efficiency --write``.
"""
from __future__ import annotations

import argparse
import csv
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Optional

from .errors import ProfileError, finite_number, iter_lines, load_yaml
from .hardware import MEMORY_FAMILIES, Device, load_device
from .model_config import ModelSpec, load_model
from .op_cost import (Roofline, Work, attention_work, dense_work, fit_launch, fit_roofline, moe_work, op_class,
                      per_sequence_work, size_weights)
from .paths import hardware_dir, profiles_dir

# gemm: the projections and lm_head; elementwise: norms, activation, rotary, embedding gather;
# attention_decode / attention_prefill: the decode-only and prefill-only attention points;
# sampler: vLLM's sampler (many small kernels over the full-vocabulary logits); moe: one MoE layer.
CLASSES = ("gemm", "elementwise", "attention_decode", "attention_prefill", "sampler", "moe")
# A class the training data lacks (no MoE bundle outside the device left out) borrows another's.
FALLBACK = {"moe": "gemm"}
FIT_FILE = "efficiency/datasheet_fit.yaml"
OPS_DIR = "efficiency/ops"          # public op tables and their manifest (tables.yaml)
# An op table holds the projection GEMMs only: the kernels (cuBLAS) are the library's, not a
# framework's, so a measurement outside vLLM times what vLLM runs (hardware/efficiency/ops/README.md).
TABLE_OPS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
# vLLM's own elementwise kernels (rms_norm, rotary_embedding, silu_and_mul), timed inside vLLM:
# a table of them is a vLLM profile too (hardware/efficiency/ops/README.md).
TABLE_ELEMENTWISE_OPS = ("layernorm", "final_layernorm", "rotary_emb", "act_fn")
TABLE_COLUMNS = ("model", "hidden", "heads", "kv_heads", "intermediate", "tp", "layer", "tokens", "time_us")


@dataclass(frozen=True, slots=True)
class Efficiency:
    """One class's fitted terms: fractions of the datasheet bandwidth and BF16 peak (the peak at
    the device's sustained clock where its file gives one: ``Device.compute_tflops``), and a
    fixed cost in µs."""
    bandwidth: float
    compute: float
    launch_us: float

    def roofline(self, device: Device) -> Roofline:
        return Roofline(self.bandwidth * device.memory_bandwidth_gbs, self.compute * device.compute_tflops,
                        self.launch_us)


@dataclass(frozen=True)
class EfficiencyFit:
    """Efficiencies per class and the bundles ("HW MODEL tpN") they were fitted on, and the
    GEMM class's bandwidth fraction per memory family (``Device.memory_family``) of the
    training devices: streaming GEMMs (cuBLAS, decode) reach a smaller fraction of an HBM
    datasheet's bandwidth than of a GDDR one's (docs/datasheet-synthesis.md). A device of a
    family the fit has no value for, or of unknown family, takes the pooled fraction."""
    classes: dict
    fitted_on: tuple
    gemm_bandwidth: dict = field(default_factory=dict)
    elementwise_launch: dict = field(default_factory=dict)   # family -> launch µs (pooled terms else)

    def for_class(self, c: str) -> Efficiency:
        return self.classes[c] if c in self.classes else self.classes[FALLBACK[c]]

    def for_device(self, c: str, device: Device) -> Efficiency:
        """Class ``c``'s terms on ``device``: ``for_class``, with the GEMM bandwidth fraction
        and the elementwise fixed cost of the device's memory family (where the fit has one)."""
        e = self.for_class(c)
        if c == "gemm" and device.memory_family in self.gemm_bandwidth:
            e = replace(e, bandwidth=self.gemm_bandwidth[device.memory_family])
        if c == "elementwise" and device.memory_family in self.elementwise_launch:
            e = replace(e, launch_us=self.elementwise_launch[device.memory_family])
        return e

    def rooflines(self, device: Device) -> dict:
        return {c: self.for_device(c, device).roofline(device) for c in CLASSES}


def op_synth_class(op: str) -> str:
    """The class of a dense / per-sequence op (attention and MoE are classed by their tables):
    ``op_cost.op_class``, but the sampler is a class of its own (it is many small kernels)."""
    if op == "sampler":
        return "sampler"
    c = op_class(op)
    if c not in ("gemm", "elementwise"):
        raise KeyError(op)
    return c


def _sparse(x: float) -> bool:
    """Grid sizes the fit reads from a dense table: powers of two and three times them (the
    tables step by 16 tokens up to 16k; the octave weighting makes the rest redundant)."""
    n = int(x)
    if n != x or n < 1:
        return False
    while n % 2 == 0:
        n //= 2
    return n in (1, 3)


Q_TILE = 128     # query rows per attention CTA (FlashAttention's prefill tile)


def occupancy(ctas: float, sm_count: int) -> float:
    """Fraction of the SMs a grid of ``ctas`` equal blocks keeps busy over its waves:
    ctas / (ceil(ctas / sm_count) * sm_count), in (0, 1]."""
    waves = max(math.ceil(ctas / sm_count), 1)
    return max(ctas, 1.0) / (waves * sm_count)


def prefill_attention_work(model: ModelSpec, chunk: float, kv_prefill: float, tp: int, sm_count: int) -> Work:
    """A prefill chunk's attention work, divided by the occupancy of its grid (one CTA per
    query tile and head, ``ceil(chunk / Q_TILE) * heads``): a short chunk keeps only part of
    the SMs streaming, whatever context it reads. The same on every device but for its SM count."""
    w = attention_work(model, chunk, kv_prefill, 0, 0, tp)
    u = occupancy(math.ceil(chunk / Q_TILE) * (model.num_heads / tp), sm_count)
    return Work(w.bytes / u, w.flops / u)


def _rows(path: Path) -> list[dict]:
    return list(csv.DictReader(line for _, line in iter_lines(path, error=ProfileError, what="profile table")))


def bundle_samples(model: ModelSpec, folder: Path, tp: int, sm_count: int) -> Iterable[tuple[str, str, Work, float]]:
    """(class, op, work on one rank, measured µs) for the rows of one measured bundle the fit
    reads: dense and per-sequence ops at sparse sizes, decode-only and prefill-only attention
    points, every moe.csv row."""
    for r in _rows(folder / "dense.csv"):
        if _sparse(float(r["tokens"])):
            yield op_synth_class(r["layer"]), r["layer"], dense_work(model, r["layer"], float(r["tokens"]), tp), \
                float(r["time_us"])
    for r in _rows(folder / "per_sequence.csv"):
        yield op_synth_class(r["layer"]), r["layer"], per_sequence_work(model, r["layer"], float(r["sequences"]), tp), \
            float(r["time_us"])
    for r in _rows(folder / "attention.csv"):
        c, p, n, k = (float(r[a]) for a in ("prefill_chunk", "kv_prefill", "n_decode", "kv_decode"))
        if c == 0 and p == 0 and n > 0:
            yield "attention_decode", "attention", attention_work(model, 0, 0, n, k, tp), float(r["time_us"])
        elif n == 0 and k == 0 and c > 0:
            yield "attention_prefill", "attention", prefill_attention_work(model, c, p, tp, sm_count), \
                float(r["time_us"])
    if (folder / "moe.csv").is_file():
        for r in _rows(folder / "moe.csv"):
            yield "moe", "moe", moe_work(model, float(r["tokens"]), float(r["activated_experts"]), tp), \
                float(r["time_us"])


def measured_bundles(root: Optional[Path] = None, devices: Optional[Iterable[str]] = None) -> list[tuple]:
    """(hardware, model, tp) of every measured bundle under the profile root (a ``tp<N>``
    folder with dense.csv and no PROVENANCE.md), sorted; only ``devices`` when given."""
    from .profiles import measured_tps
    root = Path(root or profiles_dir())
    out = []
    for base in sorted(root.glob("*/*/*/bf16")):
        hw, model = base.parts[-4], "/".join(base.parts[-3:-1])
        if devices is not None and hw not in devices:
            continue
        out.extend((hw, model, tp) for tp in measured_tps(base))
    return sorted(out)


@dataclass(frozen=True)
class OpTable:
    """One public op table: the device it was measured on, its file, whether the shipped fit
    reads it (``fit``) and, when not, why (``why``)."""
    device: str
    path: Path
    fit: bool
    why: str = ""


def op_tables(folder: Optional[Path] = None) -> list[OpTable]:
    """The op tables listed in ``folder/tables.yaml`` (default hardware/efficiency/ops), in
    file order. The manifest maps a CSV file name to ``{device, fit, why}``; ``why`` is
    required when ``fit`` is false. A bad manifest is a ProfileError naming it and the key."""
    folder = Path(folder or hardware_dir() / OPS_DIR)
    manifest = folder / "tables.yaml"
    raw = load_yaml(manifest, error=ProfileError, what="op-table manifest")
    if not isinstance(raw, dict) or not isinstance(raw.get("tables"), dict):
        raise ProfileError("must be a mapping with a 'tables' mapping", file=str(manifest), key="tables")
    out = []
    for name, v in raw["tables"].items():
        key = f"tables.{name}"
        if not (isinstance(v, dict) and set(v) <= {"device", "fit", "why"} and isinstance(v.get("device"), str)
                and isinstance(v.get("fit"), bool) and (v["fit"] or isinstance(v.get("why"), str))):
            raise ProfileError("must be {device: NAME, fit: true|false, why: TEXT (when fit is false)}",
                               file=str(manifest), key=key)
        if not (folder / str(name)).is_file():
            raise ProfileError("listed table does not exist", file=str(folder / str(name)), key=key)
        out.append(OpTable(v["device"], folder / str(name), v["fit"], v.get("why", "")))
    return out


def table_samples(path: Path) -> Iterable[tuple[tuple, str, str, Work, float]]:
    """(key, class, op, work on one rank, measured µs) for every row of one op table
    (columns ``TABLE_COLUMNS``: the model's shapes, the TP degree, a dense.csv GEMM op, the
    tokens and the time); ``key`` is (model, tp, op), the fit's weighting bucket. The work is
    ``op_cost.dense_work`` of a model with the row's shapes (head_dim = hidden / heads), so a
    table needs no model config. A malformed row is a ProfileError naming the file, line and
    column."""
    models: dict = {}
    lines = iter_lines(path, error=ProfileError, what="op table")
    reader = csv.DictReader(line for _, line in lines)
    if tuple(reader.fieldnames or ()) != TABLE_COLUMNS:
        raise ProfileError(f"header must be {','.join(TABLE_COLUMNS)}", file=str(path), line=1)
    for n, r in enumerate(reader, start=2):
        v = {}
        for k in TABLE_COLUMNS[1:6] + ("tokens", "time_us"):
            try:
                v[k] = float(r[k]) if k == "time_us" else int(r[k])
            except (TypeError, ValueError):
                raise ProfileError("not a number" if k == "time_us" else "not an integer", file=str(path),
                                   line=n, key=k) from None
        shape = (v["hidden"], v["heads"], v["kv_heads"], v["intermediate"])
        tp, tokens, t = v["tp"], v["tokens"], v["time_us"]
        if min(shape) < 1 or shape[0] % shape[1] or tp < 1 or tokens < 1 or not (math.isfinite(t) and t > 0):
            raise ProfileError("shapes, tp and tokens must be positive integers (hidden a multiple of heads), "
                               "time_us a positive number", file=str(path), line=n)
        if r["layer"] not in TABLE_OPS + TABLE_ELEMENTWISE_OPS:
            raise ProfileError(f"layer must be one of {', '.join(TABLE_OPS + TABLE_ELEMENTWISE_OPS)}", file=str(path),
                               line=n, key="layer")
        if (r["model"], shape) not in models:
            h, q, kv, inter = shape
            models[(r["model"], shape)] = ModelSpec(name=r["model"], hidden_size=h, num_layers=1, num_heads=q,
                                                    num_kv_heads=kv, head_dim=h // q, intermediate_size=inter,
                                                    vocab_size=1, max_model_len=1, tie_embeddings=False)
        model = models[(r["model"], shape)]
        yield (r["model"], tp, r["layer"]), op_synth_class(r["layer"]), r["layer"], dense_work(model, r["layer"], tokens, tp), t


def fit_samples(bundles: list[tuple], root: Optional[Path] = None,
                adjust: Optional[Callable[..., Optional[tuple]]] = None,
                tables: Iterable[OpTable] = ()) -> dict:
    """class -> (keys, works, times): every row the fit reads, from the measured ``bundles``
    (hardware, model, tp) and the op ``tables``, each row's work expressed as its time at its
    own device's datasheet peaks (``Work`` bytes at 1 GB/s, FLOPs at 1 TFLOP/s; the BF16 peak
    at the sustained clock, ``Device.compute_tflops``), so one (bandwidth, compute) fraction
    fits every device; keys start with the device. ``adjust``
    as in ``fit_efficiency``."""
    root = Path(root or profiles_dir())
    groups: dict = {}

    def add(dev: Device, key: tuple, c: str, w: Work, t: float) -> None:
        keys, works, times = groups.setdefault(c, ([], [], []))
        keys.append(key)
        works.append(Work(w.bytes / dev.memory_bandwidth_gbs, w.flops / dev.compute_tflops))
        times.append(t)

    for hw, name, tp in bundles:
        dev, model = load_device(hw), load_model(name)
        folder = root / hw / name / "bf16" / f"tp{tp}"
        for c, op, w, t in bundle_samples(model, folder, tp, dev.sm_count):
            if adjust is not None:
                row = adjust(dev, model, tp, c, op, w, t)
                if row is None:
                    continue
                w, t = row
            add(dev, (hw, name, tp, op), c, w, t)
    for table in tables:
        dev = load_device(table.device)
        for key, c, _op, w, t in table_samples(table.path):
            add(dev, (table.device, *key), c, w, t)
    return groups


def device_weights(keys: list, works: list):
    """The fit's row weights (numpy array): every (key, bytes octave, FLOPs octave) bucket the
    same (op_cost.size_weights), then every device (``key[0]``) the same total."""
    import numpy as np
    wt = size_weights(keys, works)
    per_dev: dict = {}
    for k, x in zip(keys, wt):
        per_dev[k[0]] = per_dev.get(k[0], 0.0) + x
    return np.array([x / per_dev[k[0]] for k, x in zip(keys, wt)])


def fit_efficiency(bundles: list[tuple], root: Optional[Path] = None,
                   adjust: Optional[Callable[..., Optional[tuple]]] = None,
                   tables: Iterable[OpTable] = ()) -> EfficiencyFit:
    """Fit one Efficiency per class on the rows of ``fit_samples``: the measured ``bundles``
    (hardware, model, tp) of possibly several devices and the op ``tables``, weighted by
    ``device_weights``. ``adjust(device, model, tp, class, op, work, time)``, when given,
    returns the (work, time) a bundle row is fitted as, or None to leave it out
    (benchmarks/synth_mechanisms.py tries alternative models with it; the shipped fit reads
    every row as it is). ``tables`` (``op_tables``) add their rows as samples of their device,
    which then weighs like any other in the classes it has rows of (its GEMMs only)."""
    root = Path(root or profiles_dir())
    tables = list(tables)
    groups = fit_samples(bundles, root, adjust, tables)
    classes = {}
    for c in CLASSES:
        if c not in groups:
            continue
        keys, works, times = groups[c]
        r = fit_roofline(works, times, 1.0, 1.0, device_weights(keys, works))
        classes[c] = Efficiency(round(r.bandwidth_gbs, 4), round(r.tflops, 4), round(r.launch_us, 3))
    if "gemm" not in classes:
        raise ProfileError("no measured bundle to fit device efficiencies on", file=str(root))
    return EfficiencyFit(classes, tuple(f"{hw} {m} tp{tp}" for hw, m, tp in bundles)
                         + tuple(f"{t.device} op table {t.path.name}" for t in tables),
                         gemm_bandwidth_by_family(*groups["gemm"]),
                         elementwise_launch_by_family(*groups["elementwise"], classes["elementwise"])
                         if "elementwise" in groups else {})


def gemm_bandwidth_by_family(keys: list, works: list, times: list) -> dict:
    """Memory family -> the GEMM bandwidth fraction fitted (as ``fit_efficiency`` fits a class)
    on the GEMM rows of that family's devices alone; only the bandwidth term is kept (compute
    and launch stay pooled: the family is a property of the DRAM, not of the SMs)."""
    family = {d: load_device(d).memory_family for d in {k[0] for k in keys}}
    out = {}
    for f in sorted({f for f in family.values() if f}):
        idx = [i for i, k in enumerate(keys) if family[k[0]] == f]
        ks, ws = [keys[i] for i in idx], [works[i] for i in idx]
        r = fit_roofline(ws, [times[i] for i in idx], 1.0, 1.0, device_weights(ks, ws))
        out[f] = round(r.bandwidth_gbs, 4)
    return out


def elementwise_launch_by_family(keys: list, works: list, times: list, pooled: Efficiency) -> dict:
    """Memory family -> the elementwise fixed cost (µs) fitted on that family's devices' rows
    alone, with the pooled bandwidth and compute fractions held (``op_cost.fit_launch``; the
    rows are launch-dominated, so a family with a handful of them pins its launch and nothing
    else). The small kernels of the HBM parts take 3-4 µs where the GDDR parts take 2."""
    family = {d: load_device(d).memory_family for d in {k[0] for k in keys}}
    out = {}
    for f in sorted({f for f in family.values() if f}):
        idx = [i for i, k in enumerate(keys) if family[k[0]] == f]
        ks, ws = [keys[i] for i in idx], [works[i] for i in idx]
        out[f] = round(fit_launch(ws, [times[i] for i in idx], pooled.bandwidth, pooled.compute,
                                  device_weights(ks, ws)), 3)
    return out


def shipped_fit() -> EfficiencyFit:
    """What ``--write`` writes: every measured bundle and every op table marked ``fit``."""
    return fit_efficiency(measured_bundles(), tables=[t for t in op_tables() if t.fit])


def fit_yaml(fit: EfficiencyFit) -> str:
    lines = ["# Device efficiencies per op class, shared by every device (llmservingsim/device_efficiency.py).",
             "# GENERATED by `python -m llmservingsim.device_efficiency --write`; do not edit.",
             "# t = launch_us + max(bytes / (bandwidth * memory_bandwidth_gbs), FLOPs / (compute * peak_bf16_tflops'))",
             "# (peak_bf16_tflops': the peak at the sustained clock where the device file gives one, Device.compute_tflops)",
             "# Method, data and fit quality: docs/datasheet-synthesis.md.",
             "fitted_on:  # the measured bundles (profiles/, no PROVENANCE.md) and op tables (efficiency/ops/) the fit read"]
    lines += [f"  - {b}" for b in fit.fitted_on]
    lines.append("classes:")
    for c, e in fit.classes.items():
        lines.append(f"  {c}: {{bandwidth: {e.bandwidth}, compute: {e.compute}, launch_us: {e.launch_us}}}"
                     f"  # fitted (weighted log least squares) on the data above")
    if fit.gemm_bandwidth:
        lines.append("gemm_bandwidth:  # per memory family: the gemm bandwidth fitted on that family's devices alone")
        lines += [f"  {f}: {b}" for f, b in fit.gemm_bandwidth.items()]
    if fit.elementwise_launch:
        lines.append("elementwise_launch:  # per memory family: the elementwise launch_us fitted on that family's devices alone")
        lines += [f"  {f}: {b}" for f, b in fit.elementwise_launch.items()]
    return "\n".join(lines) + "\n"


_LOADED: dict = {}


def load_fit(path: Optional[Path] = None) -> EfficiencyFit:
    """The shipped fit (or ``path``), checked: every class a mapping of the three finite
    terms within their bounds; a bad file is a ProfileError naming it and the key."""
    path = Path(path or hardware_dir() / FIT_FILE)
    if str(path) in _LOADED:
        return _LOADED[str(path)]
    raw = load_yaml(path, error=ProfileError, what="efficiency fit")
    if not isinstance(raw, dict) or not isinstance(raw.get("classes"), dict):
        raise ProfileError("must be a mapping with a 'classes' mapping", file=str(path), key="classes")
    classes = {}
    for c, v in raw["classes"].items():
        if c not in CLASSES:
            raise ProfileError(f"unknown class (expected one of {', '.join(CLASSES)})", file=str(path), key=f"classes.{c}")
        ok = isinstance(v, dict) and set(v) == {"bandwidth", "compute", "launch_us"} and all(
            finite_number(v[k]) for k in v)
        if not ok or not (0 < v["bandwidth"] <= 1 and 0 < v["compute"] <= 1 and v["launch_us"] >= 0):
            raise ProfileError("must be {bandwidth: (0, 1], compute: (0, 1], launch_us: >= 0}", file=str(path),
                               key=f"classes.{c}")
        classes[c] = Efficiency(float(v["bandwidth"]), float(v["compute"]), float(v["launch_us"]))
    for c in CLASSES:
        if c not in classes and FALLBACK.get(c) not in classes:
            raise ProfileError(f"class {c!r} missing", file=str(path), key="classes")
    fams = raw.get("gemm_bandwidth") or {}
    if not isinstance(fams, dict):
        raise ProfileError("must be a mapping of memory family to a fraction", file=str(path), key="gemm_bandwidth")
    for f, b in fams.items():
        if f not in MEMORY_FAMILIES or not finite_number(b) or not 0 < b <= 1:
            raise ProfileError(f"must map {' or '.join(MEMORY_FAMILIES)} to a fraction in (0, 1]", file=str(path),
                               key=f"gemm_bandwidth.{f}")
    launches = raw.get("elementwise_launch") or {}
    if not isinstance(launches, dict):
        raise ProfileError("must be a mapping of memory family to µs", file=str(path), key="elementwise_launch")
    for f, b in launches.items():
        if f not in MEMORY_FAMILIES or not finite_number(b) or b < 0:
            raise ProfileError(f"must map {' or '.join(MEMORY_FAMILIES)} to a launch_us >= 0", file=str(path),
                               key=f"elementwise_launch.{f}")
    fit = EfficiencyFit(classes, tuple(raw.get("fitted_on") or ()), {f: float(b) for f, b in fams.items()},
                        {f: float(b) for f, b in launches.items()})
    _LOADED[str(path)] = fit
    return fit


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m llmservingsim.device_efficiency", description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"rewrite hardware/{FIT_FILE}")
    a = ap.parse_args(argv)
    text = fit_yaml(shipped_fit())
    print(text, end="")
    if a.write:
        out = hardware_dir() / FIT_FILE
        out.parent.mkdir(exist_ok=True)
        out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
