"""Clusters and pipeline parallelism through whole runs (docs/clusters.md): PP throughput at
saturation, no hang and balanced KV accounting on every tp x pp that fits a small cluster,
the example clusters' inter-node traffic, placements, and the errors."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from llmservingsim.errors import ConfigError
from llmservingsim.perf_model import batch_shape
from llmservingsim.placement import place
from llmservingsim.pipeline import PipelineClock
from program_layer.run import build_simulation, run_config

REPO = Path(__file__).resolve().parents[2]
MODEL_8B = "meta-llama/Llama-3.1-8B"


def workload(tmp_path, n=64, prompt=100, output=40, name="w.jsonl", spacing_ns=0):
    p = tmp_path / name
    p.write_text("".join(json.dumps({"input_toks": prompt, "output_toks": output, "arrival_time_ns": i * spacing_ns})
                         + "\n" for i in range(n)))
    return str(p)


def cfg(wl, tp, pp, nodes=None, hardware="RTXPRO6000", **engine):
    c = {"model": MODEL_8B, "hardware": hardware, "parallelism": {"tp": tp, "pp": pp},
         "workload": {"path": wl}, "engine": engine}
    if nodes is not None:
        c["cluster"] = {"nodes": nodes}
    return c


def test_tp4_pp2_outruns_tp4_pp1_at_saturation_with_equal_stage_compute(tmp_path):
    """64 requests at once, 32 tokens a batch: the decodes form two batches. TP4 x PP1 runs
    them one after the other; TP4 x PP2 keeps both in flight (one per stage), each stage
    running half the layers, so output throughput is higher (same engine, same budget)."""
    wl = workload(tmp_path)
    eng = {"max_num_batched_tokens": 32, "kv_pool_tokens": 20000}
    s1 = run_config(cfg(wl, 4, 1, **eng), tmp_path / "pp1")
    s2 = run_config(cfg(wl, 4, 2, **eng), tmp_path / "pp2")
    assert s1["calls"] == s2["calls"] == 64
    assert s2["throughput"]["output_tokens_per_s"] > 1.3 * s1["throughput"]["output_tokens_per_s"]
    # per-token compute per stage: a PP2 stage's layers are exactly half of PP1's layers
    p1 = build_simulation(cfg(wl, 4, 1, **eng)).timer.perf
    p2 = build_simulation(cfg(wl, 4, 2, **eng)).timer
    shape = batch_shape([], [500] * 32)
    layers1 = p1.compute_us(shape) - p1.once_us(shape)
    stages = PipelineClock(p2, 2).stage_compute_us(shape)
    emb = p1.bundle.dense["embedding"](32)
    assert stages[0] - emb == pytest.approx(layers1 / 2, rel=1e-12)
    assert stages[1] - (p1.once_us(shape) - emb) == pytest.approx(layers1 / 2, rel=1e-12)


def fits(tp, pp, nodes, g=8):
    try:
        place({"nodes": nodes}, instances=1, tp=tp, pp=pp, dp=1, gpus_per_node=g, device="d")
        return True
    except ConfigError:
        return False


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tp=st.sampled_from([1, 2]), pp=st.integers(1, 4), nodes=st.integers(1, 2),
       n=st.integers(1, 12), budget=st.sampled_from([16, 48, 512]), spacing=st.sampled_from([0, 3_000_000]),
       output=st.integers(1, 20))
def test_every_fitting_tp_pp_finishes_and_balances_kv(tmp_path_factory, tp, pp, nodes, n, budget, spacing, output):
    """A small RTX PRO 6000 cluster (TP1 and TP2 measured: no derivation): every call completes
    (no hang: the loop drains), and at the end every KV block is free again (blocks held by
    nothing, as the engine checker demands)."""
    if not fits(tp, pp, nodes):
        return
    tmp = tmp_path_factory.mktemp("p")
    wl = workload(tmp, n=n, prompt=40, output=output, spacing_ns=spacing)
    c = cfg(wl, tp, pp, nodes if tp * pp > 8 or nodes > 1 else None,
            max_num_batched_tokens=budget, kv_pool_tokens=4096)
    sim = build_simulation(c)
    sim.run()
    assert len(sim.cluster.finished_calls) == n
    for inst in sim.cluster.instances:
        sched, kv = inst.scheduler, inst.kv
        assert not sched.running and not len(sched.waiting) and not kv.req_blocks
        assert kv.num_free_blocks == kv.pool.num_usable
        assert all(b.ref_cnt == 0 for b in kv.pool.blocks[1:])
        assert not getattr(inst, "queue", None)


def test_b200_tp8_pp2_sends_its_activations_between_nodes(tmp_path):
    """The 2-node example: stage 0 on node 0, stage 1 on node 1; every batch's send/recv is
    inter-node traffic, timed on the 400 Gb/s dimension (the trace shows it apart from TP)."""
    from program_layer.config import load_config
    c = load_config(REPO / "examples" / "clusters" / "b200-2x8-llama70b-tp8pp2.yaml")
    c["workload"]["programs"] = 2
    trace = tmp_path / "t.csv"
    s = run_config(c, tmp_path / "out", trace_steps=trace)
    assert s["placement"] == [{"instance": 0, "nodes": [0, 1], "stages": [
        {"stage": 0, "node": 0, "gpus": list(range(8))}, {"stage": 1, "node": 1, "gpus": list(range(8))}]}]
    rows = trace.read_text().splitlines()
    head = rows[0].split(",")
    assert head[-4:] == ["tp_allreduce_s", "pp_sendrecv_s", "inter_node_s", "latency_s"]
    for r in rows[1:]:
        v = dict(zip(head, r.split(",")))
        assert float(v["inter_node_s"]) == float(v["pp_sendrecv_s"]) > 0
        assert float(v["tp_allreduce_s"]) > 0
    # a 1-token decode batch sends 8192 x 2 B = 16 KiB: 2 hops x 1 us + 16384 B / 50 GB/s
    sim = build_simulation(c)
    sc = sim.timer.comm.stage_comm(1)
    assert sc.inter_node == (True,)
    assert sc.send_ns == (2000 + int(16384 / (46.566 * 1.073741824)),)


def test_tp4_pp2_on_one_node_stays_intra_node(tmp_path):
    wl = workload(tmp_path, n=2)
    sim = build_simulation(cfg(wl, 4, 2))       # the TP4 bundle the saturation test derived
    assert sim.timer.comm.stage_comm(1).inter_node == (False,)
    assert sim.placements[0].summary() == {"instance": 0, "node": 0, "gpus": list(range(8)), "stages": [
        {"stage": 0, "node": 0, "gpus": [0, 1, 2, 3]}, {"stage": 1, "node": 0, "gpus": [4, 5, 6, 7]}]}


def test_placement_packs_and_explicit_form():
    # two TP4 x PP3 instances on 3 nodes of 8: stages first-fit, node after node
    p = place({"nodes": 3}, instances=2, tp=4, pp=3, dp=1, gpus_per_node=8, device="B200")
    assert [g for g in p[0].groups] == [(0, (0, 1, 2, 3)), (0, (4, 5, 6, 7)), (1, (0, 1, 2, 3))]
    assert [g for g in p[1].groups] == [(1, (4, 5, 6, 7)), (2, (0, 1, 2, 3)), (2, (4, 5, 6, 7))]
    e = place({"nodes": 2, "placement": [{"stages": [{"node": 1, "gpus": "0-3"}, {"node": 0, "gpus": [4, 5, 6, 7]}]}]},
              instances=1, tp=4, pp=2, dp=1, gpus_per_node=8, device="B200")
    assert e[0].groups == ((1, (0, 1, 2, 3)), (0, (4, 5, 6, 7)))


@pytest.mark.parametrize("spec,tp,pp,instances,key,message", [
    (None, 8, 2, 1, "parallelism.tp", "one instance must fit in one node unless cluster.nodes"),
    ({"nodes": 2}, 16, 1, 1, "parallelism.tp", "a tensor-parallel group cannot span nodes"),
    ({"nodes": 1}, 8, 2, 1, "cluster.nodes", "need 2 node(s) of 8 B200 GPUs, but the cluster has 1"),
    ({"nodes": 2}, 8, 1, 3, "cluster.nodes", "need 3 node(s)"),
    ({"nodes": 0}, 1, 1, 1, "cluster.nodes", "must be an integer >= 1"),
    ({"nodes": 2, "rack": 1}, 1, 1, 1, "cluster.rack", "unknown key"),
    ({"nodes": 2, "placement": [{"stages": [{"node": 0, "gpus": "0-7"}, {"node": 0, "gpus": "0-7"}]}]}, 8, 2, 1,
     "cluster.placement[0].stages[1].gpus", "node 0 GPU 0 is already used by instance 0"),
    ({"nodes": 2, "placement": [{"stages": [{"node": 2, "gpus": "0-7"}]}]}, 8, 1, 1,
     "cluster.placement[0].stages[0].node", "node must be one of 0..1"),
])
def test_a_cluster_that_does_not_fit_is_one_config_error(spec, tp, pp, instances, key, message):
    with pytest.raises(ConfigError) as exc:
        place(spec, instances=instances, tp=tp, pp=pp, dp=1, gpus_per_node=8, device="B200")
    assert exc.value.key == key and message in exc.value.message


def test_cli_names_the_key_and_exits_2(tmp_path):
    wl = workload(tmp_path, n=1)
    c = tmp_path / "c.yaml"
    c.write_text(f"model: {MODEL_8B}\nhardware: B200\ncluster: {{nodes: 1}}\nparallelism: {{tp: 8, pp: 2}}\n"
                 f"workload: {{path: {wl}}}\n")
    res = subprocess.run([sys.executable, "-m", "program_layer.cli", "run", str(c), "--out", str(tmp_path / "o")],
                         capture_output=True, text=True)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"error: {c}:3, key 'cluster.nodes': 1 instance(s) of tp x pp = 16 GPUs need 2 node(s) of 8 B200 GPUs, "
        "but the cluster has 1"]


def test_explicit_async_scheduling_with_pp_is_refused_like_vllm(tmp_path):
    wl = workload(tmp_path, n=1)
    c = cfg(wl, 1, 2, hardware="B200", async_scheduling=True)
    with pytest.raises(ConfigError) as exc:
        build_simulation(c)
    assert exc.value.key == "engine.async_scheduling"
    assert build_simulation(cfg(wl, 1, 2, hardware="B200")).engine["async_scheduling"] is False


def test_export_chakra_writes_the_two_level_network_and_replays(tmp_path):
    from program_layer.config import load_config
    import yaml
    src = REPO / "examples" / "clusters" / "b200-2x8-llama70b-tp8pp2.yaml"
    c = yaml.safe_load(src.read_text())
    c["workload"]["programs"] = 1
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(c))
    out = tmp_path / "chk"
    from program_layer.cli import main       # in-process: the TP8 bundle derived once for this module
    assert main(["export-chakra", str(path), "--steps", "1", "--out", str(out)]) == 0
    d = out / "step00000"
    assert (d / "network.yml").read_text().splitlines()[:2] == ["topology: [ Switch, Switch ]", "npus_count: [ 8, 2 ]"]
    assert len(json.loads((d / "system.json").read_text())["all-reduce-implementation"]) == 2
    assert json.loads((d / "comm_group.json").read_text()) == {"1": list(range(8)), "2": list(range(8, 16))}
    expected = json.loads((d / "expected.json").read_text())
    run = subprocess.run([sys.executable, "-m", "astrasim", f"--workload-configuration={d}/step",
                          f"--system-configuration={d}/system.json", f"--network-configuration={d}/network.yml",
                          f"--remote-memory-configuration={d}/remote_memory.json",
                          f"--comm-group-configuration={d}/comm_group.json"], capture_output=True, text=True, check=True)
    assert run.stdout.strip().splitlines() == [
        f"sys[{r}] finished, {expected['finish_ns'][str(r)]} cycles, exposed communication "
        f"{expected['exposed_comm_ns'][str(r)]} cycles." for r in range(16)]


def test_run_header_prints_stages_and_dp_ranks():
    from program_layer.commands.run_cmd import placement_line
    assert placement_line({"instance": 0, "node": 0, "gpus": [0, 1]}) == ""
    assert placement_line({"instance": 0, "nodes": [0, 1], "stages": [
        {"stage": 0, "node": 0, "gpus": list(range(8))}, {"stage": 1, "node": 1, "gpus": list(range(8))}]}) == \
        "stage 0 node 0 GPUs 0-7, stage 1 node 1 GPUs 0-7"
    assert placement_line({"instance": 0, "nodes": [0, 1], "ranks": [
        {"rank": 0, "node": 0, "gpus": [0]},
        {"rank": 1, "nodes": [0, 1], "stages": [{"stage": 0, "node": 0, "gpus": [1]}, {"stage": 1, "node": 1, "gpus": [0]}]},
    ]}) == "rank 0 node 0 GPU 0; rank 1 stage 0 node 0 GPU 1, stage 1 node 1 GPU 0"
