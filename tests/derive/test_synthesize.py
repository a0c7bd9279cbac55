"""Datasheet synthesis (llmservingsim/device_efficiency.py, llmservingsim/synthesize_bundle.py,
docs/datasheet-synthesis.md): exact synthesized times from a known fit, the on-the-fly path of a
run on a device without any bundle (provenance strings, outputs equal to a run on the same
bundle written to disk), the shipped fit is what refitting the measured bundles gives, and bad
input is one error naming the file or key."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmservingsim.device_efficiency import (CLASSES, Efficiency, fit_efficiency, fit_yaml, load_fit,
                                             occupancy, shipped_fit)
from llmservingsim.errors import ConfigError, ProfileError
from llmservingsim.hardware import list_devices, load_device
from llmservingsim.model_config import load_model
from llmservingsim.op_cost import dense_work
from llmservingsim.paths import hardware_dir
from llmservingsim.synthesize_bundle import synthesize

REPO = Path(__file__).resolve().parents[2]
FIT = """classes:
  gemm: {bandwidth: 0.5, compute: 0.25, launch_us: 2.0}
  elementwise: {bandwidth: 0.5, compute: 0.5, launch_us: 1.0}
  attention_decode: {bandwidth: 0.5, compute: 0.5, launch_us: 3.0}
  attention_prefill: {bandwidth: 0.5, compute: 0.5, launch_us: 4.0}
  sampler: {bandwidth: 1.0, compute: 1.0, launch_us: 10.0}
