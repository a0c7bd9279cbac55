"""``agentservesim profile``: profile-bundle tools, one sub-action per module.

    agentservesim profile synthesize --hardware H100 --model meta-llama/Llama-3.1-8B --tp 1 --out DIR

Each sub-action lives in its own module exposing ``add_arguments(parser)`` and
``main(args) -> int`` (like the top-level subcommands, program_layer/cli.py); this file only
wires them, so another action (e.g. ``measure``) is one more entry in ``ACTIONS``. An
action module imports only argparse at module level (its heavy imports go inside ``main``),
so ``--help`` stays lean (tests/cli/test_lean_startup.py).
"""
from __future__ import annotations

import argparse
import importlib
import sys

# action -> (module, help)
ACTIONS = {
    "synthesize": ("program_layer.commands.profile_synthesize_cmd",
                   "write a bundle synthesized from a device's datasheet numbers"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="profile_action", metavar="ACTION")
    for name, (module, help_text) in ACTIONS.items():
        p = sub.add_parser(name, help=help_text)
        p.set_defaults(_profile_module=module)
        importlib.import_module(module).add_arguments(p)


def main(args: argparse.Namespace) -> int:
    module = getattr(args, "_profile_module", None)
    if module is None:
        print("agentservesim profile: choose an action: " + ", ".join(ACTIONS), file=sys.stderr)
        return 2
    return int(importlib.import_module(module).main(args) or 0)
