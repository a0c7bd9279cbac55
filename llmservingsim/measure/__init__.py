"""Measuring a profile bundle on the local device with PyTorch alone (``agentservesim profile
measure``; docs/profiler.md). ``grids`` says which sizes are measured, ``timing`` how one op is
timed, ``ops`` what each op runs, ``bundle`` writes the tables. Only ``grids`` is importable
without torch; the others import it at module level."""
