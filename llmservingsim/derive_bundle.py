"""Derive a TP=k profile bundle from a measured TP=1 bundle (documented, never silent).

Used where only a TP1 profile exists (the paper's artifact profiled B200 Llama-3.1-70B at
TP1 only). Under tensor parallelism every rank runs the same layer with attention heads,
the MLP width and the vocabulary divided by k; the work of those ops divides by k whether
they are memory-bound (weight / KV bytes / k) or compute-bound (FLOPs / k). Each op keeps
its fixed launch cost, taken as the smallest time measured for that op:

    t_k(x) = t_min + (t_1(x) - t_min) / k          for sharded ops
    t_k(x) = t_1(x)                                for ops on the full hidden state
                                                   (layernorm, final_layernorm, embedding
                                                   lookup, sampler)

attention.csv, moe.csv and per_sequence lm_head scale like sharded ops; skew_fit.csv is
copied. step_overhead.csv is not: a residual (measured wall minus profiled kernels) only
means something against the kernels and the deployment it was measured with. The output folder gets a PROVENANCE.md
saying all this. Run: ``python -m llmservingsim.derive_bundle B200 meta-llama/Llama-3.1-70B --tp 2``.
"""
from __future__ import annotations

import argparse
import csv
import shutil
from pathlib import Path

from .paths import profiles_dir

UNSHARDED = {"layernorm", "final_layernorm", "embedding", "sampler"}


def _scale_rows(rows, key_layer, k):
    mins: dict = {}
    for r in rows:
        name = r.get(key_layer, "attention")
        mins[name] = min(mins.get(name, float("inf")), float(r["time_us"]))
    for r in rows:
        name = r.get(key_layer, "attention")
        if name in UNSHARDED:
            continue
        t, m = float(r["time_us"]), mins[name]
        r["time_us"] = f"{m + (t - m) / k:.4f}"
    return rows


def derive(hardware: str, model: str, tp: int, variant: str = "bf16", root: Path | None = None) -> Path:
    base = Path(root or profiles_dir()) / hardware / model / variant
    src, dst = base / "tp1", base / f"tp{tp}"
    dst.mkdir(parents=True, exist_ok=True)
    for name in ("dense.csv", "per_sequence.csv", "attention.csv", "moe.csv"):
        if not (src / name).exists():
            continue
        with open(src / name, newline="") as f:
            reader = csv.DictReader(f)
            fields = reader.fieldnames
            rows = _scale_rows(list(reader), "layer", tp)
        with open(dst / name, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
    for name in ("skew_fit.csv",):
        if (src / name).exists():
            shutil.copyfile(src / name, dst / name)
    (dst / "PROVENANCE.md").write_text(
        f"# DERIVED bundle: {hardware} {model} {variant} tp{tp}\n\n"
        f"Not measured. Generated from ../tp1 by `python -m llmservingsim.derive_bundle {hardware} {model} "
        f"--tp {tp}` (see llmservingsim/derive_bundle.py): sharded ops t = t_min + (t_tp1 - t_min) / {tp}; "
        f"layernorm, final_layernorm, embedding and sampler unchanged; skew_fit.csv copied from tp1; "
        f"no step_overhead.csv (tp1's residual belongs to tp1's kernels). Replace with a measured tp{tp} bundle when one exists.\n")
    return dst


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("hardware")
    ap.add_argument("model")
    ap.add_argument("--tp", type=int, required=True)
    ap.add_argument("--variant", default="bf16")
    a = ap.parse_args(argv)
    print(derive(a.hardware, a.model, a.tp, a.variant))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
