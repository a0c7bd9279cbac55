"""A run folder explains itself: its resolved config re-runs to byte-identical outputs, its
summary names the model, hardware, parallelism, placement, policies, bundle provenance and
where GPU time went; the derivation of a bundle and the cells listing."""
from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from llmservingsim.derive_bundle import derive
from llmservingsim.paths import examples_dir, profiles_dir
from llmservingsim.profiles import load_bundle
from program_layer.config import load_config
from program_layer.run import placement, policy_label, run_config

OUTPUTS = ("summary.json", "calls.csv", "programs.csv", "timeseries.csv", "config.yaml")


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "program_layer.cli", *args], capture_output=True, text=True, cwd=cwd)


def test_config_yaml_reruns_to_byte_identical_outputs(tmp_path):
    src = examples_dir() / "validation" / "RTXPRO6000-Llama-3.1-8B-sharegpt300-sps10.yaml"
    first = tmp_path / "first"
    assert _cli("run", str(src), "--out", str(first), "--quiet").returncode == 0
    cfg = yaml.safe_load((first / "config.yaml").read_text())
    assert Path(cfg["workload"]["path"]).is_absolute()            # paths resolved
    assert cfg["engine"]["max_num_seqs"] == 128 and cfg["engine"]["scheduling_policy"] == "fcfs"   # defaults filled
    copied = tmp_path / "elsewhere" / "config.yaml"                # from another folder, as another user would
    copied.parent.mkdir()
    shutil.copy(first / "config.yaml", copied)
    second = tmp_path / "second"
    assert _cli("run", str(copied), "--out", str(second), "--quiet", cwd=str(tmp_path)).returncode == 0
    for name in OUTPUTS:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_summary_states_what_ran_and_where_time_went(tmp_path):
    s = run_config(load_config(examples_dir() / "cells" / "b200-70b-tp2-bfcl-0.02jps.yaml")
                   | {"workload": {"generator": "bfcl", "programs": 3, "rate_jps": 0.5, "seed": 0}}, tmp_path,
                   trace_steps=tmp_path / "steps.csv")
    assert (s["model"], s["hardware"], s["parallelism"], s["instances"]) == \
        ("meta-llama/Llama-3.1-70B", "B200", {"tp": 2, "pp": 1}, 1)
    assert s["bundle"] == {"path": "B200/meta-llama/Llama-3.1-70B/bf16/tp2", "provenance": "derived from tp1"}
    assert s["placement"] == [{"instance": 0, "node": 0, "gpus": [0, 1]}]
    assert s["policies"] == {"retention": "ttl(tau_s=2.0)", "scheduling": "plas", "routing": "round-robin"}
    assert s["version"] and s["seed"] == 0
    shares = s["time_shares"]
    assert set(shares) == {"compute", "exposed_comm", "overhead"}
    assert abs(sum(shares.values()) - 1.0) < 1e-5 and shares["exposed_comm"] > 0
    # the per-step trace sums to the same split
    rows = list(csv.DictReader(open(tmp_path / "steps.csv")))
    parts = {k: sum(float(r[k]) for r in rows) for k in ("compute_s", "exposed_comm_s", "overhead_s")}
    busy = sum(parts.values())
    assert shares["compute"] == pytest.approx(parts["compute_s"] / busy, abs=1e-5)
    assert shares["exposed_comm"] == pytest.approx(parts["exposed_comm_s"] / busy, abs=1e-5)
    assert s["step_overhead"]["source"].startswith("framework fitted on the B200")


@pytest.mark.parametrize("config", sorted(p.name for p in (examples_dir() / "cells").glob("*.yaml"))[::5]
                         + ["../quickstart.yaml"])
def test_every_shipped_example_states_its_bundle_provenance(config):
    cfg = load_config(examples_dir() / "cells" / config)
    tp = cfg["parallelism"]["tp"]
    want = "derived from tp1" if cfg["hardware"] == "B200" and tp == 2 else "measured"
    assert load_bundle(cfg["hardware"], load_model_name(cfg), tp).provenance == want


def load_model_name(cfg):
    from llmservingsim.model_config import load_model
    return load_model(cfg["model"]).name


def test_placement_and_policy_labels():
    assert placement(3, 2, 4) == [{"instance": 0, "node": 0, "gpus": [0, 1]},
                                  {"instance": 1, "node": 0, "gpus": [2, 3]},
                                  {"instance": 2, "node": 1, "gpus": [0, 1]}]
    assert policy_label("examples/policies/x.py:Cls") == "x.py:Cls"
    assert policy_label({"name": "ttl", "tau_s": 2.0}) == "ttl(tau_s=2.0)"


def test_derive_bundle_shards_what_shards_and_says_so(tmp_path):
    src = profiles_dir() / "RTXPRO6000" / "meta-llama" / "Llama-3.1-70B" / "bf16"
    root = tmp_path / "profiles"
    dst = root / "RTXPRO6000" / "meta-llama" / "Llama-3.1-70B" / "bf16"
    shutil.copytree(src / "tp1", dst / "tp1")
    shutil.copytree(src / "tp2", dst / "tp2")
    shutil.copy(src / "meta.yaml", dst / "meta.yaml")
    out = derive("RTXPRO6000", "meta-llama/Llama-3.1-70B", 4, root=root)
    assert out == dst / "tp4" and "DERIVED" in (out / "PROVENANCE.md").read_text()

    def table(d, name):
        with open(d / name, newline="") as f:
            return [(r.get("layer", "attention"), float(r["time_us"])) for r in csv.DictReader(f)]
    t2, t4 = table(dst / "tp2", "dense.csv"), table(out, "dense.csv")   # nearest measured: tp2
    assert [layer for layer, _ in t2] == [layer for layer, _ in t4]
    for (layer, a), (_, b) in zip(t2, t4):
        if layer in ("layernorm", "final_layernorm", "embedding"):
            assert b == a                                      # replicated ops keep their time
        else:
            assert 0 < b < a                                   # sharded ops shrink, stay positive
    bundle = load_bundle("RTXPRO6000", "meta-llama/Llama-3.1-70B", 4, root=root)
    assert bundle.provenance == "derived from tp2"
    assert not (out / "step_overhead.csv").exists()


def test_cells_lists_every_shipped_cell():
    r = _cli("cells", "--paths")
    assert r.returncode == 0
    listed = {Path(line).name for line in r.stdout.split()}
    cells = {p.name for p in (examples_dir() / "cells").glob("*.yaml")}
    assert cells <= listed and "table1.yaml" in listed
    head = subprocess.run(f"{sys.executable} -m program_layer.cli cells | head -1", shell=True,
                          capture_output=True, text=True)
    assert head.returncode == 0 and "Traceback" not in head.stderr      # a closed pipe exits quietly
