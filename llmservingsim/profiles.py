"""Loading LLMServingSim profile bundles (docs/profile-bundles.md) into interpolation tables.

Layout: ``<root>/<HARDWARE>/<org>/<model>/<variant>/meta.yaml`` and ``.../tp<N>/*.csv``.
Everything is generic over layer names: a bundle's ``dense.csv`` may list any token-wise
ops (Qwen3 adds ``qk_norm``; MoE models drop the dense MLP and add ``moe.csv``).
Missing required files raise :class:`ProfileError` naming the path that was expected.
"""
from __future__ import annotations

import csv
import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .errors import ProfileError, finite_number, iter_lines, load_yaml, read_text
from .interp import GridND, Table1D
from .paths import profiles_dir


@dataclass
class AttentionTables:
    """Attention time per layer (µs) from ``attention.csv``.

    Three views of one measurement set: prefill-only (chunk, kv_prefill), decode-only
    (n_decode, kv_decode) and mixed (all four axes, on the power-of-two sub-grid; the few
    mixed points the profiler skipped are filled by extending the n_decode axis linearly).
    """
    prefill: GridND
    decode: GridND
    mixed: GridND


@dataclass
class SkewFit:
    """The profiler's correction for uneven decode lengths: alpha per bucket, else ``alpha_default``."""
    alpha_default: float
    table: dict            # (pc, n_label, sr_label, kvb_label, kp_label) -> alpha
    n_bins: list
    n_labels: list
    sr_bins: list
    sr_labels: list
    kvb_bins: list
    kvb_labels: list
    kp_bins: list
    kp_labels: list
    pc_set: frozenset          # prefill chunks the fit has buckets for (exact grid values)


@dataclass
class ProfileBundle:
    """One device, model and TP degree's measured op times, as interpolation tables."""
    path: Path
    tp: int
    meta: dict
    dense: dict[str, Table1D]
    per_sequence: dict[str, Table1D]
    attention: AttentionTables
    skew: Optional[SkewFit]
    moe: Optional[GridND] = None
    provenance: str = "measured"     # or "derived from tp<N>" / "synthesized from datasheet" (PROVENANCE.md)


def _read_csv(path: Path, required: tuple[str, ...], *, text: tuple[str, ...] = ("layer",),
              signed: tuple[str, ...] = (), allow_empty: bool = False) -> dict[str, list]:
    """The ``required`` columns of a profile table, each a list of its cells in file order:
    ``text`` columns as strings, every other one as a finite float, >= 0 unless it is in
    ``signed``. Times (``time_us``) and grid axes (tokens, sequences, chunk and KV lengths,
    expert counts) are never negative and may be 0 (the decode-only points have
    ``prefill_chunk = 0``); a fitted coefficient (``alpha``) may be negative. A row that
    breaks this, or has more or fewer fields than the header, is a ProfileError naming the
    file, line and column, so a NaN or a negative time cannot reach the interpolation tables."""
    if not path.exists():
        raise ProfileError(f"missing profile file (expected {path})", file=str(path))
    columns = _read_plain_csv(path, required, text, signed)
    if columns is None:     # not plain, or not valid: the checked reader names what is wrong
        columns = _read_checked_csv(path, required, text, signed)
    if not columns[required[0]] and not allow_empty:
        raise ProfileError("empty profile table", file=str(path))
    return columns


