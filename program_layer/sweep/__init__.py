"""Design-space exploration: ``agentservesim sweep`` over config axes (policies x rates x
hardware ...), on a local process pool or a Ray cluster, with results.csv, a Table-1-style
table.md and plots; plus ``agentservesim plot`` for one run and a tiny progress bar.

Public API (import from the submodules; this package imports nothing heavy):
  spec.load_spec(path) -> SweepSpec                 SweepSpec.cells() -> list[Cell]
  grid.expand(base, axes) / grid.cell_id(config) / grid.set_path(config, "a.b", value)
  sweep.run_sweep(spec, out_dir, *, executor=None, runner="program_layer.run:run_config",
                  runner_kwargs=None, quiet=True, plots=True, on_cell=None) -> SweepReport
  sweep.render_outputs(out_dir, *, plots=True) -> list[Path]     (results.csv, table.md, plots)
  executors.make_executor("local" | "ray" | "serial", *, workers=None, ray_address=None) -> Executor
  run_plots.render_run_plots(run_dir, out_dir=None) -> list[Path]
  progress.progress(iterable_or_total, desc="", quiet=False, **kw) -> Progress
"""
