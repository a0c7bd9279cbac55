"""Execution-graph generator + system simulator (issue 3): the memoised exposed
communication equals a full run of the step's Chakra graphs; PCIe vs NVLink; export."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from astrasim import NodeType, read_workload
from llmservingsim.execution_graph import GraphCommModel, step_graphs
from llmservingsim.hardware import load_device
from llmservingsim.hardware import ring_allreduce_ns
from llmservingsim.model_config import load_model
from llmservingsim.overhead_model import Regime, load_overhead
from llmservingsim.perf_model import PerformanceModel, batch_shape
from llmservingsim.profiles import load_bundle
from llmservingsim.step_timer import StepTimer

MODEL = load_model("meta-llama/Llama-3.1-70B")


def _timer(hw: str, tp: int, pp: int = 1, fitted: bool = False):
    perf = PerformanceModel(MODEL, load_bundle(hw, MODEL.name, tp), pp)
    regimes = load_overhead(hw).regimes_for(tp) if fitted else None
    comm = GraphCommModel(MODEL, load_device(hw), tp, pp, regimes=regimes)
    return perf, comm, StepTimer(perf, comm)


@settings(max_examples=15, deadline=None)
@given(prefill=st.integers(0, 4096), decodes=st.integers(0, 64), kv=st.integers(16, 30000),
       hw=st.sampled_from(["RTXPRO6000", "B200"]), fitted=st.booleans())
def test_memoised_comm_equals_full_graph_run(prefill, decodes, kv, hw, fitted):
    if prefill == 0 and decodes == 0:
        decodes = 1
    perf, comm, _ = _timer(hw, 2, fitted=fitted)
    shape = batch_shape([(prefill, kv // 2)] if prefill else [], [kv] * decodes)
    graphs = step_graphs(perf, shape, 2, 1, comm)
    result = comm.simulator_for(shape.num_tokens).run(graphs)
    assert result.exposed_comm_ns == [comm.exposed_comm_ns(shape)] * 2
    # the chain graph's finish = its compute (whole µs, as Chakra stores it) + exposed comm
    compute_ns = sum(n.duration_micros for n in graphs[0] if n.type == NodeType.COMP_NODE) * 1000
    assert result.finish_ns == [compute_ns + comm.exposed_comm_ns(shape)] * 2


def test_megatron_graph_shape():
    perf, comm, _ = _timer("RTXPRO6000", 2)
    graphs = step_graphs(perf, batch_shape([(512, 0)], [1000] * 8), 2, 1, comm)
    assert len(graphs) == 2
    colls = [n for n in graphs[0] if n.type == NodeType.COMM_COLL_NODE]
    assert len(colls) == 2 * MODEL.num_layers                       # after attention and MLP
    assert {n.get("comm_size") for n in colls} == {520 * MODEL.hidden_size * 2}
    assert all(n.data_deps == [n.id - 1] for n in graphs[0][1:])   # a dependency chain


def test_pcie_allreduce_far_above_nvlink_for_the_same_batch():
    shape = batch_shape([(512, 1024)], [2000] * 32)
    rtx = _timer("RTXPRO6000", 2)[2].time_shape(shape)
    b200 = _timer("B200", 2)[2].time_shape(shape)
    # 160 all-reduces of 544 tokens x 8192 x 2 B: 35.2 GB/s PCIe + 12.7 us vs 538.8 GB/s NVLink
    d = load_device("RTXPRO6000")
    assert rtx.comm_ns == 160 * (d.allreduce_ns(544 * 8192 * 2, 2) + 12700)
    assert rtx.comm_ns > 10 * b200.comm_ns
    assert rtx.comm_ns / rtx.total_ns > 0.15 and b200.comm_ns / b200.total_ns < 0.08


def test_pipeline_parallel_adds_send_recv():
    perf, comm, _ = _timer("RTXPRO6000", 2, pp=2)
    graphs = step_graphs(perf, batch_shape([], [500] * 4), 2, 2, comm)
    assert len(graphs) == 4
    assert any(n.type == NodeType.COMM_SEND_NODE for n in graphs[0])
    assert any(n.type == NodeType.COMM_RECV_NODE for n in graphs[2])
    res = comm.simulator_for(2000).run(graphs)
    assert res.finish_ns[2] > res.finish_ns[0]      # the second stage waits for the first


def _export(tmp_path, model, tp, pp, steps=2):
    cfg = tmp_path / "c.yaml"
    wl = tmp_path / "w.jsonl"
    wl.write_text("\n".join(json.dumps({"input_toks": 300 + 10 * i, "output_toks": 5, "arrival_time_ns": i * 1000})
                            for i in range(3)) + "\n")
    cfg.write_text(f"model: {model}\nhardware: RTXPRO6000\nparallelism: {{tp: {tp}, pp: {pp}}}\n"
                   f"workload: {{path: {wl}}}\n")
    out = tmp_path / "chk"
    res = subprocess.run([sys.executable, "-m", "program_layer.cli", "export-chakra", str(cfg), "--steps",
                          str(steps), "--out", str(out)], capture_output=True, text=True)
    return cfg, out, res


# 70B TP2 has a fitted collective model (residual table); 8B TP2's bundle has none; TP2 x PP2
# runs its all-reduces in sub-groups (upstream's fixed 10 ns endpoint delay).
@pytest.mark.parametrize("model,tp,pp", [("meta-llama/Llama-3.1-70B", 2, 1), ("meta-llama/Llama-3.1-8B", 2, 1),
                                         ("meta-llama/Llama-3.1-70B", 2, 2)])
def test_export_chakra_matches_our_cli(tmp_path, model, tp, pp):
    """expected.json is what the exported files give, and they are replayable upstream: no
    endpoint-delay below 1 ns (the device's 0 is exported as 1, and said so)."""
    _, out, res = _export(tmp_path, model, tp, pp)
    assert res.returncode == 0, res.stderr
    assert "exported as 1 ns" in res.stdout
    steps = sorted(out.iterdir())
    assert len(steps) == 2
    for d in steps:
        expected = json.loads((d / "expected.json").read_text())
        assert json.loads((d / "system.json").read_text())["endpoint-delay"] == 1
        assert len(read_workload(str(d / "step"))) == tp * pp
        res = subprocess.run([sys.executable, "-m", "astrasim", f"--workload-configuration={d}/step",
                              f"--system-configuration={d}/system.json",
                              f"--network-configuration={d}/network.yml",
                              f"--remote-memory-configuration={d}/remote_memory.json",
                              f"--comm-group-configuration={d}/comm_group.json"],
                             check=True, capture_output=True, text=True)
        lines = res.stdout.strip().splitlines()
        assert lines == [f"sys[{r}] finished, {expected['finish_ns'][str(r)]} cycles, exposed communication "
                         f"{expected['exposed_comm_ns'][str(r)]} cycles." for r in range(tp * pp)]


def test_export_chakra_refuses_one_gpu(tmp_path):
    """Upstream cannot replay a 1-NPU network: one clear error naming the key, exit 2."""
    cfg, out, res = _export(tmp_path, "meta-llama/Llama-3.1-8B", 1, 1)
    assert res.returncode == 2 and not out.exists()
    assert res.stderr.strip().splitlines() == [
        f"error: {cfg}:3, key 'parallelism.tp': export-chakra needs tp x pp >= 2: one GPU has no communication "
        "to simulate, and upstream ASTRA-Sim refuses a network of 1 NPU (npus_count (1) should be larger than 1)"]


def test_70b_tp2_runs_on_both_platforms(tmp_path):
    from program_layer.run import run_config
    wl = tmp_path / "w.jsonl"
    wl.write_text("\n".join(json.dumps({"input_toks": 1000, "output_toks": 20, "arrival_time_ns": i * 10**8})
                            for i in range(4)) + "\n")
    for hw in ("RTXPRO6000", "B200"):
        s = run_config({"model": MODEL.name, "hardware": hw, "parallelism": {"tp": 2},
                        "workload": {"path": str(wl)}}, tmp_path / hw, trace_steps=tmp_path / f"{hw}.csv")
        assert s["calls"] == 4
        rows = (tmp_path / f"{hw}.csv").read_text().splitlines()
        assert rows[0].split(",")[-2] == "exposed_comm_s" and len(rows) > 20


def test_generic_collectives_pay_the_devices_measured_fixed_cost():
    """Without a fitted model for the TP size, each all-reduce costs the device network's
    ring time plus the measured 12.7 us of a 4 KiB 2-GPU all-reduce."""
    d = load_device("RTXPRO6000")
    comm = GraphCommModel(MODEL, d, 2, 1)
    assert d.allreduce_ns(4096, 2) == 115
    assert comm.simulator_for(1).collective_time_ns("all_reduce", 4096, [0, 1]) == 12700 + 115


def test_fitted_regimes_follow_vllms_dispatch_by_message_size():
    """RTX PRO 6000 TP2: vLLM's custom all-reduce below 8 MiB, NCCL above, each
    latency + bytes / bandwidth on the system simulator (floors of the ring closed form)."""
    d = load_device("RTXPRO6000")
    small, large = Regime(0.0, 28.15, 8 << 20), Regime(174.5, 34.97)
    comm = GraphCommModel(MODEL, d, 2, 1, regimes=(small, large))
    M = d.memory_bandwidth_gbs

    def expect(r, size):
        from llmservingsim.hardware import fit_link_bandwidth_gbs
        bw = round(fit_link_bandwidth_gbs(r.bandwidth_gbs, M), 3)
        return ring_allreduce_ns(size, 2, bw, r.latency_us * 1000 / 4, 2, 0, M)
    for tokens in (4, 128, 511):                      # 8 KiB per token: custom all-reduce below 512
        size = tokens * 8192 * 2
        assert comm.simulator_for(tokens).collective_time_ns("all_reduce", size, [0, 1]) == expect(small, size)
    for tokens in (512, 2048):
        size = tokens * 8192 * 2
        t = comm.simulator_for(tokens).collective_time_ns("all_reduce", size, [0, 1])
        assert t == expect(large, size)
        assert abs(t - (174_500 + size / 34.97)) < 0.01 * t      # latency + S / busbw
    shape = batch_shape([], [1000] * 4)
    assert comm.exposed_comm_ns(shape) == 160 * expect(small, 4 * 8192 * 2)


def test_astrasim_errors_become_the_engines_own():
    """astrasim has its own error classes; at the engine's boundary each becomes the engine's
    error of the same name with the same message, so the CLI reports it in one line (exit 2)."""
    from llmservingsim.errors import ConfigError
    from llmservingsim.execution_graph import system_simulator
    dev = load_device("RTXPRO6000")
    bad = {"topology": ["Switch"], "npus_count": [2], "bandwidth": [-1.0], "latency": [0.0]}
    with pytest.raises(ConfigError) as e:
        system_simulator(dev, 2, 1, bad)
    assert type(e.value).__module__ == "llmservingsim.errors"
    assert str(e.value) == f"{dev.path}:network, key 'bandwidth': entries must be > 0, got -1.0"
