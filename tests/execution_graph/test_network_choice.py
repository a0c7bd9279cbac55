"""Choosing the network backend in a run config (``network: {backend, topology, gpus}``)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from astrasim import CongestionAwareNetwork, GraphNetwork, SystemSimulator
from astrasim.config import parse_network, parse_system
from astrasim.network import bandwidth_bytes_per_ns
from astrasim.network.generators import pcie_tree
from llmservingsim.errors import ConfigError
from llmservingsim.execution_graph import GraphCommModel, network_config
from llmservingsim.hardware import load_device
from llmservingsim.model_config import load_model
from llmservingsim.network_choice import network_choice
from llmservingsim.perf_model import batch_shape

MODEL = load_model("meta-llama/Llama-3.1-8B")
DEV = load_device("RTXPRO6000")
PCIE = {"generator": "pcie_tree", "gpus": 8, "switches": 2, "bandwidth": 33.903, "uplink_bandwidth": 33.903}


def comm(spec, tp=2, pp=1):
    return GraphCommModel(MODEL, DEV, tp, pp, choice=network_choice(spec, base=None, ranks=tp * pp))


def test_pcie_tree_tp2_under_one_switch_vs_across_the_root():
    """TP2 all-reduce of m = T*hidden*2 bytes: a ring of 2 sends 2 messages of m/2; under one
    switch each crosses 2 links, across the root 4 (store-and-forward, latency 0), so each
    of the 2 * 32 all-reduces of a step costs 2 * 2 * floor(m/2 / B) more (E = 0: a 2-GPU group
    is the whole network here)."""
    shape = batch_shape([(1000, 1000)], [])
    same = comm({"backend": "graph", "topology": PCIE, "gpus": [0, 1]}).exposed_comm_ns(shape)
    across = comm({"backend": "graph", "topology": PCIE, "gpus": [3, 4]}).exposed_comm_ns(shape)
    m = 1000 * MODEL.hidden_size * MODEL.dtype_bytes
    one = int(m / 2 / bandwidth_bytes_per_ns(33.903))
    assert across - same == 2 * MODEL.num_layers * 2 * 2 * one
    assert same == 2 * MODEL.num_layers * (2 * 2 * one + 3 * int(m / 2 / (DEV.system_config()["local-mem-bw"] * 1e9) * 1e9))


def test_graph_tp2_pp2_times_each_stage_on_its_own_gpus():
    """Stage 0 on GPUs 2, 3 (one switch), stage 1 on 4, 5 (the other): the stage-to-stage send
    crosses the root complex; the memo adds each stage's own collectives."""
    c = comm({"backend": "graph", "topology": PCIE, "gpus": [2, 3, 4, 5]}, tp=2, pp=2)
    shape = batch_shape([(512, 512)], [])
    net = GraphNetwork(pcie_tree(gpus=8, switches=2, bandwidth=33.903, uplink_bandwidth=33.903), npus=[2, 3, 4, 5])
    sim = SystemSimulator(net, parse_system(DEV.system_config()), comm_groups={"1": [0, 1], "2": [2, 3]})
    m = 512 * MODEL.hidden_size * MODEL.dtype_bytes
    per_stage = -(-MODEL.num_layers // 2)
    want = sum(2 * per_stage * sim.collective_time_ns("all_reduce", m, g) for g in ([0, 1], [2, 3]))
    assert c.exposed_comm_ns(shape) == want + net.send_ns(0, 2, m)
    assert net.hops(1, 2) == 4


def test_congestion_aware_backend_times_the_device_network_link_by_link():
    c = comm({"backend": "congestion-aware"})
    shape = batch_shape([(700, 700)], [])
    cfg = network_config(DEV, 2, 1, None, DEV.collective_latency_ns)
    sim = SystemSimulator(CongestionAwareNetwork(parse_network(cfg)), parse_system(DEV.system_config()),
                          comm_groups={"1": [0, 1]})
    m = 700 * MODEL.hidden_size * MODEL.dtype_bytes
    assert c.exposed_comm_ns(shape) == 2 * MODEL.num_layers * sim.collective_time_ns("all_reduce", m, [0, 1])
    assert comm({"backend": "analytical"}).exposed_comm_ns(shape) == comm(None).exposed_comm_ns(shape)


@pytest.mark.parametrize("spec,key,message", [
    ({"backend": "ns3"}, "network.backend", "must be one of analytical, congestion-aware, graph, astra-sim; got 'ns3'"),
    ({"backend": "graph"}, "network.topology", "the graph backend needs a topology"),
    ({"backend": "analytical", "gpus": [0, 1]}, "network.gpus", "only the graph backend takes a gpus"),
    ({"backend": "graph", "topology": {"generator": "hypercube"}}, "network.topology.generator",
     "unknown generator 'hypercube'"),
    ({"backend": "graph", "topology": dict(PCIE, switches="two")}, "network.topology.switches",
     "must be an integer >= 1, got 'two'"),
    ({"backend": "graph", "topology": PCIE, "gpus": [0, 9]}, "network.gpus",
     "must list tp x pp = 2 distinct GPUs of the topology (0..7), got [0, 9]"),
    ({"backend": "graph", "topology": PCIE, "speed": 1}, "network.speed", "unknown key"),
])
def test_bad_network_choice_names_the_key(spec, key, message):
    with pytest.raises(ConfigError) as e:
        network_choice(spec, base=None, ranks=2, source="c.yaml")
    assert e.value.key == key and e.value.file == "c.yaml" and e.value.message.startswith(message)


def test_cli_bad_topology_file_is_one_line_exit_2(tmp_path):
    topo = tmp_path / "topo.json"
    topo.write_text(json.dumps({"nodes": [{"id": 0, "kind": "gpu"}, {"id": 1, "kind": "gpu"}],
                                "edges": [{"source": 0, "target": 1, "bandwidth": "fast", "latency": 0}]}))
    wl = tmp_path / "w.jsonl"
    wl.write_text(json.dumps({"input_toks": 100, "output_toks": 2, "arrival_time_ns": 0}) + "\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"model: meta-llama/Llama-3.1-8B\nhardware: RTXPRO6000\nparallelism: {{tp: 2}}\n"
                   f"workload: {{path: {wl}}}\nnetwork: {{backend: graph, topology: topo.json}}\n")
    res = subprocess.run([sys.executable, "-m", "program_layer.cli", "run", str(cfg), "--out", str(tmp_path / "o")],
                         capture_output=True, text=True)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [f"error: {topo}, key 'edges[0].bandwidth': must be a number, got 'fast'"]
