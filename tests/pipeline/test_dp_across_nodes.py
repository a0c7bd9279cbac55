"""Data-parallel ranks placed anywhere (docs/clusters.md, docs/data-expert-parallel.md): a
MoE server's ranks on two nodes pay the inter-node NIC in their EP collectives, placements
list each rank, dense dp x pp runs pipelined ranks, and MoE dp x pp stays refused."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from llmservingsim.errors import ConfigError
from llmservingsim.hardware import load_device
from llmservingsim.pipeline import PipelineInstance
from llmservingsim.placement import place
from llmservingsim.rank_layout import dp_layout
from program_layer.run import build_simulation

QWEN = "Qwen/Qwen3-30B-A3B-Instruct-2507"
DENSE = "meta-llama/Llama-3.1-8B"
ONE_GPU_PER_NODE = {"nodes": 2, "placement": [{"stages": [{"node": 0, "gpus": 0}, {"node": 1, "gpus": 0}]}]}


def _workload(tmp_path, n=6, output=3):
    w = tmp_path / "w.jsonl"
    w.write_text("".join(json.dumps({"input_toks": 40 + 8 * i, "output_toks": output + i % 3,
                                     "arrival_time_ns": 3_000_000 * i}) + "\n" for i in range(n)))
    return str(w)


def _cfg(wl, model=QWEN, cluster=None, **par):
    c = {"model": model, "hardware": "RTXPRO6000", "parallelism": par,
         "engine": {"max_num_seqs": 8, "max_num_batched_tokens": 256}, "workload": {"path": wl}}
    if cluster is not None:
        c["cluster"] = cluster
    return c


def test_dp2_moe_server_across_two_nodes_pays_the_nic_in_its_ep_collectives(tmp_path):
    """Qwen3-30B-A3B at {tp 1, dp 2, ep 2} on RTX PRO 6000, rank 0 on node 0 GPU 0, rank 1 on
    node 1 GPU 0. A layer whose largest rank has 100 tokens gathers 100 x 2048 (hidden) x 2 B
    = 409,600 B per rank (reduce-scatter: the 819,200-B buffer).

    Two nodes: the DP group is NPUs [0, 8] of the network [8 GPUs, 2 nodes]; they differ only
    in dimension 1 (the inter-node Switch: 400 Gb/s -> 46.566 "GB/s" = 49.99986 B/ns, 1000 ns
    a hop, 2 hops). A group smaller than the network is one ring phase with ASTRA-Sim's group
    endpoint delay E = 10 ns. Ring of 2: one step, one message of 409,600 B:
        c = floor(2 x 1000 + 409600 / 49.99986) = floor(10192.02) = 10192
        all-gather     = c + 2E                          = 10192 + 20       = 10,212 ns
        reduce-scatter = c + 3 floor(409600 / 1597.6) + 2E  (local reduction at 1597.6 B/ns)
                       = 10192 + 3 x 256 + 20                                = 10,980 ns
    One node: the 2-GPU PCIe network (Switch, 33.903 "GB/s" = 36.40307 B/ns, latency
    12700 / (2 x 2) = 3175 ns a hop, endpoint delay 0: the group is the whole network):
        all-gather     = floor(2 x 3175 + 409600 / 36.40307) = floor(17601.80) = 17,601 ns
        reduce-scatter = 17601 + 768                                          = 18,369 ns
    (this PCIe node's fitted fixed collective cost exceeds the NIC's estimated latency, so here
    the two-node group is the faster one; what matters is that each is its own network's time)."""
    wl = _workload(tmp_path)
    two = build_simulation(_cfg(wl, tp=1, dp=2, ep=2, cluster=ONE_GPU_PER_NODE))
    one = build_simulation(_cfg(wl, tp=1, dp=2, ep=2))
    ep2, ep1 = two.cluster.servers[0].group.timer.ep_comm, one.cluster.servers[0].group.timer.ep_comm
    assert ep2.network["npus_count"] == [8, 2] and ep2.groups == [[0, 8]]
    assert ep2.layer_ns(100) == (10_212, 10_980)
    assert ep1.layer_ns(100) == (17_601, 18_369)
    # the step charges 48 MoE layers x those times (the largest rank's tokens)
    timer = two.cluster.servers[0].group.timer
    from llmservingsim.perf_model import batch_shape
    shape = batch_shape([], [500] * 100)           # 100 decodes: the largest rank's 100 tokens
    assert timer.rank_ns(shape, False, 200, 100)[2:4] == (48 * 10_212, 48 * 10_980)
    two.run()
    assert len(two.cluster.finished_calls) == 6
    assert [p.summary() for p in two.placements] == [
        {"instance": 0, "nodes": [0, 1], "ranks": [{"rank": 0, "node": 0, "gpus": [0]},
                                                  {"rank": 1, "node": 1, "gpus": [0]}]}]


def test_packed_dp_ranks_fill_nodes_and_a_rank_that_fits_stays_in_one():
    """tp 4 x dp 3 on 8-GPU nodes: ranks 0, 1 fill node 0, rank 2 starts node 1. tp 2 x pp 3 x
    dp 2 (6 GPUs a rank): rank 1 does not fit the 2 GPUs left on node 0, so it starts node 1
    (a rank that fits a node never straddles two)."""
    (p,) = place({"nodes": 2}, instances=1, tp=4, pp=1, dp=3, gpus_per_node=8, device="d")
    assert p.groups == ((0, (0, 1, 2, 3)), (0, (4, 5, 6, 7)), (1, (0, 1, 2, 3)))
    assert p.summary()["ranks"][2] == {"rank": 2, "node": 1, "gpus": [0, 1, 2, 3]}
    (q,) = place({"nodes": 2}, instances=1, tp=2, pp=3, dp=2, gpus_per_node=8, device="d")
    assert [n for n, _ in q.rank_groups(0)] == [0, 0, 0] and [n for n, _ in q.rank_groups(1)] == [1, 1, 1]
    assert q.summary()["ranks"][1]["stages"][0] == {"stage": 0, "node": 1, "gpus": [0, 1]}
    # without cluster.nodes the server must fit one node: one error naming parallelism.dp
    with pytest.raises(ConfigError) as e:
        place(None, instances=1, tp=4, pp=1, dp=3, gpus_per_node=8, device="d")
    assert e.value.key == "parallelism.dp" and "data-parallel ranks may span nodes" in e.value.message


def test_dp_layout_crosses_nodes_on_one_rail():
    """dp 4 x tp 1, two ranks a node: rank 2 takes rank 1's slot on node 1, so the DP ring
    0 -> 1 -> 2 -> 3 -> 0 steps inside a node (dimension 0) or between nodes on one rail
    (dimension 1): NPUs (0, 1, 9, 8) of the [8, 2] network."""
    dev = load_device("RTXPRO6000")
    spec = {"nodes": 2, "placement": [{"stages": [{"node": 0, "gpus": 0}, {"node": 0, "gpus": 1},
                                                  {"node": 1, "gpus": 0}, {"node": 1, "gpus": 1}]}]}
    (p,) = place(spec, instances=1, tp=1, pp=1, dp=4, gpus_per_node=8, device="d")
    lay = dp_layout(p, dev)
    assert lay.npus == (0, 1, 9, 8) and lay.nodes == 2


def test_dense_dp2_pp2_runs_pipelined_ranks(tmp_path):
    wl = _workload(tmp_path)
    sim = build_simulation(_cfg(wl, model=DENSE, tp=1, pp=2, dp=2))
    assert [type(r) for r in sim.cluster.instances] == [PipelineInstance, PipelineInstance]
    sim.run()
    assert len(sim.cluster.finished_calls) == 6
    assert sum(sim.dpep.servers[0].balancer.assigned) == 6


def test_moe_dp_with_pp_is_refused_naming_the_key(tmp_path):
    with pytest.raises(ConfigError) as e:
        build_simulation(_cfg(_workload(tmp_path), tp=1, pp=2, dp=2, ep=2))
    assert e.value.key == "parallelism.pp" and "lockstep" in e.value.message


def _spread(groups: int, tp: int, nodes: int) -> dict:
    """Group k on node k x nodes // groups (each node visited once, in order), GPUs packed."""
    used = [0] * nodes
    stages = []
    for k in range(groups):
        n = k * nodes // groups
        stages.append({"node": n, "gpus": list(range(used[n], used[n] + tp))})
        used[n] += tp
    return {"nodes": nodes, "placement": [{"stages": stages}]}


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(nodes=st.integers(1, 2), tp=st.sampled_from([1, 2]), pp=st.integers(1, 2), dp=st.integers(1, 2),
       dense=st.booleans(), ep_on=st.booleans(), n=st.integers(1, 8), output=st.integers(1, 12))
def test_small_clusters_finish_every_call_and_balance_kv_per_rank(tmp_path_factory, nodes, tp, pp, dp, dense,
                                                                  ep_on, n, output):
    """Every tp x pp x dp spread over 1-2 RTX PRO 6000 nodes (dense: any pp; MoE: pp 1, EP on
    or off): every call finishes (no hang), every rank's KV blocks are all free at the end."""
    if not dense and pp > 1:
        return                  # refused (test above)
    tmp = tmp_path_factory.mktemp("d")
    par = {"tp": tp, "pp": pp, "dp": dp, "ep": dp * tp if ep_on and not dense and dp * tp > 1 else 1}
    c = _cfg(_workload(tmp, n=n, output=output), model=DENSE if dense else QWEN,
             cluster=_spread(pp * dp, tp, nodes), **par)
    c["engine"]["kv_pool_tokens"] = 4096
    sim = build_simulation(c)
    sim.run()
    assert len(sim.cluster.finished_calls) == n
    assert len(sim.cluster.instances) == dp
    for core in sim.cluster.instances:
        core.kv.check_invariants()
        assert not core.scheduler.running and len(core.scheduler.waiting) == 0
        assert core.kv.num_free_blocks == core.kv.pool.num_usable
        assert core.current is None and not getattr(core, "queue", None)


def test_export_chakra_of_a_dp_server_across_nodes_writes_the_two_level_network(tmp_path):
    """The 2-node dp2 server's step: graphs at NPUs 0 and 8 of the [8, 2] network (the others
    empty), its dispatch group [0, 8], and system.json with one implementation per dimension."""
    import yaml

    from program_layer.cli import main
    c = _cfg(_workload(tmp_path), tp=1, dp=2, ep=2, cluster=ONE_GPU_PER_NODE)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(c))
    assert main(["export-chakra", str(path), "--steps", "1", "--out", str(tmp_path / "x")]) == 0
    d = tmp_path / "x" / "step00000"
    assert yaml.safe_load((d / "network.yml").read_text())["npus_count"] == [8, 2]
    assert json.loads((d / "comm_group.json").read_text()) == {"1": [0, 8]}
    assert len(json.loads((d / "system.json").read_text())["all-gather-implementation"]) == 2
    finish = json.loads((d / "expected.json").read_text())["finish_ns"]
    assert len(finish) == 16 and {k for k, v in finish.items() if v} == {"0", "8"}
