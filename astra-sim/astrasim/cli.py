"""Command line compatible with ASTRA-Sim's analytical binaries.

    python -m astrasim --workload-configuration=PREFIX --system-configuration=sys.json \
        --network-configuration=net.yml --remote-memory-configuration=mem.json \
        [--comm-group-configuration=groups.json] [--logging-folder=DIR]

Prints, per rank, ``sys[i] finished, X cycles, exposed communication Y cycles.`` (1 cycle =
1 ns). With ``--logging-folder`` the same lines are also written to ``DIR/log.log``.
A user error prints one line ``error: <file>, key '<key>': <message>`` and exits with status 2.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from .errors import AstraSimError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m astrasim", description=__doc__.split("\n\n")[0])
    p.add_argument("--workload-configuration", required=True, help="ET prefix: PREFIX.<rank>.et")
    p.add_argument("--system-configuration", required=True, help="system JSON")
    p.add_argument("--network-configuration", required=True, help="network YAML")
    p.add_argument("--remote-memory-configuration", required=True, help="remote-memory JSON")
    p.add_argument("--comm-group-configuration", default=None, help="comm-group JSON (optional)")
    p.add_argument("--logging-folder", default=None, help="folder for log.log (optional)")
    p.add_argument("--network-backend", default="analytical", choices=("analytical", "congestion_aware", "graph"),
                   help="astrasim extension: congestion-unaware (default), congestion-aware (1-D), or graph "
                        "(--network-configuration is then node-link JSON or a generator spec YAML)")
    # accepted for compatibility with upstream command lines; no effect here
    for flag in ("--logging-configuration", "--num-queues-per-dim", "--comm-scale",
                 "--injection-scale", "--rendezvous-protocol"):
        p.add_argument(flag, default=None, help=argparse.SUPPRESS)
    return p


def run_cli(argv: Optional[Sequence[str]] = None) -> list[str]:
    """Run a simulation from command-line arguments; returns the report lines."""
    from . import SystemSimulator, load_comm_groups, load_network, load_remote_memory, load_system, read_workload

    a = _parser().parse_args(argv)
    network = load_network(a.network_configuration, a.network_backend)
    system = load_system(a.system_configuration)
    memory = load_remote_memory(a.remote_memory_configuration)
    groups = {}
    if a.comm_group_configuration and "empty" not in os.path.basename(a.comm_group_configuration):
        groups = load_comm_groups(a.comm_group_configuration, network.npus_count)
    # byte-identical rank files (tensor parallelism) are decoded and simulated once
    workload = read_workload(a.workload_configuration, network.npus_count, share_identical=True)
    result = SystemSimulator(network, system, groups, memory).run(workload)
    lines = [f"sys[{i}] finished, {f} cycles, exposed communication {e} cycles."
             for i, (f, e) in enumerate(zip(result.finish_ns, result.exposed_comm_ns))]
    if a.logging_folder:
        os.makedirs(a.logging_folder, exist_ok=True)
        with open(os.path.join(a.logging_folder, "log.log"), "w") as fh:
            fh.write("\n".join(lines) + "\n")
    return lines


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        lines = run_cli(argv)
    except AstraSimError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
