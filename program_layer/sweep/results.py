"""Sweep results: one row per cell, read back from the cell folders (never from live state).

``results.csv`` columns: one per axis (the dotted key; values as in ``grid.value_label``),
then the metrics in ``METRICS`` (seconds, tokens/s, counts), then ``status`` (ok | failed |
pending), ``cell_id`` and ``error`` (first line of the cell's error, if any). Rows are in grid
order, so the file is byte-identical for the same finished cells however they were scheduled.

``sweep.json`` records the grid (axes, baseline, table and plot choices, and every cell's id
and axis values) so tables and plots can be rebuilt from DIR alone.
"""
from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from program_layer.sweep.cell_run import ERROR, SUMMARY, is_done, write_atomic
from program_layer.sweep.grid import Axis, Cell, value_label

# (column, path in summary.json)
METRICS: tuple[tuple[str, tuple[str, ...]], ...] = tuple(
    [(f"{m}_{s}_s", (m + "_s", s)) for m in ("jct", "ttft", "tpot") for s in ("mean", "p50", "p90", "p99")]
    + [("output_tokens_per_s", ("throughput", "output_tokens_per_s")),
       ("prompt_tokens_per_s", ("throughput", "prompt_tokens_per_s")),
       ("programs_per_s", ("throughput", "programs_per_s")),
       ("makespan_s", ("makespan_s",)),
       ("preemptions", ("preemptions",)),
       ("prefix_cache_hit_rate", ("prefix_cache_hit_rate",))])
TAIL_COLUMNS = ("status", "cell_id", "error")
SWEEP_JSON = "sweep.json"
RESULTS_CSV = "results.csv"


def cells_dir(out_dir: str | Path) -> Path:
    return Path(out_dir) / "cells"


def cell_dir(out_dir: str | Path, cell_id: str) -> Path:
    return cells_dir(out_dir) / cell_id


def _dig(summary: Mapping, path: Sequence[str]) -> Any:
    node: Any = summary
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def result_row(cell: Cell, out_dir: str | Path) -> dict:
    """The results row of one cell, from its folder. Keys: axis keys, METRICS, TAIL_COLUMNS,
    plus ``values`` (the raw axis values) for grouping in tables and plots."""
    folder = cell_dir(out_dir, cell.cell_id)
    row: dict[str, Any] = {"values": dict(cell.values), "index": cell.index}
    row.update({key: value_label(v) for key, v in cell.values.items()})
    summary = None
    if is_done(folder):
        summary = json.loads((folder / SUMMARY).read_text(encoding="utf-8"))
        status, error = "ok", ""
    elif (folder / ERROR).is_file():
        lines = [ln for ln in (folder / ERROR).read_text(encoding="utf-8").splitlines() if ln.strip()]
        status, error = "failed", (lines[-1].strip() if lines else "failed")
    else:
        status, error = "pending", ""
    for column, path in METRICS:
        row[column] = _dig(summary, path) if summary is not None else None
    row.update(status=status, cell_id=cell.cell_id, error=error)
    return row


def collect_results(cells: Sequence[Cell], out_dir: str | Path) -> list[dict]:
    return [result_row(cell, out_dir) for cell in sorted(cells, key=lambda c: c.index)]


def _csv_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    return str(value)


def results_csv_text(axis_keys: Sequence[str], rows: Sequence[Mapping]) -> str:
    columns = list(axis_keys) + [c for c, _ in METRICS] + list(TAIL_COLUMNS)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_csv_value(row.get(c)) for c in columns])
    return buf.getvalue()


def write_results_csv(out_dir: str | Path, axis_keys: Sequence[str], rows: Sequence[Mapping]) -> Path:
    path = Path(out_dir) / RESULTS_CSV
    write_atomic(path, results_csv_text(axis_keys, rows))
    return path


def write_manifest(out_dir: str | Path, *, name: str, source: str, axes: Sequence[Axis],
                   baseline: Mapping, table_rows: str | None, table_cols: str | None,
                   kv_cells: Sequence, cells: Sequence[Cell]) -> Path:
    """``sweep.json``: everything needed to rebuild table.md and the plots from DIR."""
    data = {
        "name": name, "source": source,
        "axes": [{"key": a.key, "values": list(a.values)} for a in axes],
        "baseline": dict(baseline), "table": {"rows": table_rows, "cols": table_cols},
        "plots": {"kv_cells": list(kv_cells)},
        "cells": [{"index": c.index, "cell_id": c.cell_id, "values": dict(c.values)} for c in cells],
    }
    path = Path(out_dir) / SWEEP_JSON
    write_atomic(path, json.dumps(data, indent=2) + "\n")
    return path


def read_manifest(out_dir: str | Path) -> dict:
    """sweep.json with ``axes`` as Axis objects and ``cells`` as Cell objects (no configs)."""
    data = json.loads((Path(out_dir) / SWEEP_JSON).read_text(encoding="utf-8"))
    data["axes"] = tuple(Axis(a["key"], tuple(a["values"])) for a in data["axes"])
    data["cells"] = [Cell(index=c["index"], values=c["values"], config={}, cell_id=c["cell_id"])
                     for c in data["cells"]]
    return data
