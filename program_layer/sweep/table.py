"""``table.md``: change in mean JCT relative to a baseline cell, in the style of the paper's
Table 1 (rows and columns from two axes; one table per combination of any further axes).

Entry = (mean JCT of the cell - mean JCT of its reference) / mean JCT of the reference x 100,
printed with a sign and one decimal ("+0.4%", "-3.9%"); the reference itself reads
"0.0% (baseline)". A cell's reference is the cell equal to it on every axis except those the
baseline names, which take the baseline's values. Without a baseline, the first value of each
table axis is used. The caption gives each reference's absolute mean JCT.
"""
from __future__ import annotations

import itertools
from typing import Mapping, Sequence

from program_layer.sweep.grid import Axis, canonical_json, short_key, value_label

JCT = "jct_mean_s"


def table_axes(axes: Sequence[Axis], rows: str | None, cols: str | None) -> tuple[str | None, str | None]:
    """The row and column axes: the chosen ones, else the first two axes (in spec order)."""
    keys = [a.key for a in axes]
    rows = rows or next((k for k in keys if k != cols), None)
    cols = cols or next((k for k in keys if k != rows), None)
    return rows, cols


def effective_baseline(axes: Sequence[Axis], baseline: Mapping, rows: str | None, cols: str | None) -> dict:
    if baseline:
        return dict(baseline)
    first = {a.key: a.values[0] for a in axes}
    return {k: v for k, v in first.items() if k in (rows, cols)}  # named in axis order


def percent_change(value: float, reference: float) -> str:
    """'+0.4%' style; values that round to zero print as '0.0%' (never '-0.0%')."""
    pct = (value - reference) / reference * 100.0
    text = f"{pct:+.1f}"
    return "0.0%" if text in ("+0.0", "-0.0") else text + "%"


def render_table(axes: Sequence[Axis], results: Sequence[Mapping], *, baseline: Mapping | None = None,
                 rows: str | None = None, cols: str | None = None, name: str = "sweep") -> str:
    """Markdown text of table.md from results rows (see results.result_row)."""
    rows, cols = table_axes(axes, rows, cols)
    base = effective_baseline(axes, baseline or {}, rows, cols)
    by_values = {_key(r["values"]): r for r in results}
    others = [a for a in axes if a.key not in (rows, cols)]
    out = [f"# {name}: change in mean JCT", ""]
    for combo in itertools.product(*(a.values for a in others)):
        fixed = {a.key: v for a, v in zip(others, combo)}
        if fixed:
            out += ["## " + ", ".join(f"{k} = {value_label(v)}" for k, v in fixed.items()), ""]
        out += _one_table(axes, by_values, base, rows, cols, fixed)
    return "\n".join(out).rstrip("\n") + "\n"


def _one_table(axes, by_values, base, rows, cols, fixed) -> list[str]:
    axis = {a.key: a for a in axes}
    row_values = axis[rows].values if rows else (None,)
    col_values = axis[cols].values if cols else (None,)
    references: dict[str, Mapping] = {}
    lines = []
    for rv in row_values:
        entries = []
        for cv in col_values:
            values = dict(fixed)
            if rows:
                values[rows] = rv
            if cols:
                values[cols] = cv
            ref_values = {**values, **base}
            cell, ref = by_values.get(_key(values)), by_values.get(_key(ref_values))
            if ref is not None:
                references[_key(ref_values)] = ref
            entries.append(_entry(cell, ref, _key(values) == _key(ref_values)))
        head = value_label(rv) if rows else "all"
        lines.append(f"| {head} | " + " | ".join(entries) + " |")
    col_head = " | ".join(value_label(v) for v in col_values) if cols else "change in mean JCT"
    corner = f"{short_key(rows)} \\ {short_key(cols)}" if rows and cols else (short_key(rows) if rows else "")
    header = [f"| {corner} | {col_head} |", "|---|" + "---:|" * len(col_values)]
    return [_caption(references, base, fixed), ""] + header + lines + [""]


def _entry(cell, ref, is_ref: bool) -> str:
    if cell is None:
        return "missing"
    if cell["status"] != "ok" or cell.get(JCT) is None:
        return cell["status"]
    if is_ref:
        return "0.0% (baseline)"
    if ref is None or ref["status"] != "ok" or not ref.get(JCT):
        return "n/a (baseline not ok)"
    return percent_change(cell[JCT], ref[JCT])


def _caption(references: Mapping[str, Mapping], base: Mapping, fixed: Mapping) -> str:
    named = ", ".join(f"{short_key(k)}={value_label(v)}" for k, v in base.items()) or "the base config"
    parts = []
    for ref in references.values():
        label = ", ".join(f"{short_key(k)}={value_label(v)}" for k, v in ref["values"].items()
                          if k not in base and k not in fixed)
        jct = _seconds(ref[JCT]) if ref["status"] == "ok" and ref.get(JCT) is not None else ref["status"]
        parts.append(f"{label}: {jct}" if label else jct)
    return (f"Table: change in mean JCT relative to {named} ({'; '.join(parts) or 'no reference cell'}); "
            "lower is better.")


def _seconds(value: float) -> str:
    """Mean JCT for the caption: one decimal (as the paper's "3726 s"), more digits when small."""
    return f"{value:.1f} s" if abs(value) >= 100 else f"{value:.4g} s"


def _key(values: Mapping) -> str:
    return canonical_json(dict(sorted(values.items())))
