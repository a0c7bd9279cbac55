"""The sweep grid: axes crossed into cells, each cell a full config with a stable id.

Invariants:
- Cells come in one fixed order: ``itertools.product`` over the axes in the order the spec
  lists them, the first axis varying slowest. ``Cell.index`` is the position in that order.
- An axis value *replaces* whatever the base config holds at its dotted path (mappings are
  not merged), so a cell's config is exactly ``base`` plus its axis assignments.
- ``cell_id`` depends only on the cell's full config (canonical JSON, sorted keys), never on
  the axis order, the spec file name or the order in which cells run. Equal configs share
  an id, so re-running a sweep finds the cells it finished before.
"""
from __future__ import annotations

import copy
import hashlib
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from llmservingsim.errors import ConfigError
from program_layer.digests import file_sha256

CELL_ID_CHARS = 12  # 48 bits of sha256: collisions are negligible for any sweep a person runs


@dataclass(frozen=True)
class Axis:
    """One swept config key: a dotted path (``policies.retention``) and its values, in order."""

    key: str
    values: tuple


@dataclass(frozen=True)
class Cell:
    """One point of the grid. ``values`` maps each axis key to this cell's value."""

    index: int
    values: Mapping[str, Any]
    config: Mapping[str, Any]
    cell_id: str

    def label(self, keys: Sequence[str] | None = None) -> str:
        """Short human label, e.g. ``retention=ttl, scheduling=plas`` (last path segment)."""
        keys = list(self.values) if keys is None else list(keys)
        return ", ".join(f"{short_key(k)}={value_label(self.values[k])}" for k in keys) or "base"


def canonical_json(value: Any) -> str:
    """Canonical JSON text: sorted keys, no spaces, ASCII only; NaN/Infinity are refused."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def cell_id(config: Mapping[str, Any], base_dir: Path | None = None) -> str:
    """Stable short hash of a full config (first 12 hex digits of sha256 of canonical JSON).

    With ``base_dir``, the contents of the files the config points at (the workload file and
    policy files, relative paths resolved against ``base_dir``) are hashed too, so editing such
    a file makes the cell new; a config that references no files keeps its plain id."""
    payload = dict(config)
    inputs = referenced_file_digests(config, base_dir) if base_dir is not None else {}
    if inputs:
        payload["_inputs"] = inputs
    return hashlib.sha256(canonical_json(payload).encode("ascii")).hexdigest()[:CELL_ID_CHARS]


def referenced_file_digests(config: Mapping[str, Any], base_dir: Path) -> dict[str, str]:
    """sha256 of each existing file the config names: workload.path and ``file.py:Class``
    policies (built-in names and module paths reference no file)."""
    refs = []
    workload = config.get("workload")
    if isinstance(workload, Mapping) and isinstance(workload.get("path"), str):
        refs.append(workload["path"])
    policies = config.get("policies")
    if isinstance(policies, Mapping):
        for spec in policies.values():
            name = spec.get("name") if isinstance(spec, Mapping) else spec
            if isinstance(name, str) and ".py" in name:
                refs.append(name.split(":", 1)[0])
    digests = {}
    for ref in refs:
        path = Path(ref) if Path(ref).is_absolute() else Path(base_dir) / ref
        if path.is_file():
            digests[ref] = file_sha256(path)
    return digests


def value_label(value: Any) -> str:
    """A value as it appears in tables, CSV columns and legends (mappings as compact JSON)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return repr(value)
    return canonical_json(value)


def short_key(key: str) -> str:
    """The last segment of a dotted key path (``policies.retention`` -> ``retention``)."""
    return key.rsplit(".", 1)[-1]


def set_path(config: dict, key: str, value: Any, *, source: str | None = None) -> None:
    """Set ``config[a][b][c] = value`` for ``key = "a.b.c"``, creating missing mappings.

    Raises ConfigError naming ``source`` and the key when an intermediate value exists but
    is not a mapping (e.g. ``hardware.name`` when ``hardware: B200`` is a string).
    """
    parts = key.split(".")
    node = config
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            prefix = ".".join(parts[: depth + 1])
            raise ConfigError(f"cannot set '{key}': '{prefix}' in the base config is "
                              f"{type(child).__name__} {child!r}, not a mapping", file=source, key=f"axes.{key}")
        node = child
    node[parts[-1]] = copy.deepcopy(value)


def expand(base: Mapping[str, Any], axes: Sequence[Axis], *, source: str | None = None,
           base_dir: Path | None = None) -> list[Cell]:
    """Cross the axes into cells in grid order (first axis slowest)."""
    cells = []
    for index, combo in enumerate(itertools.product(*(axis.values for axis in axes))):
        config = copy.deepcopy(dict(base))
        values = {}
        for axis, value in zip(axes, combo):
            set_path(config, axis.key, value, source=source)
            values[axis.key] = value
        cells.append(Cell(index=index, values=values, config=config, cell_id=cell_id(config, base_dir)))
    return cells


def matches(cell: Cell, selector: Mapping[str, Any]) -> bool:
    """True when the cell's value equals the selector's on every key the selector names."""
    return all(canonical_json(cell.values.get(k)) == canonical_json(v) for k, v in selector.items())
