"""``agentservesim`` command line.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``main(args) -> int``; this file only wires them. A :class:`SimError` anywhere becomes one
line on stderr and exit status 2 (never a traceback for bad input).
"""
from __future__ import annotations

import argparse
import importlib
import sys

from astrasim.errors import AstraSimError

# name -> (module, help). Modules are imported lazily so `agentservesim run` stays fast.
SUBCOMMANDS = {
    "run": ("program_layer.commands.run_cmd", "simulate one config (no arguments: the shipped example)"),
    "validate": ("program_layer.commands.validate_cmd", "simulate a real vLLM run's workload and report sim vs real"),
    "calibrate": ("program_layer.commands.calibrate_cmd", "fit a deployment's framework overhead to a real vLLM run"),
    "export-chakra": ("program_layer.commands.export_chakra_cmd", "write the first engine steps as Chakra ET graphs"),
    "workload": ("program_layer.workloads.cli", "generate or import workloads"),
    "cells": ("program_layer.commands.cells_cmd", "list the paper's experiment cells shipped under examples/"),
    "sweep": ("program_layer.sweep.cli", "design-space sweep over config axes"),
    "plot": ("program_layer.sweep.plot_cmd", "render a run folder's plots"),
    "search": ("program_layer.search.cli", "LLM-driven policy search with OpenEvolve"),
    "evaluate-policy": ("program_layer.search.evaluate_cmd", "score one policy against its seed on a cell"),
    "replay": ("program_layer.commands.replay_cmd", "drive a real vLLM server with a workload, record it for validate"),
    "profile": ("program_layer.commands.profile_cmd", "make profile bundles (measure, or synthesize from a datasheet)"),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """All subcommands; ``only`` imports just that one's module (the others stay listed; ""
    imports none, None all)."""
    parser = argparse.ArgumentParser(prog="agentservesim", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        p.set_defaults(_module=module)
        if only is not None and name != only:
            continue
        try:
            importlib.import_module(module).add_arguments(p)
        except ModuleNotFoundError as exc:  # a subcommand whose module is not built yet
            if exc.name and exc.name.startswith("program_layer"):
                p.set_defaults(_missing=str(exc))
            else:
                raise
    return parser


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        argv = ["run"]
    # only the chosen subcommand's module is imported; `agentservesim --help` needs none
    parser = build_parser(argv[0] if argv[0] in SUBCOMMANDS else "")
    args = parser.parse_args(argv)
    if getattr(args, "_missing", None):
        print(f"agentservesim {args.command}: not available ({args._missing})", file=sys.stderr)
        return 2
    _signals_become_errors()
    try:
        return int(importlib.import_module(args._module).main(args) or 0)
    except AstraSimError as exc:     # the engine's errors (SimError) and any of astrasim's it did not map
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:     # Ctrl-C or SIGTERM; the note says what became of outputs
        print(f"interrupted: {exc}" if str(exc) else "interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:     # `agentservesim ... | head`: the reader left; stop quietly
        _silence_stdout()
        return 0


def entry() -> int:
    """The ``agentservesim`` console script (and ``python -m program_layer.cli``): :func:`main`,
    then its objects are frozen out of the garbage collector's reach before the interpreter
    exits. Otherwise exit spends a tenth of a short run's CPU collecting and freeing the
    simulation's objects one by one, memory the operating system takes back at once anyway;
    exit handlers and file flushes still run. Only for a process that is about to end: a
    caller embedding the CLI calls :func:`main`, whose objects stay collectable."""
    import gc
    status = main()
    gc.freeze()
    return status


def _signals_become_errors() -> None:
    """SIGTERM unwinds like Ctrl-C (so staged outputs are cleaned up, not left half-written);
    SIGXFSZ is ignored so that exceeding RLIMIT_FSIZE is an OSError a writer reports (one line,
    previous outputs kept) instead of killing the process mid-file."""
    import signal
    try:
        signal.signal(signal.SIGTERM, _terminated)
        if hasattr(signal, "SIGXFSZ"):
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    except ValueError:                   # not the main thread (an embedding caller): leave them
        pass


def _terminated(signum, frame):
    raise KeyboardInterrupt("terminated")


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot raise again."""
    import os
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(entry())
