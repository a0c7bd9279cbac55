"""``agentservesim profile``: make profile bundles (docs/profile-bundles.md): ``measure`` on a
GPU, or ``synthesize`` from a device's datasheet numbers (docs/datasheet-synthesis.md).

Each action lives in its own module with ``add_arguments(parser)`` and ``main(args)``; this
group only lists them (``ACTIONS``) and dispatches. The action modules import nothing heavy at
import time, so ``agentservesim profile --help`` stays lean.
"""
from __future__ import annotations

import argparse
import importlib

from llmservingsim.errors import ConfigError

# action -> (module, help)
ACTIONS = {
    "measure": ("program_layer.commands.profile_measure", "measure a bundle on this machine's GPU or CPU with PyTorch"),
    "synthesize": ("program_layer.commands.profile_synthesize_cmd",
                   "write a bundle synthesized from a device's datasheet numbers (docs/datasheet-synthesis.md)"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="profile_action", metavar="ACTION")
    for name, (module, help_text) in ACTIONS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_profile_module=module)
        importlib.import_module(module).add_arguments(p)


def main(args: argparse.Namespace) -> int:
    module = getattr(args, "_profile_module", None)
    if module is None:
        raise ConfigError(f"choose an action: {', '.join(ACTIONS)}", key="profile")
    return importlib.import_module(module).main(args)