"""


def _rows(path: Path) -> dict:
    lines = path.read_text().splitlines()
    return {tuple(line.split(",")[:-1]): line.split(",")[-1] for line in lines[1:]}


def test_synthesized_times_are_the_roofline_of_the_datasheet_by_hand(tmp_path):
    (tmp_path / "fit.yaml").write_text(FIT)
    out = synthesize(load_device("H100"), load_model("meta-llama/Llama-3.1-8B"), 1, tmp_path / "tp1",
                     fit=load_fit(tmp_path / "fit.yaml"))
    dense, att = _rows(out / "dense.csv"), _rows(out / "attention.csv")
    # H100: 3350 GB/s, 989.4 TFLOP/s. gemm at 0.5 / 0.25: 1,675,000 B/us and 247,350,000 FLOP/us.
    # qkv_proj at 1 token: width (32 + 2*8) * 128 = 6144; bytes 2*(4096 + 4096*6144 + 6144)
    # = 50,352,128 -> 30.0610 us; FLOPs 2*4096*6144 = 50,331,648 -> 0.2035 us; + launch 2.
    assert dense[("qkv_proj", "1")] == "32.0610"
    # at 4096 tokens: bytes 2*4096*(4096 + 6144 + 6144) = 134,217,728 -> 80.13 us; FLOPs
    # 2*4096*4096*6144 = 206,158,430,208 -> 833.4685 us (compute-bound); + 2.
    assert dense[("qkv_proj", "4096")] == "835.4685"
    # decode n=1 over 1024 KV: bytes 2*128*(2*32 + 2*8*1024 + 2*8) = 4,214,784 at 1,675,000 B/us
    # = 2.5163 us; FLOPs 4*128*32*1024 = 16,777,216 at 494,700,000 FLOP/us = 0.034; + launch 3.
    assert att[("0", "0", "1", "1024")] == "5.5163"
    # prefill chunk 16, no context: bytes 2*128*(2*32*16 + 2*8*16 + 2*8*16) = 393,216; one CTA per
    # 128-query tile and head: 32 CTAs on 132 SMs, occupancy 32/132 -> bytes 1,622,016 = 0.9684 us
    # (FLOPs 2,228,224 * 132/32 -> 0.019 us); + launch 4.
    assert att[("16", "0", "0", "0")] == "4.9684"
    # mixed: the prefill part plus the decode part's roofline, one launch: 4.9684 + 2.5163.
    assert att[("16", "0", "1", "1024")] == "7.4847"
    assert (out / "PROVENANCE.md").read_text().startswith("# SYNTHESIZED bundle: H100 meta-llama/Llama-3.1-8B")


def test_occupancy_counts_waves():
    assert occupancy(32, 132) == 32 / 132
    assert occupancy(132, 132) == 1.0
    assert occupancy(133, 132) == 133 / 264


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["A100", "H100", "L40S", "MI300X", "RTX4090"]),
       st.sampled_from(["qkv_proj", "o_proj", "gate_up_proj", "down_proj", "act_fn", "layernorm"]),
       st.integers(1, 32768), st.integers(1, 32768), st.sampled_from([1, 2, 4, 8]))
def test_synthesized_dense_times_are_positive_and_grow_with_tokens(hw, op, a, b, tp):
    fit, dev, model = load_fit(), load_device(hw), load_model("meta-llama/Llama-3.1-70B")
    c = "gemm" if op.endswith("proj") else "elementwise"
    roof = fit.for_class(c).roofline(dev)
    lo, hi = sorted((a, b))
    t_lo, t_hi = roof.time_us(dense_work(model, op, lo, tp)), roof.time_us(dense_work(model, op, hi, tp))
    assert 0 < t_lo <= t_hi
    # never faster than the datasheet roofline itself
    w = dense_work(model, op, lo, tp)
    assert t_lo >= max(w.bytes / (dev.memory_bandwidth_gbs * 1e3), w.flops / (dev.peak_bf16_tflops * 1e6))


def test_a_run_without_any_bundle_synthesizes_it_on_the_fly_and_says_so(tmp_path):
    """H100 has no bundle at all: the run synthesizes one, writes nothing into the profile tree,
    reports 'synthesized from datasheet on the fly', and gives the outputs of a run on the same
    bundle written to disk by `agentservesim profile synthesize` (provenance without 'on the fly')."""
    from program_layer.run import run_config
    root = tmp_path / "profiles"
    root.mkdir()
    cfg = {"model": "meta-llama/Llama-3.1-8B", "hardware": "H100", "parallelism": {"tp": 1},
           "workload": {"generator": "bfcl", "programs": 2, "rate_jps": 1.0, "seed": 0}}
    fly = run_config(dict(cfg, profiles=str(root)), tmp_path / "fly")
    assert list(root.iterdir()) == []
    assert fly["bundle"] == {"path": "H100/meta-llama/Llama-3.1-8B/bf16/tp1",
                             "provenance": "synthesized from datasheet on the fly"}
    disk_root = tmp_path / "disk_profiles"
    r = subprocess.run([sys.executable, "-m", "program_layer.cli", "profile", "synthesize", "--hardware", "H100",
                        "--model", "meta-llama/Llama-3.1-8B", "--tp", "1", "--out", str(disk_root)],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(disk_root / "H100" / "meta-llama" / "Llama-3.1-8B" / "bf16" / "tp1")
    disk = run_config(dict(cfg, profiles=str(disk_root)), tmp_path / "disk")
    assert disk["bundle"]["provenance"] == "synthesized from datasheet"
    for name in ("calls.csv", "programs.csv", "timeseries.csv"):
        assert (tmp_path / "fly" / name).read_bytes() == (tmp_path / "disk" / name).read_bytes(), name
    fly_s = json.loads((tmp_path / "fly" / "summary.json").read_text())
    disk_s = json.loads((tmp_path / "disk" / "summary.json").read_text())
    fly_s.pop("bundle"), disk_s.pop("bundle")
    assert fly_s == disk_s


@pytest.mark.parametrize("hw", ["H100", "H200", "A100", "MI300X"])
def test_70b_tp8_runs_out_of_the_box_on_a_synthesized_bundle(hw, tmp_path):
    from program_layer.run import run_config
    cfg = {"model": "meta-llama/Llama-3.1-70B", "hardware": hw, "parallelism": {"tp": 8},
           "workload": {"generator": "bfcl", "programs": 1, "rate_jps": 1.0, "seed": 0}}
    s = run_config(cfg, tmp_path / "out")
    assert s["bundle"] == {"path": f"{hw}/meta-llama/Llama-3.1-70B/bf16/tp8",
                           "provenance": "synthesized from datasheet on the fly"}


def test_a_measured_device_model_still_uses_its_measured_bundle(tmp_path):
    from program_layer.run import run_config
    cfg = {"model": "meta-llama/Llama-3.1-8B", "hardware": "B200", "parallelism": {"tp": 1},
           "workload": {"generator": "bfcl", "programs": 1, "rate_jps": 1.0, "seed": 0}}
    assert run_config(cfg, tmp_path / "out")["bundle"]["provenance"] == "measured"


def test_a_tp_the_heads_do_not_allow_names_the_config_key(tmp_path):
    from program_layer.run import run_config
    cfg = {"model": "meta-llama/Llama-3.1-8B", "hardware": "H100", "parallelism": {"tp": 3},
           "workload": {"generator": "bfcl", "programs": 1, "rate_jps": 1.0, "seed": 0}}
    with pytest.raises(ConfigError) as exc:
        run_config(cfg, tmp_path / "out")
    assert exc.value.key == "parallelism.tp" and "TP=3 does not divide them" in exc.value.message


def test_the_shipped_fit_is_the_fit_of_the_measured_bundles():
    """hardware/efficiency/datasheet_fit.yaml is regenerated: refitting gives the same text."""
    text = (hardware_dir() / "efficiency" / "datasheet_fit.yaml").read_text()
    assert fit_yaml(shipped_fit()) == text
    fit = load_fit()
    assert set(fit.classes) == set(CLASSES)
    assert all(0 < e.bandwidth <= 1 and 0 < e.compute <= 1 and e.launch_us >= 0 for e in fit.classes.values())
    # no derived bundle is fitted on (B200 70B tp2 carries a PROVENANCE.md)
    assert "B200 meta-llama/Llama-3.1-70B tp2" not in fit.fitted_on
    # the H100 op table is read, the A100 one (part not recorded) is a check only
    assert "H100 op table H100_vidur.csv" in fit.fitted_on
    assert not any(b.startswith("A100") for b in fit.fitted_on)


def test_fit_adjust_re_expresses_or_drops_rows_and_nothing_else():
    """``fit_efficiency(adjust=...)`` (benchmarks/synth_mechanisms.py): an adjust that returns
    every row unchanged gives the plain fit bit for bit; one that drops every decode-attention
    row removes that class and leaves every other class's terms as they were."""
    one = [("RTX4090", "meta-llama/Llama-3.1-8B", 1)]
    plain = fit_efficiency(one)
    same = fit_efficiency(one, adjust=lambda dev, model, tp, c, op, w, t: (w, t))
    assert same == plain
    no_attn = fit_efficiency(one, adjust=lambda dev, model, tp, c, op, w, t:
                             None if c == "attention_decode" else (w, t))
    assert "attention_decode" not in no_attn.classes
    assert no_attn.classes == {c: e for c, e in plain.classes.items() if c != "attention_decode"}
    # RTX 4090 FLOPs at its sustained clock (2655 of 2520 MHz): 0.9583 of the spec peak before it
    assert plain.classes["gemm"] == Efficiency(0.936, 0.9126, 7.319)


