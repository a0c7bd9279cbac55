"""Replays results recorded from the real ASTRA-Sim binary (astra-sim/tools/record_upstream.py):
1-D/2-D/3-D networks, ring/direct/halvingDoubling/one*/windowed direct, localBWAware, active
chunks, communicator groups, random DAGs with CPU ops and skewed collective starts, send/recv
roofline compute, remote memory; plus cases from the congestion-aware binary, among them 240
random ones (``upstream_aware_random.json``: 1..4 active chunks sharing links, the four
collectives, ring / direct / windowed direct / halvingDoubling, Ring / Switch /
FullyConnected, communicator groups); plus the upstream binary's runs of steps that
``agentservesim export-chakra`` wrote for lockstep data / expert-parallel MoE servers
(``upstream_exports_dpep.json``: MoE dispatch all-gathers and combine reduce-scatters on the
DP groups, TP all-reduces, dummy ranks). Every per-rank line must be identical."""
from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path

import pytest

from astrasim import Attr, Node, NodeType, SystemSimulator
from astrasim.chakra.et_io import decode_et
from astrasim.config import parse_comm_groups, parse_network, parse_remote_memory, parse_system
from astrasim.network import AnalyticalNetwork, CongestionAwareNetwork

GOLDEN = Path(__file__).parent / "golden"
CASES = [c for name in ("upstream_cases.json", "upstream_aware_random.json", "upstream_exports_dpep.json")
         for c in json.loads((GOLDEN / name).read_text())["cases"]]


def nodes_of(rank: list[dict]) -> list[Node]:
    out = []
    for d in rank:
        out.append(Node(id=d["id"], type=NodeType[d["type"]], duration_micros=d["duration_micros"],
                        data_deps=list(d["data_deps"]), ctrl_deps=list(d["ctrl_deps"]),
                        attrs={k: Attr(kind, v) for k, (kind, v) in d["attrs"].items()}))
    return out


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_matches_upstream_binary(case):
    backend = CongestionAwareNetwork if case["backend"] == "congestion_aware" else AnalyticalNetwork
    net = backend(parse_network(case["network"]))
    groups = parse_comm_groups(case["groups"], "groups", net.npus_count) if case["groups"] else None
    sim = SystemSimulator(net, parse_system(case["system"]), groups, parse_remote_memory(case["memory"]))
    wl = case["workload"]
    if "et_gzip_base64" in wl:      # an export: its distinct .et files, and which one each rank ran
        graphs = [decode_et(gzip.decompress(base64.b64decode(g)))[1] for g in wl["et_gzip_base64"]]
        per_rank = [graphs[g] for g in wl["rank_graph"]]
    else:
        ranks = wl["per_rank"] if "per_rank" in wl else [wl["every_rank"]] * wl["ranks"]
        per_rank = [nodes_of(r) for r in ranks]
    res = sim.run(per_rank)
    lines = [f"sys[{i}] finished, {f} cycles, exposed communication {e} cycles."
             for i, (f, e) in enumerate(zip(res.finish_ns, res.exposed_comm_ns))]
    assert lines == case["upstream"]
