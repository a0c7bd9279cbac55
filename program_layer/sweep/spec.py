"""Sweep spec: a YAML file naming a base config, the axes to cross, a baseline and plots.

    name: table1                        # optional, used in titles
    base: ../configs/rtx70b.yaml        # a config mapping, or a path relative to this file
    axes:                               # dotted config key -> list of values (crossed in order)
      policies.retention: [cache-lru, ttl, pressure-ttl]
      policies.scheduling: [fcfs, plas]
    baseline: {policies.retention: cache-lru, policies.scheduling: fcfs}   # optional
    table: {rows: policies.retention, cols: policies.scheduling}           # optional
    plots: {kv_cells: [{policies.scheduling: plas}]}                        # optional

Every error is a ConfigError naming the spec file, the line where known, and the key.
``baseline`` may fix only some axes: a cell's reference is then the cell that agrees with it
on every other axis and takes the baseline's values on the named ones. Omitted, the baseline
is the first value of each table axis.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from llmservingsim.errors import ConfigError, load_yaml, parse_yaml, read_text
from program_layer.sweep.grid import Axis, Cell, canonical_json, expand

SPEC_KEYS = ("name", "base", "axes", "baseline", "table", "plots")
# Top-level config sections (the run contract). An axis may also start with any key the base has.
try:  # the simulator's own list when available, so new config sections need no change here
    from program_layer.config import TOP_KEYS as _TOP_KEYS
    CONFIG_SECTIONS = frozenset(_TOP_KEYS)
except ImportError:  # pragma: no cover - config module not built
    CONFIG_SECTIONS = frozenset({"model", "hardware", "profiles", "parallelism", "instances", "engine",
                                 "workload", "policies", "seed"})
_SEGMENT = re.compile(r"^[A-Za-z0-9_\-]+$")


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep. ``base_dir`` resolves relative paths inside the base config."""

    source: str
    name: str
    base: Mapping[str, Any]
    base_dir: Path
    axes: tuple[Axis, ...]
    baseline: Mapping[str, Any] = field(default_factory=dict)
    table_rows: str | None = None
    table_cols: str | None = None
    kv_cells: tuple = ()

    def cells(self) -> list[Cell]:
        """The grid, in order (see grid.expand)."""
        return expand(self.base, self.axes, source=self.source, base_dir=self.base_dir)

    @property
    def axis_keys(self) -> list[str]:
        return [axis.key for axis in self.axes]


class _Where:
    """Line numbers of keys in the spec file, for error messages (1-based, None if unknown)."""

    def __init__(self, text: str, source: str):
        self.source = source
        self._lines: dict[tuple, int] = {}
        try:
            root = yaml.compose(text)
        except yaml.YAMLError:
            root = None  # safe_load reports the syntax error itself
        self._walk(root, ())

    def _walk(self, node, path: tuple) -> None:
        if not isinstance(node, yaml.MappingNode) or len(path) > 1:
            return
        seen = set()
        for key_node, value_node in node.value:
            key = key_node.value
            if key in seen:
                raise ConfigError("duplicate key", file=self.source, line=key_node.start_mark.line + 1,
                                  key=".".join(path + (key,)) if path else key)
            seen.add(key)
            self._lines[path + (key,)] = key_node.start_mark.line + 1
            self._walk(value_node, path + (key,))

    def error(self, message: str, *path: str) -> ConfigError:
        line = None
        for n in range(len(path), 0, -1):  # the deepest key we know a line for
            line = self._lines.get(tuple(path[:n]))
            if line:
                break
        return ConfigError(message, file=self.source, line=line, key=".".join(path) or None)


def load_spec(path: str | Path) -> SweepSpec:
    """Read and validate a sweep spec file (errors name the file, line and key)."""
    path = Path(path)
    text = read_text(path, what="sweep spec")
    return parse_spec_text(text, source=str(path), spec_dir=path.resolve().parent)


def parse_spec_text(text: str, *, source: str, spec_dir: Path) -> SweepSpec:
    # parse first: parse_yaml turns syntax errors and too-deep nesting into ConfigErrors, which
    # _Where's yaml.compose would raise as they are
    data = parse_yaml(text, file=source, problem="not valid YAML")
    where = _Where(text, source)
    return parse_spec(data, where=where, spec_dir=spec_dir)


def parse_spec(data: Any, *, where: _Where | str, spec_dir: Path) -> SweepSpec:
    """Validate a parsed spec mapping. ``where`` is a _Where or just the source name."""
    if isinstance(where, str):
        where = _Where("", where)
    if not isinstance(data, dict):
        raise where.error("a sweep spec must be a mapping with 'base' and 'axes'")
    for key in data:
        if key not in SPEC_KEYS:
            raise where.error(f"unknown key (expected one of {', '.join(SPEC_KEYS)})", str(key))
    base, base_dir = _load_base(data.get("base"), where, spec_dir)
    axes = _parse_axes(data.get("axes"), base, where)
    keys = [axis.key for axis in axes]
    baseline = _parse_baseline(data.get("baseline"), axes, where)
    rows, cols = _parse_table(data.get("table"), keys, where)
    kv_cells = _parse_kv_cells(data.get("plots"), axes, where)
    name = data.get("name", Path(where.source).stem)
    if not isinstance(name, str):
        raise where.error("must be a string", "name")
    spec = SweepSpec(source=where.source, name=name, base=base, base_dir=base_dir, axes=axes,
                     baseline=baseline, table_rows=rows, table_cols=cols, kv_cells=kv_cells)
    spec.cells()  # surfaces path conflicts (axis under a non-mapping base value) now
    return spec


