"""Workload generators, trace importers and workload JSONL I/O (docs/workloads.md).

Public entry points, imported lazily so that importing this package (the CLI wires
``program_layer.workloads.cli`` at start-up) does not import numpy:

- ``generate_programs(generator, *, programs, rate_jps, seed, **params)`` and ``GENERATORS``
  (``generators.py``),
- ``import_trace(fmt, path, *, limit=None, time_scale=1.0)`` and ``IMPORTERS`` (``importers.py``),
- ``write_jsonl``, ``read_jsonl``, ``workload_stats`` (``io.py``).
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "generate_programs": "generators", "GENERATORS": "generators",
    "import_trace": "importers", "IMPORTERS": "importers",
    "write_jsonl": "io", "read_jsonl": "io", "workload_stats": "io",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
