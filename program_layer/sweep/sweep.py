"""Running a sweep: expand the grid, run the unfinished cells, write results, table and plots.

Output folder layout (DIR):
  sweep.json            the grid (see results.write_manifest)
  cells/<cell-id>/      one run folder per cell (see cell_run)
  results.csv           one row per cell, grid order (rewritten after every finished cell)
  table.md              change in mean JCT vs the baseline (see table)
  plots/*.png           see sweep_plots

Invariants:
- A cell finished by an earlier invocation (``done`` marker) is never run again; cells that
  failed or never finished are run again. Re-running after an interruption therefore only
  computes what is missing.
- One failing cell never stops the others; it is recorded (error.txt, status ``failed``).
- results.csv, table.md and the plots are derived from the files in DIR only, so
  ``render_outputs(DIR)`` rebuilds them at any time.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from llmservingsim.errors import ConfigError
from program_layer.sweep.cell_run import (DEFAULT_RUNNER, ERROR, CellOutcome, CellTask, is_done, run_cell,
                                          write_atomic)
from program_layer.sweep.executors import Executor, ExecutorFailure, make_executor
from program_layer.sweep.grid import Cell
from program_layer.sweep.progress import progress
from program_layer.sweep.results import (cell_dir, collect_results, read_manifest, write_manifest,
                                         write_results_csv)
from program_layer.sweep.spec import SweepSpec

TABLE_MD = "table.md"


@dataclass
class SweepReport:
    """What one invocation did. ``ran`` / ``skipped`` / ``failed`` hold cell ids in grid order."""

    out_dir: Path
    cells: list[Cell]
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    results: list[dict] = field(default_factory=list)
    outputs: list[Path] = field(default_factory=list)
    cell_wall_s: float = 0.0  # wall-clock seconds the cells run by this invocation took, summed

    @property
    def ok(self) -> bool:
        return not self.failed


def run_sweep(spec: SweepSpec, out_dir: str | Path, *, executor: Executor | None = None,
              runner: Any = DEFAULT_RUNNER, runner_kwargs: dict | None = None, quiet: bool = True,
              plots: bool = True, on_cell: Callable[[Cell, CellOutcome], None] | None = None) -> SweepReport:
    """Run every unfinished cell of ``spec`` into ``out_dir`` and write the outputs.

    ``runner`` is ``run_config`` by default (a 'module:function' string or a module-level
    function with run_config's signature). ``executor`` defaults to a local process pool
    and is closed here only if created here. ``on_cell`` is called in the driver after each
    cell finishes (ok or failed).
    """
    out_dir = Path(out_dir)
    cells = spec.cells()
    _check_unique(cells, spec.source)
    if runner == DEFAULT_RUNNER:
        validate_cells(spec, cells)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_manifest(out_dir, name=spec.name, source=spec.source, axes=spec.axes, baseline=spec.baseline,
                   table_rows=spec.table_rows, table_cols=spec.table_cols, kv_cells=spec.kv_cells, cells=cells)
    report = SweepReport(out_dir=out_dir, cells=cells)
    todo = []
    for cell in cells:
        if is_done(cell_dir(out_dir, cell.cell_id)):
            report.skipped.append(cell.cell_id)
        else:
            todo.append(cell)
    tasks = [CellTask(cell_id=c.cell_id, index=c.index, values=dict(c.values), config=dict(c.config),
                      cell_dir=str(cell_dir(out_dir, c.cell_id)), base_dir=str(spec.base_dir),
                      runner=runner, runner_kwargs=dict(runner_kwargs or {"quiet": True})) for c in todo]
    owned = executor is None
    executor = executor or make_executor("local")
    bar = progress(len(cells), f"sweep {spec.name}", quiet=quiet)
    bar.update(len(report.skipped), note=f"{len(report.skipped)} done earlier" if report.skipped else None)
    try:
        for position, outcome in executor.run(run_cell, tasks):
            cell = todo[position]
            outcome = _settle(cell, outcome, out_dir)
            if outcome.status == "skipped":  # finished by someone else since we looked
                report.skipped.append(cell.cell_id)
            else:
                report.ran.append(cell.cell_id)
            if outcome.status == "failed":
                report.failed[cell.cell_id] = outcome.error or "failed"
            report.cell_wall_s += outcome.wall_s
            bar.update(note=f"{len(report.failed)} failed" if report.failed else "")
            write_results_csv(out_dir, spec.axis_keys, collect_results(cells, out_dir))
            if on_cell:
                on_cell(cell, outcome)
    finally:
        bar.close()
        if owned:
            executor.close()
        report.results = collect_results(cells, out_dir)
        write_results_csv(out_dir, spec.axis_keys, report.results)
    order = {c.cell_id: c.index for c in cells}
    report.ran.sort(key=order.__getitem__)
    report.skipped.sort(key=order.__getitem__)
    report.outputs = render_outputs(out_dir, plots=plots)
    return report


def _settle(cell: Cell, outcome: Any, out_dir: Path) -> CellOutcome:
    """Turn executor failures and invisible outputs into recorded failures."""
    folder = cell_dir(out_dir, cell.cell_id)
    if isinstance(outcome, ExecutorFailure):
        outcome = CellOutcome(cell.cell_id, cell.index, "failed", error=outcome.message)
    elif outcome.status == "ok" and not is_done(folder):
        outcome = CellOutcome(cell.cell_id, cell.index, "failed", error=(
            "the cell finished but its outputs are not visible here; with Ray, --out must be "
            "on a filesystem shared by every node"))
    if outcome.status == "failed" and not (folder / ERROR).is_file():
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / ERROR, outcome.error + "\n")
    return outcome


def validate_cells(spec: SweepSpec, cells: Sequence[Cell]) -> None:
    """Check every cell's config with the simulator's own validator before running anything,
    so a mistyped key or value stops the sweep at once, named by spec file and key.
    (Errors found only while simulating, e.g. an unknown policy name, fail just that cell.)"""
    try:
        from program_layer.config import validate_config
    except ImportError:
        return
    for cell in cells:
        try:
            validate_config(dict(cell.config))
        except ConfigError as exc:
            key = exc.key or ""
            axis = next((k for k in cell.values if key == k or key.startswith(k + ".")), None)
            where = f"axes.{axis}" if axis else (f"base.{key}" if key else "base")
            raise ConfigError(f"cell {cell.label()}: {exc.message}", file=spec.source, key=where) from None


def _check_unique(cells: Sequence[Cell], source: str) -> None:
    seen: dict[str, Cell] = {}
    for cell in cells:
        if cell.cell_id in seen:
            raise ConfigError(f"cells {seen[cell.cell_id].label()} and {cell.label()} have the same "
                              "config (an axis has no effect)", file=source, key="axes")
        seen[cell.cell_id] = cell


def render_outputs(out_dir: str | Path, *, plots: bool = True) -> list[Path]:
    """(Re)write results.csv, table.md and the sweep plots from the files in ``out_dir``."""
    from program_layer.sweep.table import render_table

    out_dir = Path(out_dir)
    manifest = read_manifest(out_dir)
    axes, cells = manifest["axes"], manifest["cells"]
    results = collect_results(cells, out_dir)
    outputs = [write_results_csv(out_dir, [a.key for a in axes], results)]
    table = render_table(axes, results, baseline=manifest["baseline"], rows=manifest["table"]["rows"],
                         cols=manifest["table"]["cols"], name=manifest["name"])
    write_atomic(out_dir / TABLE_MD, table)
    outputs.append(out_dir / TABLE_MD)
    if plots:
        from program_layer.sweep.sweep_plots import render_sweep_plots

        outputs += render_sweep_plots(out_dir, axes, cells, results, kv_cells=manifest["plots"]["kv_cells"],
                                      name=manifest["name"])
    return outputs
