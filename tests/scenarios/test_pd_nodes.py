"""Prefill/decode disaggregation between nodes: the KV transfer crosses the two-level
network's inter-node dimension (llmservingsim/kv_transfer.py; docs/serving-architectures.md)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmservingsim.errors import ConfigError
from llmservingsim.inter_node import InterNode
from llmservingsim.kv_transfer import slower_inter_node
from llmservingsim.perf_model import BatchShape
from program_layer.instances import placement_of
from program_layer.run import build_simulation

# hardware/B200.yaml and hardware/RTXPRO6000.yaml inter_node: Switch (2 hops), nic_gbps 400,
# latency_ns 1000. As an ASTRA-Sim bandwidth: round(400 / 8 / (2^30 / 1e9), 3) = 46.566 "GB/s",
# which ASTRA-Sim reads as 46.566 x 2^30 / 1e9 = 49.999862 B/ns.
HOPS, HOP_NS = 2, 1000.0
NIC_B_PER_NS = 46.566 * (1 << 30) / 1e9
# Llama-3.1-8B: K and V x 32 layers x 8 KV heads x head 128 x bf16, divided by TP over the KV heads
KV_BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2


def _workload(path: Path) -> str:
    # one 4000-token call: ceil(4000 / 16) = 250 blocks for the decode instance to pull
    subs = [{"input_toks": 4000, "output_toks": 20, "tool_duration_ns": 1_000_000_000, "tool_name": "t"}]
    path.write_text(json.dumps({"session_id": "p0", "arrival_time_ns": 0, "sub_requests": subs}) + "\n")
    return str(path)


def _message_ns(num_bytes: int) -> int:
    # ASTRA-Sim analytical message on the inter-node dimension: floor(hops x latency + bytes / bandwidth)
    return int(HOPS * HOP_NS + num_bytes / NIC_B_PER_NS)


def _run(tmp_path, tp: int, decode: dict) -> object:
    cfg = {"model": "meta-llama/Llama-3.1-8B", "hardware": "B200", "parallelism": {"tp": tp},
           "instances": [{"role": "prefill"}, {"role": "decode", **decode}],
           "workload": {"path": _workload(tmp_path / "w.jsonl")}}
    sim = build_simulation(cfg)
    sim.run()
    return sim


def _ttft_parts(sim, transfer: int) -> None:
    # TTFT = the prefill leg's one 4000-token step on instance 0 + the transfer + instance 1's
    # step recomputing the last prompt token with 4000 tokens of KV (it samples token 1)
    t_prefill = sim.built[0].timer.time_shape(BatchShape(4000, 0.0, 1, 0, 0, 0, 0)).total_ns
    t_first = sim.built[1].timer.time_shape(BatchShape(0, 0.0, 0, 1, 4000, 4000, 4000)).total_ns
    f = sim.cluster.finished_calls[0]
    assert f.info.instance == 1 and f.first_scheduled_ns == 0
    assert f.first_token_ns == t_prefill + transfer + t_first
    rec = sim.cluster.disagg.records[0]
    assert (rec.start_ns, rec.end_ns) == (t_prefill, t_prefill + transfer)


def test_a_tp8_pair_on_two_b200_nodes_pays_one_rail_message_per_rank(tmp_path):
    sim = _run(tmp_path, 8, {})
    # TP8 + TP8 on 8-GPU nodes: instance 1 starts node 1
    assert [(p["node"], p["gpus"]) for p in placement_of(sim.specs, sim.built)] == [(0, list(range(8))),
                                                                                   (1, list(range(8)))]
    # equal TP: decode rank j reads from prefill rank j, GPU j of node 0 -> GPU j of node 1
    # (rail j); each read moves one KV head: 250 x 16 x 131072 / 8 = 65,536,000 B, the 8 reads
    # run at once on 8 rails, so the transfer is one message:
    # 2 x 1000 + 65,536,000 / 49.999862 = 2000 + 1,310,723.6 -> 1,312,723 ns
    per_read = 250 * 16 * KV_BYTES_PER_TOKEN // 8
    assert per_read == 65_536_000
    transfer = _message_ns(per_read)
    assert transfer == 1_312_723
    rec = sim.cluster.disagg.records[0]
    assert (rec.blocks, rec.bytes) == (250, 8 * per_read)
    _ttft_parts(sim, transfer)


def test_a_b200_prefill_and_an_rtx_pro_6000_decode_pair_across_nodes(tmp_path):
    sim = _run(tmp_path, 1, {"hardware": "RTXPRO6000"})
    # two devices: two nodes (placement starts a node per device)
    assert [p["node"] for p in placement_of(sim.specs, sim.built)] == [0, 1]
    # TP1 each: one read of the whole prompt's KV, 250 x 16 x 131072 = 524,288,000 B, on the
    # slower NIC (both 400 Gb/s, 1000 ns a hop: the same dimension):
    # 2000 + 524,288,000 / 49.999862 = 2000 + 10,485,789.0 -> 10,487,788 ns
    nbytes = 250 * 16 * KV_BYTES_PER_TOKEN
    transfer = _message_ns(nbytes)
    assert transfer == 10_487_788
    assert sim.cluster.disagg.records[0].bytes == nbytes
    _ttft_parts(sim, transfer)


def test_the_slower_nic_sets_the_inter_node_dimension():
    class Dev:
        def __init__(self, name, inter):
            self.name, self.path, self.inter_node = name, f"{name}.yaml", inter
    fast, slow = InterNode("a", "Switch", 400.0, 1000.0), InterNode("b", "Switch", 200.0, 500.0)
    late = InterNode("c", "Switch", 400.0, 3000.0)
    assert slower_inter_node(Dev("x", fast), Dev("y", slow)) is slow
    assert slower_inter_node(Dev("x", slow), Dev("y", fast)) is slow
    assert slower_inter_node(Dev("x", fast), Dev("y", late)) is late      # tie on bandwidth: higher latency
    with pytest.raises(ConfigError) as e:
        slower_inter_node(Dev("x", fast), Dev("z", None))
    assert e.value.key == "instances" and "z" in e.value.message and "inter_node" in e.value.message


def test_roles_across_nodes_without_an_inter_node_block_are_refused():
    # RTX 4090 (hardware/RTX4090.yaml: 2 GPUs a node, no inter_node block): prefill TP1 on
    # node 0 GPU 0, decode TP2 does not fit the one GPU left and starts node 1
    with pytest.raises(ConfigError) as e:
        build_simulation({"model": "meta-llama/Llama-3.1-8B", "hardware": "RTX4090", "parallelism": {"tp": 1},
                          "instances": [{"role": "prefill"}, {"role": "decode", "parallelism": {"tp": 2}}],
                          "workload": {"generator": "swebench"}})
    assert e.value.key == "instances" and "RTX4090" in e.value.message and "inter_node" in e.value.message