def _load_base(base: Any, where: _Where, spec_dir: Path) -> tuple[dict, Path]:
    if base is None:
        raise where.error("missing: a config mapping or a path to a config file", "base")
    if isinstance(base, dict):
        return base, spec_dir
    if not isinstance(base, str):
        raise where.error("must be a config mapping or a path to a config file", "base")
    path = (spec_dir / base).resolve()
    try:
        loaded = load_yaml(path, what="base config", problem="base config is not valid YAML")
    except ConfigError as exc:      # named from the spec's 'base' key, the base file inside
        raise where.error(str(exc), "base") from None
    if not isinstance(loaded, dict):
        raise where.error(f"base config {path} must be a mapping", "base")
    return loaded, path.parent


def _parse_axes(axes: Any, base: Mapping, where: _Where) -> tuple[Axis, ...]:
    if axes is None:
        raise where.error("missing: a mapping of dotted config keys to lists of values", "axes")
    if not isinstance(axes, dict):
        raise where.error("must be a mapping of dotted config keys to lists of values", "axes")
    parsed = []
    for key, values in axes.items():
        if not isinstance(key, str) or not all(_SEGMENT.match(part) for part in key.split(".")):
            raise where.error("axis keys are dotted config paths such as 'policies.retention'",
                              "axes", str(key))
        if key.split(".")[0] not in CONFIG_SECTIONS and key.split(".")[0] not in base:
            raise where.error(f"'{key.split('.')[0]}' is not a config section "
                              f"({', '.join(sorted(CONFIG_SECTIONS))})", "axes", key)
        if not isinstance(values, list) or not values:
            raise where.error("must be a non-empty list of values", "axes", key)
        texts = [canonical_json(v) for v in values]
        dupes = sorted({t for t in texts if texts.count(t) > 1})
        if dupes:
            raise where.error(f"repeated value {dupes[0]}", "axes", key)
        parsed.append(Axis(key=key, values=tuple(values)))
    for a in parsed:  # an axis inside another axis would be silently overwritten
        for b in parsed:
            if a is not b and b.key.startswith(a.key + "."):
                raise where.error(f"overlaps axis '{a.key}' (one replaces the other)", "axes", b.key)
    return tuple(parsed)


def _parse_baseline(baseline: Any, axes: tuple[Axis, ...], where: _Where) -> dict:
    if baseline is None:
        return {}
    if not isinstance(baseline, dict):
        raise where.error("must map axis keys to one of their values", "baseline")
    by_key = {axis.key: axis for axis in axes}
    for key, value in baseline.items():
        if key not in by_key:
            raise where.error(f"'{key}' is not an axis of this sweep", "baseline", str(key))
        if canonical_json(value) not in {canonical_json(v) for v in by_key[key].values}:
            raise where.error(f"{value!r} is not one of the axis values", "baseline", key)
    return dict(baseline)


def _parse_table(table: Any, keys: list[str], where: _Where) -> tuple[str | None, str | None]:
    if table is None:
        return None, None
    if not isinstance(table, dict) or set(table) - {"rows", "cols"}:
        raise where.error("must be a mapping with 'rows' and/or 'cols' axis keys", "table")
    for part in ("rows", "cols"):
        if part in table and table[part] not in keys:
            raise where.error(f"'{table[part]}' is not an axis of this sweep", "table", part)
    if "rows" in table and table.get("rows") == table.get("cols"):
        raise where.error("rows and cols must be different axes", "table", "cols")
    return table.get("rows"), table.get("cols")


def _parse_kv_cells(plots: Any, axes: tuple[Axis, ...], where: _Where) -> tuple:
    if plots is None:
        return ()
    if not isinstance(plots, dict) or set(plots) - {"kv_cells"}:
        raise where.error("must be a mapping with 'kv_cells'", "plots")
    selectors = plots.get("kv_cells") or []
    if not isinstance(selectors, list):
        raise where.error("must be a list of cell ids or axis-value mappings", "plots", "kv_cells")
    by_key = {axis.key: axis for axis in axes}
    for selector in selectors:
        if isinstance(selector, str):
            continue  # a cell id; unknown ids are reported when plotting
        if not isinstance(selector, dict):
            raise where.error(f"entry {selector!r} must be a cell id or a mapping of axis values",
                              "plots", "kv_cells")
        for key, value in selector.items():
            if key not in by_key:
                raise where.error(f"'{key}' is not an axis of this sweep", "plots", "kv_cells")
            if canonical_json(value) not in {canonical_json(v) for v in by_key[key].values}:
                raise where.error(f"{value!r} is not a value of axis '{key}'", "plots", "kv_cells")
    return tuple(selectors)
