"""Lockstep data / expert-parallel MoE steps as Chakra graphs (execution_graph.lockstep_step_graphs)
and their export (agentservesim export-chakra on a dp/ep config). The upstream binary's replays
of exported steps are in tests/astrasim/golden/upstream_exports_dpep.json
(tests/astrasim/test_upstream_golden.py)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from astrasim import CollectiveCommType, NodeType, read_workload
from llmservingsim.data_parallel import DUMMY_SHAPE
from llmservingsim.execution_graph import lockstep_groups, lockstep_step_graphs, system_simulator
from llmservingsim.perf_model import batch_shape
from program_layer.config import load_config
from program_layer.run import build_simulation

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples/clusters/rtx-2x-qwen3-30b-a3b-dp2ep2.yaml"
AG, RS, AR = int(CollectiveCommType.ALL_GATHER), int(CollectiveCommType.REDUCE_SCATTER), \
    int(CollectiveCommType.ALL_REDUCE)


def lockstep_timer(tp: int, dp: int):
    cfg = load_config(str(EXAMPLE))
    cfg["parallelism"] = {"tp": tp, "pp": 1, "dp": dp, "ep": tp * dp}
    sim = build_simulation(cfg, step_mode=True)
    return sim, sim.cluster.servers[0].group.timer


def test_groups_tp_groups_then_the_dp_dispatch_groups():
    # DP rank d's TP index t is NPU d*tp + t; vLLM's dispatch / combine run on the DP group
    # (the ranks with the same TP index), which without TP is every NPU (the EP group)
    assert lockstep_groups(2, 1) == {"1": [0, 1]}
    assert lockstep_groups(2, 2) == {"1": [0, 1], "2": [2, 3], "3": [0, 2], "4": [1, 3]}
    assert lockstep_groups(4, 2)["5"] == [0, 2, 4, 6] and lockstep_groups(4, 2)["6"] == [1, 3, 5, 7]


def test_dp2_tp2_step_graph_nodes_sizes_and_groups():
    """Qwen3-30B-A3B (48 layers, hidden 2048, bf16) at dp2 tp2 ep4: DP rank 0 runs a 512-token
    prefill plus 8 decodes (520 tokens), DP rank 1 a dummy step (1 token)."""
    sim, timer = lockstep_timer(2, 2)
    shapes = [batch_shape([(512, 0)], [1000] * 8), DUMMY_SHAPE]
    graphs = lockstep_step_graphs(timer, shapes, [False, True])
    assert len(graphs) == 4                                  # dp x tp GPUs
    # per rank: embedding, 48 x (attn, all-reduce, mlp, all-gather, experts, reduce-scatter,
    # all-reduce), final norm / lm_head / sampler = 1 + 48 * 7 + 1
    assert [len(g) for g in graphs] == [338] * 4
    for npu, g in enumerate(graphs):
        d, t = divmod(npu, 2)
        own = shapes[d].num_tokens
        colls = [n for n in g if n.type == NodeType.COMM_COLL_NODE]
        ag = [n for n in colls if n.attrs["comm_type"].value == AG]
        rs = [n for n in colls if n.attrs["comm_type"].value == RS]
        ar = [n for n in colls if n.attrs["comm_type"].value == AR]
        assert len(ag) == len(rs) == 48 and len(ar) == 96
        # all-gather: what each member contributes = the largest rank's 520 tokens x 2048 x 2 B;
        # reduce-scatter: the whole buffer, dp x that
        assert {n.attrs["comm_size"].value for n in ag} == {520 * 2048 * 2}
        assert {n.attrs["comm_size"].value for n in rs} == {2 * 520 * 2048 * 2}
        assert {n.attrs["pg_name"].value for n in ag + rs} == {str(3 + t)}      # TP index t's DP group
        # the TP all-reduces: the rank's own tokens, on its TP group
        assert {n.attrs["comm_size"].value for n in ar} == {own * 2048 * 2}
        assert {n.attrs["pg_name"].value for n in ar} == {str(1 + d)}
        names = [n.name for n in g[1:8]]
        assert names == ["layer0.attn", "layer0.attn.all_reduce", "layer0.mlp", "layer0.moe.all_gather",
                         "layer0.moe.experts", "layer0.moe.reduce_scatter", "layer0.mlp.all_reduce"]
        # the experts run on the gathered 521 tokens
        assert g[5].duration_micros == max(round(timer.moe.us(own, 521)), 0)
    # the dummy rank samples nothing: its tail is the final norm alone
    perf = timer.timer.perf
    assert graphs[2][-1].duration_micros == round(perf.bundle.dense["final_layernorm"](1))
    assert graphs[0][-1].duration_micros == round(perf.bundle.dense["final_layernorm"](520)
                                                  + perf.per_sequence_us(9))


def _run(sim, timer, graphs, system=None):
    ep = timer.ep_comm
    return system_simulator(sim.device, ep.dp * ep.tp, 1, ep.network,
                            system or sim.device.system_config(), groups=lockstep_groups(ep.dp, ep.tp)).run(graphs)


def test_equal_ranks_graph_comm_is_what_the_engine_charges():
    """Both ranks run the same batch: nobody waits, so each rank's exposed communication in the
    graph is exactly the engine's EP charge, 48 x (all-gather + reduce-scatter), and its compute
    is the engine's up to the whole-µs rounding of the graph's 242 compute nodes."""
    sim, timer = lockstep_timer(1, 2)
    shape = batch_shape([(512, 0)], [1000] * 8)
    graphs = lockstep_step_graphs(timer, [shape, shape], [False, False])
    res = _run(sim, timer, graphs)
    cu, tp, ag, rs, _ = timer.rank_ns(shape, False, 1040, 520)
    assert tp == 0 and ag == 48 * timer.ep_comm.layer_ns(520)[0] and rs == 48 * timer.ep_comm.layer_ns(520)[1]
    assert res.exposed_comm_ns == [ag + rs] * 2
    compute = [1000 * sum(n.duration_micros for n in g if n.type == NodeType.COMP_NODE) for g in graphs]
    assert all(abs(c - cu) <= 500 * 242 for c in compute)
    assert res.finish_ns == [c + ag + rs for c in compute]


def test_unequal_ranks_graph_syncs_per_layer_and_stays_within_the_engine_step():
    """A prefill rank and a dummy rank: the graph synchronises at every MoE collective, each
    member on its own clock (a late member finds the early one's messages delivered: upstream's
    semantics), so the slowest rank's exposed comm is at most the engine's closed form (every
    collective started by all at once) and more than 0 (it still waits for the reduce-scatter)."""
    sim, timer = lockstep_timer(1, 2)
    shapes = [batch_shape([(512, 0)], [1000] * 8), DUMMY_SHAPE]
    graphs = lockstep_step_graphs(timer, shapes, [False, True])
    res = _run(sim, timer, graphs)
    cu, _, ag, rs, _ = timer.rank_ns(shapes[0], False, 521, 520)
    compute0 = 1000 * sum(n.duration_micros for n in graphs[0] if n.type == NodeType.COMP_NODE)
    assert res.finish_ns[0] == max(res.finish_ns)            # the prefill rank ends the step
    assert 0 < res.exposed_comm_ns[0] <= ag + rs
    assert res.finish_ns[0] == compute0 + res.exposed_comm_ns[0]
    # the dummy rank waits: its exposed comm is its step minus its own (smaller) compute
    compute1 = 1000 * sum(n.duration_micros for n in graphs[1] if n.type == NodeType.COMP_NODE)
    assert res.exposed_comm_ns[1] == res.finish_ns[1] - compute1 > ag + rs


def test_export_of_the_dp2_ep2_example_writes_both_ranks_and_the_ep_group(tmp_path):
    out = tmp_path / "chk"
    res = subprocess.run([sys.executable, "-m", "program_layer.cli", "export-chakra", str(EXAMPLE), "--steps", "2",
                          "--out", str(out)], capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0, res.stderr
    assert "2 data-parallel ranks x tp 1 = 2 NPUs" in res.stdout
    assert "--comm-group-configuration=" in res.stdout
    steps = sorted(out.iterdir())
    assert [d.name for d in steps] == ["step00000", "step00001"]
    for d in steps:
        assert sorted(p.name for p in d.glob("step.*.et")) == ["step.0.et", "step.1.et"]
        assert json.loads((d / "comm_group.json").read_text()) == {"1": [0, 1]}
        expected = json.loads((d / "expected.json").read_text())
        # the first request lands on rank 0; rank 1 runs dummy steps
        assert [(b["rank"], b["dummy"]) for b in expected["batch"]] == [(0, False), (1, True)]
        graphs = read_workload(str(d / "step"))
        assert [len(g) for g in graphs] == [242, 242]         # 1 + 48 x 5 + 1 (no TP all-reduces)
        lines = subprocess.run([sys.executable, "-m", "astrasim", f"--workload-configuration={d}/step",
                                f"--system-configuration={d}/system.json",
                                f"--network-configuration={d}/network.yml",
                                f"--remote-memory-configuration={d}/remote_memory.json",
                                f"--comm-group-configuration={d}/comm_group.json"],
                               check=True, capture_output=True, text=True).stdout.strip().splitlines()
        assert lines == [f"sys[{r}] finished, {expected['finish_ns'][str(r)]} cycles, exposed communication "
                         f"{expected['exposed_comm_ns'][str(r)]} cycles." for r in range(2)]
    first = json.loads((steps[0] / "expected.json").read_text())["batch"][0]
    assert first["prefill_tokens"] == 2048 and first["tokens"] == 2048     # max_num_batched_tokens


def test_export_refuses_lockstep_with_pipeline_stages(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(EXAMPLE.read_text().replace("{tp: 1, pp: 1, dp: 2, ep: 2}", "{tp: 1, pp: 2, dp: 2, ep: 2}")
                   .replace("path: ../validation", f"path: {REPO}/examples/validation"))
    res = subprocess.run([sys.executable, "-m", "program_layer.cli", "export-chakra", str(cfg), "--steps", "1",
                          "--out", str(tmp_path / "o")], capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 2 and not (tmp_path / "o").exists()
    assert "key 'parallelism.pp'" in res.stderr and "pp: 1" in res.stderr