def _read_plain_csv(path: Path, required: tuple[str, ...], text: tuple[str, ...],
                    signed: tuple[str, ...]) -> Optional[dict[str, list]]:
    """``_read_csv``'s columns when the file is plain (no quoting, every row as wide as the
    header, every cell valid), split in one go and sliced a column at a time; None otherwise.
    Profile tables have tens of thousands of rows and the checked reader costs most of a
    short run's start-up; it only has to run when something is wrong, to say what."""
    try:
        data = read_text(path, error=ProfileError, what="profile table")
    except ProfileError:
        return None
    if "\r" in data:           # the profiler writes CRLF (csv's default); a lone CR is not plain
        if data.count("\r") != data.count("\r\n"):
            return None
        data = data.replace("\r\n", "\n")
    if '"' in data:
        return None
    lines = data.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    limit = csv.field_size_limit()      # csv's own limit (a longer line may hold a longer field)
    if not lines or (len(data) > limit and max(map(len, lines)) > limit):
        return None
    header = lines[0].split(",")
    if any(c not in header for c in required):
        return None
    body = lines[1:]
    if "" in body:              # blank lines are skipped, as csv skips them
        body = [line for line in body if line]
    width = len(header)
    # every row as wide as the header, so that the flat list of cells slices into columns
    if body and set(map(str.count, body, itertools.repeat(","))) != {width - 1}:
        return None
    cells = ",".join(body).split(",") if body else []
    columns = {}
    for k in required:
        col = cells[header.index(k)::width]
        if k not in text:
            col = _floats(col, k in signed)
            if col is None:
                return None
        columns[k] = col
    return columns


def _floats(cells: list[str], signed: bool) -> Optional[list[float]]:
    """``cells`` as floats, or None if one is not a finite number (or is negative, unless
    ``signed``). A grid axis repeats a few values over thousands of rows: each distinct
    string is converted once."""
    distinct = set(cells)
    try:
        if 4 * len(distinct) <= len(cells):
            memo = {c: float(c) for c in distinct}
            values, col = memo.values(), list(map(memo.__getitem__, cells))
        else:
            values = col = list(map(float, cells))
    except ValueError:
        return None
    if not all(map(math.isfinite, values)) or (not signed and values and min(values) < 0):
        return None
    return col


def _read_checked_csv(path: Path, required: tuple[str, ...], text: tuple[str, ...],
                      signed: tuple[str, ...]) -> dict[str, list]:
    """The columns of ``_read_csv``, read a cell at a time, raising on the first bad one."""
    at = [0]           # the file line csv is on (its own line_num lags behind on a csv.Error)

    def lines():
        for at[0], line in iter_lines(path, error=ProfileError, what="profile table"):
            yield line
    reader = csv.DictReader(lines())
    try:
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise ProfileError(f"missing column(s) {missing}", file=str(path), line=1)
        columns: dict[str, list] = {k: [] for k in required}
        for row in reader:
            if None in row:      # DictReader's key for fields beyond the header's
                raise ProfileError(f"row has {len(reader.fieldnames) + len(row[None])} fields, the "
                                   f"header {len(reader.fieldnames)}", file=str(path), line=at[0])
            for k in required:
                columns[k].append(_cell(row.get(k), k, k in text, k in signed, path, at[0]))
    except csv.Error as exc:     # e.g. a field over csv's 128 KiB field limit
        raise ProfileError(f"not valid CSV ({exc})", file=str(path), line=at[0]) from None
    return columns


def _cell(value: Optional[str], column: str, is_text: bool, signed: bool, path: Path, line: int):
    """One checked cell of a profile table (see ``_read_csv``)."""
    if value is None:        # the row has fewer fields than the header
        raise ProfileError(f"column '{column}' is missing", file=str(path), line=line)
    if is_text:
        return value
    try:
        number = float(value)
    except ValueError:
        number = None
    if number is None or not math.isfinite(number) or (number < 0 and not signed):
        want = "a finite number" if signed else "a finite number >= 0"
        raise ProfileError(f"column '{column}' must be {want}, got {value!r}", file=str(path),
                           line=line)
    return number


def _by_layer(cols: dict[str, list], xkey: str) -> dict[str, Table1D]:
    groups: dict[str, dict[float, list[float]]] = {}
    for name, x, t in zip(cols["layer"], cols[xkey], cols["time_us"]):
        groups.setdefault(name, {}).setdefault(x, []).append(t)
    # repeated rows of one size are averaged (no shipped bundle has any)
    return {name: Table1D(sorted(pts), [sum(pts[x]) / len(pts[x]) for x in sorted(pts)])
            for name, pts in groups.items()}


