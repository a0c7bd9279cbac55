"""Convert Vidur's public per-op GEMM measurements into an op table (hardware/efficiency/ops/).

    python hardware/tools/import_vidur_ops.py VIDUR_TREE h100 OUT.csv

``VIDUR_TREE`` is a checkout of microsoft/vidur; ``h100`` its device folder under
``data/profiling/compute/``. Every ``<org>/<model>/mlp.csv`` of that
folder is read. What is kept, and why:

- the four projection GEMMs (Vidur's ``attn_pre_proj``, ``attn_post_proj``, ``mlp_up_proj``,
  ``mlp_down_proj`` = our ``qkv_proj``, ``o_proj``, ``gate_up_proj``, ``down_proj``): cuBLAS
  through ``torch.nn.functional.linear`` in Vidur's profiler as in vLLM, so the same kernels.
  Vidur's norms, rotary and activation are its own implementations, so they are not kept;
- its ``median`` statistic (ms, converted to µs) of each row, and where a (tokens, TP) point
  was measured more than once the median of those rows;
- token counts that are powers of two or three times one (the sizes the efficiency fit reads
  from a dense table: llmservingsim.device_efficiency._sparse);
- the shapes the work needs (hidden, heads, KV heads, intermediate), from the row itself.

Output columns: model,hidden,heads,kv_heads,intermediate,tp,layer,tokens,time_us, sorted, so the
same input gives the same bytes.
"""
from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

from llmservingsim.device_efficiency import TABLE_COLUMNS, TABLE_OPS
from llmservingsim.device_efficiency import _sparse as sparse     # the sizes the fit reads

OPS = dict(zip(("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"), TABLE_OPS))
SHAPE = ("n_embd", "n_head", "n_kv_head", "n_expanded_embd")


def rows(tree: Path, vidur_device: str):
    base = tree / "data" / "profiling" / "compute" / vidur_device
    for path in sorted(base.glob("*/*/mlp.csv")):
        model = f"{path.parent.parent.name}/{path.parent.name}"
        points: dict = {}
        with path.open(newline="") as fh:
            for r in csv.DictReader(fh):
                if r.get("use_gated_mlp") != "True":
                    break          # a non-gated MLP (phi-2) has no gate_up_proj
                tokens = int(r["num_tokens"])
                if not sparse(tokens):
                    continue
                shape = tuple(int(r[k]) for k in SHAPE)
                tp = int(r["num_tensor_parallel_workers"])
                for theirs, ours in OPS.items():
                    points.setdefault((shape, tp, ours, tokens), []).append(
                        float(r[f"time_stats.{theirs}.median"]) * 1000.0)
        for (shape, tp, op, tokens), times in sorted(points.items()):
            yield (model, *shape, tp, op, tokens, round(statistics.median(times), 4))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3:
        print(__doc__.splitlines()[2].strip(), file=sys.stderr)
        return 2
    tree, vidur_device, out = Path(argv[0]), argv[1], Path(argv[2])
    body = list(rows(tree, vidur_device))
    if not body:
        print(f"{tree}: no gated-MLP mlp.csv under data/profiling/compute/{vidur_device}", file=sys.stderr)
        return 2
    with out.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(TABLE_COLUMNS)
        w.writerows(body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