def test_the_gemm_bandwidth_of_a_device_is_its_memory_familys(tmp_path):
    """``gemm_bandwidth`` replaces the gemm class's bandwidth fraction on a device of that
    family, and only that term of that class; a family without a value keeps the pooled one."""
    (tmp_path / "fit.yaml").write_text(FIT + "gemm_bandwidth:\n  HBM: 0.25\n")
    fit = load_fit(tmp_path / "fit.yaml")
    h100, rtx = load_device("H100"), load_device("RTX4090")
    assert fit.for_device("gemm", h100) == Efficiency(0.25, 0.25, 2.0)
    assert fit.for_device("gemm", rtx) == Efficiency(0.5, 0.25, 2.0)
    assert fit.for_device("elementwise", h100) == fit.for_class("elementwise")
    # H100 qkv_proj at 1 token: 50,352,128 B at 0.25 x 3350 GB/s = 837,500 B/us -> 60.1219 us, + 2
    out = synthesize(h100, load_model("meta-llama/Llama-3.1-8B"), 1, tmp_path / "tp1", fit=fit)
    assert _rows(out / "dense.csv")[("qkv_proj", "1")] == "62.1219"


def test_the_family_bandwidth_is_the_fit_of_that_familys_rows_alone():
    """``gemm_bandwidth_by_family``: GEMM rows of an HBM device (H100) that stream at 0.8 of the
    datasheet and of a GDDR device (RTX 4090) at 0.9, both with a 4 us launch: each family gets
    its own fraction back (within the grid's resolution), and the pooled fit lies between."""
    from llmservingsim.device_efficiency import gemm_bandwidth_by_family
    from llmservingsim.op_cost import Work
    keys, works, times = [], [], []
    for dev, eta in (("H100", 0.8), ("RTX4090", 0.9)):
        for i, mb in enumerate((5, 20, 80, 320, 1280)):     # bytes at 1 GB/s (= us at the peak): memory-bound
            keys.append((dev, "m", 1, f"op{i}"))
            works.append(Work(mb * 1e3, 1e-3))
            times.append(4.0 + mb * 1e3 / (eta * 1e3))
    fams = gemm_bandwidth_by_family(keys, works, times)
    assert set(fams) == {"HBM", "GDDR"}
    assert fams["HBM"] == pytest.approx(0.8, abs=2e-3) and fams["GDDR"] == pytest.approx(0.9, abs=2e-3)