def _pow2(values) -> list[float]:
    return sorted(v for v in set(values) if v > 0 and (int(v) & (int(v) - 1)) == 0)


ATTENTION_COLUMNS = ("prefill_chunk", "kv_prefill", "n_decode", "kv_decode", "time_us")
DENSE_COLUMNS = ("layer", "tokens", "time_us")
PER_SEQUENCE_COLUMNS = ("layer", "sequences", "time_us")
MOE_COLUMNS = ("tokens", "activated_experts", "time_us")
# The columns the loader reads from each table of a tp<N> folder (moe.csv only for MoE models).
TABLE_COLUMNS = {"dense.csv": DENSE_COLUMNS, "per_sequence.csv": PER_SEQUENCE_COLUMNS,
                 "attention.csv": ATTENTION_COLUMNS, "moe.csv": MOE_COLUMNS}


def _attention(cols: dict[str, list], path: Path) -> AttentionTables:
    axes = ATTENTION_COLUMNS[:4]
    # (chunk, kv_prefill, n_decode, kv_decode) -> time; a repeated point: the last row's
    pts = dict(zip(zip(*(cols[a] for a in axes)), cols["time_us"]))
    P = _pow2(cols["prefill_chunk"])
    K = [0.0] + _pow2(cols["kv_prefill"])
    N = _pow2(cols["n_decode"])
    KD = _pow2(cols["kv_decode"])
    if not P or not N or not KD:
        raise ProfileError("attention grid lacks prefill or decode points", file=str(path))

    def grid2(ax0, ax1, make_key, label):
        vals = []
        for a in ax0:
            row = []
            for b in ax1:
                key = make_key(a, b)
                if key not in pts:
                    raise ProfileError(f"attention grid point {key} missing ({label})", file=str(path))
                row.append(pts[key])
            vals.append(row)
        return GridND([ax0, ax1], vals), vals

    prefill, pre = grid2(P, K, lambda a, b: (a, b, 0.0, 0.0), "prefill-only")
    decode, dec = grid2(N, KD, lambda a, b: (0.0, 0.0, a, b), "decode-only")
    # vals[i][j][k][l]: None where the profiler skipped the mixed point
    vals = [[[[pts.get((a, b, c, d)) for d in KD] for c in N] for b in K] for a in P]
    # Fill skipped mixed points along n_decode (the profiler omits some large-batch corners):
    # extrapolate linearly from the two smaller batches, or with no smaller batch to extend
    # from, use prefill + decode (additive upper bound).
    for k in range(len(N)):
        for i, j in itertools.product(range(len(P)), range(len(K))):
            cells = vals[i][j]
            row = cells[k]
            for l in range(len(KD)):
                if row[l] is None:
                    if k >= 2:
                        slope = (cells[k - 1][l] - cells[k - 2][l]) / (N[k - 1] - N[k - 2])
                        row[l] = cells[k - 1][l] + slope * (N[k] - N[k - 1])
                    else:
                        row[l] = pre[i][j] + dec[k][l]
    if any(math.isnan(v) for plane in vals for rows in plane for row in rows for v in row):
        raise ProfileError("attention mixed grid could not be completed", file=str(path))
    return AttentionTables(prefill, decode, GridND([P, K, N, KD], vals))


