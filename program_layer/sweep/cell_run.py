"""Running one sweep cell inside a worker (process pool, Ray task, or in-process).

A cell folder ``DIR/cells/<cell-id>/`` holds:
  cell.json      the cell's index, axis values and full config (written before running)
  summary.json, calls.csv, programs.csv, timeseries.csv   the run's outputs (from the runner)
  error.txt      the traceback, when the runner raised
  done           written last, atomically (temp file + rename), only after a successful run:
                 {"cell_id": ..., "wall_s": ...} (wall-clock cost of the cell, kept out of results.csv
                 so that file stays byte-identical across runs)

Invariants:
- A folder with ``done`` and ``summary.json`` is finished; nothing reruns it.
- A cell that is not finished is wiped before it runs, so a killed or failed earlier attempt
  never leaves stale outputs mixed with new ones.
- ``run_cell`` never raises: every failure of the runner becomes a ``failed`` outcome.
"""
from __future__ import annotations

import importlib
import json
import shutil
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from program_layer.outputs import write_atomic

DEFAULT_RUNNER = "program_layer.run:run_config"
DONE = "done"
SUMMARY = "summary.json"
ERROR = "error.txt"
CELL_JSON = "cell.json"


@dataclass(frozen=True)
class CellTask:
    """Everything a worker needs; picklable (the runner is a 'module:function' string or a
    module-level function) so it crosses process and Ray boundaries."""

    cell_id: str
    index: int
    values: dict
    config: dict
    cell_dir: str
    base_dir: str | None = None
    runner: Any = DEFAULT_RUNNER
    runner_kwargs: dict = field(default_factory=dict)


@dataclass
class CellOutcome:
    """What happened to one cell. status: 'ok' | 'failed' | 'skipped' (finished earlier)."""

    cell_id: str
    index: int
    status: str
    error: str | None = None
    wall_s: float = 0.0


def is_done(cell_dir: str | Path) -> bool:
    cell_dir = Path(cell_dir)
    return (cell_dir / DONE).is_file() and (cell_dir / SUMMARY).is_file()


def resolve_runner(runner: Any) -> Callable[..., Any]:
    """A callable, or a 'package.module:function' string imported here (in the worker)."""
    if callable(runner):
        return runner
    module, _, name = str(runner).partition(":")
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def run_cell(task: CellTask) -> CellOutcome:
    """Run one cell into its folder; never raises (see module docstring)."""
    cell_dir = Path(task.cell_dir)
    start = time.monotonic()
    try:
        if is_done(cell_dir):
            return CellOutcome(task.cell_id, task.index, "skipped")
        if cell_dir.exists():
            shutil.rmtree(cell_dir)
        cell_dir.mkdir(parents=True)
        cell_json = json.dumps({"cell_id": task.cell_id, "index": task.index, "values": task.values,
                                "config": task.config}, indent=2, sort_keys=True) + "\n"
        write_atomic(cell_dir / CELL_JSON, cell_json)       # so that a failed cell names its config
        runner = resolve_runner(task.runner)
        base_dir = Path(task.base_dir) if task.base_dir else None
        summary = runner(task.config, cell_dir, base_dir=base_dir, **task.runner_kwargs)
        if not (cell_dir / CELL_JSON).is_file():  # run_config replaced the folder with its outputs
            write_atomic(cell_dir / CELL_JSON, cell_json)
        if not (cell_dir / SUMMARY).is_file():  # the contract says the runner writes it; be safe
            write_atomic(cell_dir / SUMMARY, json.dumps(summary, indent=2, sort_keys=True) + "\n")
        wall_s = time.monotonic() - start
        write_atomic(cell_dir / DONE, json.dumps({"cell_id": task.cell_id, "wall_s": round(wall_s, 3)}) + "\n")
        return CellOutcome(task.cell_id, task.index, "ok", wall_s=wall_s)
    except BaseException as exc:  # noqa: BLE001 - a cell's failure must not stop the sweep
        if isinstance(exc, KeyboardInterrupt):
            raise
        text = "".join(traceback.format_exception(exc))
        try:
            cell_dir.mkdir(parents=True, exist_ok=True)
            write_atomic(cell_dir / ERROR, text)
        except OSError:
            pass  # the outcome still carries the message
        message = f"{type(exc).__name__}: {exc}".strip()
        return CellOutcome(task.cell_id, task.index, "failed", error=message,
                           wall_s=time.monotonic() - start)