@pytest.mark.parametrize("body, key", [
    ("classes: {gemm: {bandwidth: 1.5, compute: 0.5, launch_us: 1}}\n", "classes.gemm"),
    (FIT + "gemm_bandwidth: {HBM: 1.5}\n", "gemm_bandwidth.HBM"),
    (FIT + "gemm_bandwidth: {DDR: 0.5}\n", "gemm_bandwidth.DDR"),
    (FIT + "gemm_bandwidth: [0.5]\n", "gemm_bandwidth"),
    (FIT + "elementwise_launch: {HBM: -1}\n", "elementwise_launch.HBM"),
    (FIT + "elementwise_launch: {DDR: 1}\n", "elementwise_launch.DDR"),
    (FIT + "elementwise_launch: 3\n", "elementwise_launch"),
    ("classes: {gemm: {bandwidth: 0.5, compute: 0.5}}\n", "classes.gemm"),
    ("classes: {gemm: {bandwidth: 0.5, compute: 0.5, launch_us: 1" + "0" * 400 + "}}\n", "classes.gemm"),  # beyond float
    ("classes: {tensor: {bandwidth: 0.5, compute: 0.5, launch_us: 1}}\n", "classes.tensor"),
    ("classes: {gemm: {bandwidth: 0.5, compute: 0.5, launch_us: 1}}\n", "classes"),   # others missing
    ("[1, 2]\n", "classes"),
])
def test_a_bad_fit_file_names_the_file_and_key(tmp_path, body, key):
    p = tmp_path / "fit.yaml"
    p.write_text(body)
    with pytest.raises(ProfileError) as exc:
        load_fit(p)
    assert exc.value.key == key and str(p) in str(exc.value)


def test_every_shipped_device_can_synthesize_the_8b(tmp_path):
    model = load_model("meta-llama/Llama-3.1-8B")
    for hw in list_devices():
        out = synthesize(load_device(hw), model, 1, tmp_path / hw / "tp1")
        times = [float(v) for v in _rows(out / "dense.csv").values()]
        assert min(times) > 0


