"""``agentservesim evaluate-policy``: score one policy against a seed on a cell, as the search does.

    agentservesim evaluate-policy examples/policies/x.py:Class --cell examples/search/target_cell.yaml

Prints ONE JSON object: combined_score, status ("ok" | "error" | "timeout"), mean_jct_s,
seed_mean_jct_s, p99_jct_s, throughput (output tokens/s), wall_s, isolation (how the policy's
own process was confined: "namespaces", or "fallback" with a warning on stderr where the
platform has none; docs/security.md), and error when it failed.
The axis follows from the class's base; the default seed is Listing 1's TTL (built-in ``ttl``,
tau = 2 s) for retention, ``plas`` for scheduling and ``round-robin`` for routing.
Exit status 0 whenever a JSON object was printed (a failed candidate is a result, not an error).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from llmservingsim.errors import ConfigError
from program_layer.search import axes, sandbox
from program_layer.search.evaluator import EvalSettings, evaluate_policy

_DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "agentservesim", "seed-jct")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("policy", help="FILE.py:Class (or FILE.py with one policy class, or a built-in NAME)")
    parser.add_argument("--cell", required=True, help="cell config YAML")
    parser.add_argument("--seed-policy", default=None,
                        help="NAME or FILE.py:Class to compare against (default by axis: ttl, plas, round-robin)")
    parser.add_argument("--second-cell", default=None, help="also score here; score = mean of the two ratios")
    parser.add_argument("--axis", choices=axes.AXES, default=None,
                        help="policy axis (default: from the class's base)")
    parser.add_argument("--timeout", type=float, default=sandbox.DEFAULT_TIMEOUT_S,
                        help=f"wall-time limit per simulator run in seconds (default {sandbox.DEFAULT_TIMEOUT_S:g})")
    sandbox.add_confinement_arguments(parser)
    parser.add_argument("--cache-dir", default=_DEFAULT_CACHE,
                        help="where the seed's JCT is cached (keyed by cell, seed source and "
                             "simulator source); '' disables caching")
    parser.add_argument("--runner", default=None, help=argparse.SUPPRESS)   # tests: fake simulator


def detect_axis(spec: axes.PolicySpec, policy_text: str, cell: str, runner, memory_mb,
                isolation: str = "auto") -> str:
    """The axis from the source's base class; if the AST cannot tell (e.g. a subclass of a
    user class), the class is loaded in a confined candidate process whose runner simulates
    nothing."""
    axis = axes.axis_of_spec(spec)
    if axis:
        return axis
    probe = sandbox.run_policy(policy_text, cell, axis=None, timeout_s=60, memory_mb=memory_mb,
                               runner="program_layer.search.evaluate_cmd:_probe_runner",
                               isolation=isolation)
    if probe.axis:
        return probe.axis
    raise ConfigError(f"cannot tell the axis of {policy_text} ({probe.error}); pass --axis")


def _probe_runner(config, out_dir, **_):
    """A runner that simulates nothing: the worker has already discovered the class."""
    return {"jct_s": {"mean": 1.0}}


def main(args: argparse.Namespace) -> int:
    cell = Path(args.cell)
    if not cell.is_file():
        raise ConfigError(f"--cell: file not found: {args.cell}")
    spec = axes.parse_policy_spec(args.policy)
    policy = spec.config_value() if (spec.class_name or not spec.path) else str(spec.path)
    axis = args.axis or detect_axis(spec, policy, str(cell.resolve()), args.runner, args.memory_mb,
                                    args.isolation)
    seed_text = args.seed_policy or axes.DEFAULT_SEEDS[axis]
    seed = axes.parse_policy_spec(seed_text)
    seed_value = seed.config_value() if (seed.class_name or not seed.path) else str(seed.path)
    second = str(Path(args.second_cell).resolve()) if args.second_cell else None
    with tempfile.TemporaryDirectory(prefix="agentservesim-eval-") as work:
        settings = EvalSettings(cell=str(cell.resolve()), axis=axis, seed_policy=seed_value,
                                second_cell=second, timeout_s=args.timeout, memory_mb=args.memory_mb,
                                cache_dir=args.cache_dir or None, work_dir=work, runner=args.runner,
                                decision_timeout_s=args.decision_timeout, isolation=args.isolation)
        result = evaluate_policy(policy, settings)
    result.pop("traceback", None)
    json.dump(result, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0 if result.get("status") == "ok" else 1     # the JSON says why
