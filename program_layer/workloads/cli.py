"""``agentservesim workload``: generate, import, or summarize workload JSONL files.

    agentservesim workload generate --generator swebench --programs 50 --rate-jps 0.02 \\
        --seed 0 --out swebench.jsonl [--param calls_median=40 ...]
    agentservesim workload import --format tracelab|mooncake|azure TRACE --out FILE.jsonl \\
        [--limit N] [--time-scale X]
    agentservesim workload stats FILE.jsonl

``generate`` and ``import`` print the written file's statistics as one JSON line; ``stats``
prints them as indented JSON. Heavy imports (numpy) happen inside :func:`main`.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ._fields import MAX_IDLE_S


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``generate`` / ``import`` / ``stats`` sub-actions to the ``workload`` parser."""
    sub = parser.add_subparsers(dest="workload_action", metavar="ACTION")
    gen = sub.add_parser("generate", help="write a seeded synthetic agent workload")
    gen.add_argument("--generator", required=True, help="swebench | bfcl")
    gen.add_argument("--programs", type=int, required=True, help="number of programs")
    gen.add_argument("--rate-jps", type=float, required=True,
                     help="Poisson program arrival rate, jobs per second")
    gen.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    gen.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                     help="override a generator parameter (repeatable)")
    gen.add_argument("--out", required=True, help="output JSONL path")
    imp = sub.add_parser("import", help="convert a public trace to workload JSONL")
    imp.add_argument("--format", required=True, dest="trace_format",
                     help="tracelab | mooncake | azure")
    imp.add_argument("path", help="trace file")
    imp.add_argument("--out", required=True, help="output JSONL path")
    imp.add_argument("--limit", type=int, default=None,
                     help="keep the first N requests (file order) or programs (by arrival)")
    imp.add_argument("--max-idle-s", type=float, default=MAX_IDLE_S, metavar="S",
                     help=f"shorten idle stretches (no session active) longer than S seconds to S (default {MAX_IDLE_S:g})")
    imp.add_argument("--keep-idle-gaps", action="store_true", help="keep idle stretches as recorded")
    imp.add_argument("--time-scale", type=float, default=1.0,
                     help="multiply arrival times (0.5 = twice the rate); default 1")
    st = sub.add_parser("stats", help="print a workload file's statistics")
    st.add_argument("path", help="workload JSONL")


def main(args: argparse.Namespace) -> int:
    """Run the chosen sub-action; bad input raises SimError (the CLI prints it, exit 2)."""
    import json

    from llmservingsim.errors import ConfigError

    from .io import read_jsonl, workload_stats, write_jsonl

    action = getattr(args, "workload_action", None)
    if action == "generate":
        from .generators import generate_programs
        records = generate_programs(args.generator, programs=args.programs,
                                    rate_jps=args.rate_jps, seed=args.seed,
                                    **_parse_params(args.param))
    elif action == "import":
        from ._fields import check_max_idle_s
        from .importers import compress_idle, import_trace
        max_idle_s = None if args.keep_idle_gaps else check_max_idle_s(args.max_idle_s)
        records = import_trace(args.trace_format, args.path, limit=args.limit, time_scale=args.time_scale,
                               max_idle_s=None)
        if max_idle_s is not None and (c := compress_idle(records, round(max_idle_s * 1e9))).gaps:
            print(f"note: shortened {c.gaps} idle stretch(es) with no session active (longest "
                  f"{c.longest_ns / 1e9:,.0f} s, {c.removed_ns / 1e9:,.0f} s removed in all) to "
                  f"{args.max_idle_s:g} s each; --keep-idle-gaps keeps them", file=sys.stderr)
    elif action == "stats":
        print(json.dumps(workload_stats(read_jsonl(args.path)), indent=2))
        return 0
    else:
        raise ConfigError("choose an action: generate, import or stats", key="workload")
    if Path(args.out).is_dir():
        raise ConfigError(f"{args.out} is a folder; give a .jsonl file path", key="--out")
    n = write_jsonl(args.out, records)
    stats = workload_stats(records)
    print(json.dumps({"written": args.out, "records": n, **stats}))
    span = stats.get("arrival_span_s") or 0
    if action == "import" and span > 86400:
        print(f"note: the arrivals span {span / 86400:.1f} days (a simulation that long writes a row per "
              f"second); --time-scale compresses arrival times, e.g. --time-scale {3600 / span:.2g} "
              f"for an hour", file=sys.stderr)
    return 0


def _parse_params(items: list[str]) -> dict[str, int | float]:
    """``["a=1", "b=0.5"]`` -> ``{"a": 1, "b": 0.5}``; ConfigError naming the key otherwise."""
    from llmservingsim.errors import ConfigError

    params: dict[str, int | float] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ConfigError(f"expected NAME=VALUE, got {item!r}", key="workload.param")
        try:
            params[name] = int(text)
        except ValueError:
            try:
                params[name] = float(text)
            except ValueError:
                raise ConfigError(f"not a number: {text!r}", key=f"workload.{name}") from None
    return params
