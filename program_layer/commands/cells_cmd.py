"""``agentservesim cells``: list the paper's experiment cells shipped under examples/."""
from __future__ import annotations

from llmservingsim.paths import examples_dir


def add_arguments(p) -> None:
    p.add_argument("--paths", action="store_true", help="print paths only")


def main(args) -> int:
    ex = examples_dir()
    groups = [("validation cells (paper §5.1, Appendix B)", sorted((ex / "cells").glob("*.yaml"))),
              ("Table 1 policy grid (paper §5.2; a sweep spec)", sorted((ex / "sweeps").glob("table1*.yaml"))),
              ("policy-search cells (paper §5.3)", sorted((ex / "search").glob("*cell*.yaml")))]
    for title, paths in groups:
        if not args.paths:
            print(f"{title}:")
        for p in paths:
            print(p if args.paths else f"  {p.relative_to(ex.parent)}")
    return 0