def test_cli_bad_tp_is_one_line_exit_2(tmp_path):
    r = subprocess.run([sys.executable, "-m", "program_layer.cli", "profile", "synthesize", "--hardware", "H100",
                        "--model", "meta-llama/Llama-3.1-8B", "--tp", "3", "--out", str(tmp_path)],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "key '--tp'" in r.stderr and "TP=3 does not divide them" in r.stderr


def test_the_run_header_says_the_bundle_is_synthesized(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("hardware: MI300X\nmodel: meta-llama/Llama-3.1-8B\n"
                   "workload: {generator: bfcl, programs: 1, rate_jps: 1.0}\n")
    r = subprocess.run([sys.executable, "-m", "program_layer.cli", "run", str(cfg), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("c.yaml: meta-llama/Llama-3.1-8B on MI300X TP1")
    assert lines[0].endswith("; bundle synthesized from datasheet on the fly")
    assert "(synthesized from datasheet on the fly bundle; overhead: no measurement on this device" in r.stdout


def test_expert_parallel_on_a_synthesized_moe_bundle_times_experts_from_it(tmp_path):
    """No measured moe.csv exists for MI300X: expert parallelism times the MoE layers from the
    synthesized table (expert_parallel.moe_timer), with the moe class's roofline it was made with."""
    from llmservingsim.device_efficiency import load_fit
    from llmservingsim.expert_parallel import MoEParallel, moe_timer
    from llmservingsim.synthesize_bundle import load_synthesized
    from program_layer.run import run_config
    model, dev = load_model("Qwen/Qwen3-30B-A3B-Instruct-2507"), load_device("MI300X")
    bundle = load_synthesized(dev, model, 1, tmp_path / "MI300X" / "tp1")
    timer = moe_timer(model, dev, bundle, MoEParallel(2, 1, 2))
    assert timer.source_tp == 1 and timer.roof == load_fit().for_class("moe").roofline(dev)
    cfg = {"model": model.name, "hardware": "MI300X", "parallelism": {"tp": 1, "dp": 2, "ep": 2},
           "workload": {"generator": "bfcl", "programs": 1, "rate_jps": 1.0, "seed": 0}}
    assert run_config(cfg, tmp_path / "out")["bundle"]["provenance"] == "synthesized from datasheet on the fly"


def test_a_synthesis_prices_flops_at_the_sustained_clock():
    """A class's roofline takes the device's BF16 peak at its sustained clock
    (``Device.compute_tflops``), the bandwidth at the datasheet: on RTX 4090 (2655 of 2520 MHz)
    a compute fraction of 0.5 is 0.5 x 165.2 x 2655 / 2520 TFLOP/s; on B200 (no clocks) 0.5 x 2250."""
    e = Efficiency(0.5, 0.5, 1.0)
    r = e.roofline(load_device("RTX4090"))
    assert r.tflops == pytest.approx(0.5 * 165.2 * 2655 / 2520, rel=1e-12)
    assert r.bandwidth_gbs == 0.5 * 1008.0 and r.launch_us == 1.0
    assert e.roofline(load_device("B200")).tflops == 1125.0


def test_the_elementwise_launch_of_a_device_is_its_memory_familys(tmp_path):
    """``elementwise_launch`` replaces the elementwise class's fixed cost on a device of that
    family, and only that term of that class; a family without a value keeps the pooled one;
    the fit file round-trips through ``fit_yaml``."""
    (tmp_path / "fit.yaml").write_text(FIT + "elementwise_launch:\n  HBM: 3.5\n")
    fit = load_fit(tmp_path / "fit.yaml")
    h100, rtx = load_device("H100"), load_device("RTX4090")
    assert fit.for_device("elementwise", h100) == Efficiency(0.5, 0.5, 3.5)
    assert fit.for_device("elementwise", rtx) == Efficiency(0.5, 0.5, 1.0)
    assert fit.for_device("gemm", h100) == fit.for_class("gemm")
    # H100 layernorm at 1 token: 2 * (4 * 4096 + 4096) = 40,960 B at 0.5 x 3350 GB/s -> 0.02445 us
    # (FLOPs 20,480 at 0.5 x 989.4 TFLOP/s: 0.00004 us), + 3.5
    out = synthesize(h100, load_model("meta-llama/Llama-3.1-8B"), 1, tmp_path / "tp1", fit=fit)
    assert _rows(out / "dense.csv")[("layernorm", "1")] == "3.5245"
    (tmp_path / "again.yaml").write_text(fit_yaml(fit))
    assert load_fit(tmp_path / "again.yaml").elementwise_launch == {"HBM": 3.5}


def test_the_family_launch_is_the_launch_fit_of_that_familys_rows_alone():
    """``elementwise_launch_by_family``: launch-dominated rows of an HBM device (H100) at 3 us +
    their bytes at the datasheet and of a GDDR device (RTX 4090) at 2 us: each family gets its
    launch back (to the grid's resolution) with the pooled bandwidth and compute held."""
    from llmservingsim.device_efficiency import elementwise_launch_by_family
    from llmservingsim.op_cost import Work
    keys, works, times = [], [], []
    for dev, launch in (("H100", 3.0), ("RTX4090", 2.0)):
        for i, kb in enumerate((2, 8, 32, 128, 512)):     # bytes at 1 GB/s: 0.002-0.5 us at the peak
            keys.append((dev, "m", 1, f"op{i}"))
            works.append(Work(kb, 1e-6))
            times.append(launch + 2 * kb / 1e3)          # at half the datasheet bandwidth
    fams = elementwise_launch_by_family(keys, works, times, Efficiency(0.5, 0.5, 1.0))
    assert fams == {"HBM": pytest.approx(3.0, abs=1e-3), "GDDR": pytest.approx(2.0, abs=1e-3)}


@settings(max_examples=60, deadline=None)
@given(launch=st.floats(0.0, 20.0), kb=st.lists(st.floats(0.001, 1e4), min_size=1, max_size=8),
       eta=st.floats(0.05, 1.0))
def test_fit_launch_recovers_an_exact_launch_within_its_bounds(launch, kb, eta):
    """Times made as launch + bytes / (eta BW) exactly fit back to that launch (to 1e-3 of the
    smallest time) at the same eta; the result is always in [0, smallest time)."""
    from llmservingsim.op_cost import Work, fit_launch
    works = [Work(b * 1e3, 0.0) for b in kb]
    times = [launch + b / eta for b in kb]
    got = fit_launch(works, times, eta, 1.0)
    assert 0.0 <= got < min(times)
    assert got == pytest.approx(launch, abs=1e-3 * min(times) + 1e-9)