def _skew(meta: dict, tp: int, path: Path, meta_path: Path) -> Optional[SkewFit]:
    fit = meta.get("skew_fit") or {}
    if isinstance(fit, dict) and fit.get("enabled") is False:
        return None            # the profiler marks the fit unusable: apply no correction
    per_tp_all = fit.get("per_tp") or {} if isinstance(fit, dict) else None
    if not isinstance(per_tp_all, dict):
        raise ProfileError("skew_fit.per_tp must be a mapping of TP degree to fit", file=str(meta_path),
                           key="skew_fit.per_tp")
    per_tp = per_tp_all.get(tp) or per_tp_all.get(str(tp))
    if not per_tp:
        return None
    alpha_default = per_tp.get("alpha_default", 0.0) if isinstance(per_tp, dict) else None
    if not finite_number(alpha_default):
        raise ProfileError(f"must be a mapping with a finite alpha_default, got {per_tp!r}",
                           file=str(meta_path), key=f"skew_fit.per_tp.{tp}")
    axes = fit.get("bucket_axes") or {}
    if not isinstance(axes, dict):
        raise ProfileError("must be a mapping of bucket names to lists", file=str(meta_path),
                           key="skew_fit.bucket_axes")
    table = {}
    if path.exists():
        labels = ("n_label", "skew_rate_label", "kv_big_label", "kp_label")
        cols = _read_csv(path, ("pc",) + labels + ("alpha",), text=labels, signed=("alpha",),
                         allow_empty=True)
        table = dict(zip(zip(cols["pc"], *(cols[k] for k in labels)), cols["alpha"]))
    return SkewFit(
        alpha_default=float(alpha_default), table=table,
        n_bins=axes.get("n_bins", []), n_labels=axes.get("n_labels", []),
        sr_bins=axes.get("skew_rate_bins", []), sr_labels=axes.get("skew_rate_labels", []),
        kvb_bins=axes.get("kv_big_bins", []), kvb_labels=axes.get("kv_big_labels", []),
        kp_bins=axes.get("kp_bins", []), kp_labels=axes.get("kp_labels", []),
        pc_set=frozenset(k[0] for k in table))


def _moe(cols: dict[str, list], path: Path) -> GridND:
    toks = sorted(set(cols["tokens"]))
    experts = sorted(set(cols["activated_experts"]))
    pts = dict(zip(zip(cols["tokens"], cols["activated_experts"]), cols["time_us"]))
    vals = []
    for t in toks:                    # a row only lists experts reachable with t tokens: extend flat
        last, row = None, []
        for e in experts:
            last = pts.get((t, e), last)
            row.append(last)
        vals.append(row)
    for j in range(len(experts)):     # fill leading gaps from the next token count
        for i in range(len(toks) - 2, -1, -1):
            if vals[i][j] is None:
                vals[i][j] = vals[i + 1][j]
    if any(v is None for v in vals[-1]):
        raise ProfileError("MoE grid: the largest token count lacks an expert count", file=str(path))
    return GridND([toks, experts], vals)


def _provenance(tp_dir: Path) -> str:
    """"measured", "derived from tp<N>" when the folder's PROVENANCE.md (written by
    ``derive_bundle``) says it was generated from another TP degree, or "synthesized from
    datasheet" when it says so (written by ``synthesize_bundle``)."""
    note = tp_dir / "PROVENANCE.md"
    if not note.is_file():
        return "measured"
    import re
    text = note.read_text(encoding="utf-8", errors="replace")
    if "Synthesized from datasheet" in text:
        return "synthesized from datasheet"
    m = re.search(r"Generated from \.\./tp(\d+)", text)
    return f"derived from tp{m.group(1)}" if m else "derived"


def measured_tps(base: Path) -> list[int]:
    """TP degrees of ``base`` (a bundle's variant folder) with a measured bundle: a
    ``tp<N>`` folder holding dense.csv and no PROVENANCE.md (derived folders carry one)."""
    out = []
    for p in base.glob("tp*"):
        if p.name[2:].isdigit() and (p / "dense.csv").is_file() and not (p / "PROVENANCE.md").exists():
            out.append(int(p.name[2:]))
    return sorted(out)


def bundle_dir(hardware: str, model: str, variant: str = "bf16", root: Optional[Path] = None) -> Path:
    return Path(root or profiles_dir()) / hardware / model / variant


def load_meta(meta_path: Path) -> dict:
    """A bundle's meta.yaml as a mapping ({} when there is none)."""
    meta = {}
    if meta_path.exists():
        meta = load_yaml(meta_path, error=ProfileError, what="bundle meta.yaml") or {}
        if not isinstance(meta, dict):
            raise ProfileError("meta.yaml must be a mapping", file=str(meta_path))
    return meta


