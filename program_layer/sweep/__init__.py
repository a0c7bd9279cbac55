"""Design-space exploration: ``agentservesim sweep`` over config axes (policies x rates x
hardware ...), on a local process pool or a Ray cluster, with results.csv, a Table-1-style
table.md and plots; plus ``agentservesim plot`` for one run and a tiny progress bar.

Public API (import from the submodules; this package imports nothing heavy):
  spec.load_spec(path) -> SweepSpec            grid.expand / grid.cell_id / grid.set_path
  sweep.run_sweep(spec, out_dir, *, executor=None, runner=..., runner_kwargs=None,
                  quiet=True, plots=True, on_cell=None) -> SweepReport
  sweep.render_outputs(out_dir, *, plots=True) -> list[Path]
  executors.make_executor(kind, *, workers=None, ray_address=None) -> Executor
  run_plots.render_run_plots(run_dir, out_dir=None) -> list[Path]
  progress.progress(iterable_or_total, desc="", quiet=False, **kw) -> Progress
"""