_CACHE: dict = {}


def load_bundle(hardware: str, model: str, tp: int, variant: str = "bf16",
                root: Optional[Path] = None, cache: bool = True) -> ProfileBundle:
    """Load (and, with ``cache``, keep per process) the bundle for one device, model and TP
    degree."""
    base = bundle_dir(hardware, model, variant, root)
    key = (str(base), tp)
    if key in _CACHE:
        return _CACHE[key]
    meta_path = base / "meta.yaml"
    tp_dir = base / f"tp{tp}"
    if not tp_dir.is_dir():
        avail = sorted(p.name for p in base.glob("tp*")) if base.is_dir() else []
        raise ProfileError(f"no profile bundle for {model} on {hardware} at TP={tp} (expected {tp_dir}; "
                           f"available: {avail or 'none'})", file=str(tp_dir))
    meta = load_meta(meta_path)
    tables = {name: _read_csv(tp_dir / name, required) for name, required in TABLE_COLUMNS.items()
              if name != "moe.csv" or (tp_dir / name).exists()}
    bundle = bundle_from_columns(tp_dir, tp, meta, tables, tp_dir / "skew_fit.csv", meta_path,
                                 _provenance(tp_dir))
    if cache:
        _CACHE[key] = bundle
    return bundle


def table_columns(name: str, header: list, rows: list, where: Path) -> dict[str, list]:
    """The columns ``_read_csv`` returns for a file ``name`` (a key of ``TABLE_COLUMNS``)
    holding ``header`` and ``rows`` as csv.writer writes them, without the file: a cell is
    str, int or float, and csv writes each as ``str(cell)``, which ``float`` reads back
    exactly (an int below 2**53, a float by its repr, a string as itself). So a bundle built
    in memory has the very tables of the written-and-reloaded one (the on-the-fly paths of
    derive_bundle and synthesize_bundle rely on it). A bad cell is the same ProfileError the
    loader raises, naming ``where``."""
    required = TABLE_COLUMNS[name]
    missing = [c for c in required if c not in header]
    if missing:
        raise ProfileError(f"missing column(s) {missing}", file=str(where), line=1)
    columns = {}
    for k in required:
        col = [r[header.index(k)] for r in rows] if rows and not isinstance(rows[0], dict) \
            else [r[k] for r in rows]
        if k != "layer":
            col = _floats(col, False)
            if col is None:     # only the checked reader says which cell
                raise ProfileError(f"column '{k}' must be a finite number >= 0", file=str(where))
        columns[k] = col
    if not columns[required[0]]:
        raise ProfileError("empty profile table", file=str(where))
    return columns


def bundle_from_columns(tp_dir: Path, tp: int, meta: dict, tables: dict[str, dict[str, list]],
                        skew_path: Path, meta_path: Path, provenance: str) -> ProfileBundle:
    """A bundle from its tables' columns (``_read_csv``'s or ``table_columns``'s, by file name;
    moe.csv optional): the one place that turns profile columns into interpolation tables,
    for a bundle read from disk and one built in memory alike. A table missing from
    ``tables`` is the loader's "missing profile file" ProfileError."""
    for name in TABLE_COLUMNS:
        if name not in tables and name != "moe.csv":
            raise ProfileError(f"missing profile file (expected {tp_dir / name})", file=str(tp_dir / name))
    bundle = ProfileBundle(path=tp_dir, tp=tp, meta=meta,
                           dense=_by_layer(tables["dense.csv"], "tokens"),
                           per_sequence=_by_layer(tables["per_sequence.csv"], "sequences"),
                           attention=_attention(tables["attention.csv"], tp_dir / "attention.csv"),
                           skew=_skew(meta, tp, skew_path, meta_path), provenance=provenance)
    if "moe.csv" in tables:
        bundle.moe = _moe(tables["moe.csv"], tp_dir / "moe.csv")
    return bundle
