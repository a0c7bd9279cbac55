"""Deriving a TP bundle (llmservingsim/derive_bundle.py): the shipped RTX PRO 6000 Llama-3.1-8B
TP2 derived from its measured TP1 stays as close to the measured TP2 as it was measured to be
(benchmarks/derive_tp_check.py, docs/derived-bundles.md); the derivation is byte-identical run
to run, never replaces a measured bundle, and bad input is one line and exit 2."""
from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import pytest

from benchmarks.derive_tp_check import op_errors, step_errors
from llmservingsim.derive_bundle import derive
from llmservingsim.errors import ProfileError
from llmservingsim.model_config import load_model
from llmservingsim.paths import profiles_dir

HW, MODEL = "RTXPRO6000", "meta-llama/Llama-3.1-8B"


@pytest.fixture(scope="module")
def derived_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("profiles")
    src = profiles_dir() / HW / MODEL / "bf16"
    dst = root / HW / MODEL / "bf16"
    shutil.copytree(src / "tp1", dst / "tp1")
    shutil.copy(src / "meta.yaml", dst / "meta.yaml")
    derive(HW, MODEL, 2, root=root)
    return root


def test_derived_tp2_matches_measured_tp2_as_measured(derived_root):
    # docs/derived-bundles.md: steps median 1.37 %, p90 3.55 %; GEMM medians 0.8-9.5 %
    steps = step_errors(load_model(MODEL), derived_root, HW, MODEL, 2)
    assert len(steps) == 70
    assert np.median(steps) == pytest.approx(0.01366, abs=0.0002)
    assert np.percentile(steps, 90) == pytest.approx(0.03552, abs=0.0002)
    ops = op_errors(derived_root / HW / MODEL / "bf16" / "tp2", profiles_dir() / HW / MODEL / "bf16" / "tp2")
    assert np.median(ops["gate_up_proj"]) == pytest.approx(0.029, abs=0.001)
    assert np.median(ops["lm_head"]) == pytest.approx(0.008, abs=0.001)
    assert np.median(ops["layernorm"]) == 0.0          # unsharded: copied, and measured equal


def test_derivation_is_byte_identical_and_says_where_from(derived_root, tmp_path):
    src = profiles_dir() / HW / MODEL / "bf16"
    dst = tmp_path / HW / MODEL / "bf16"
    shutil.copytree(src / "tp1", dst / "tp1")
    shutil.copy(src / "meta.yaml", dst / "meta.yaml")
    out = derive(HW, MODEL, 2, root=tmp_path)
    first = derived_root / HW / MODEL / "bf16" / "tp2"
    for name in ("dense.csv", "per_sequence.csv", "attention.csv", "skew_fit.csv", "PROVENANCE.md"):
        assert (out / name).read_bytes() == (first / name).read_bytes()
    assert "Generated from ../tp1" in (out / "PROVENANCE.md").read_text()


def _shipped_derived() -> list[tuple[str, str, int, int]]:
    """(device, model, tp, source tp) of every derived folder in the profile tree."""
    import re
    out = []
    for note in sorted(profiles_dir().glob("*/*/*/bf16/tp*/PROVENANCE.md")):
        m = re.search(r"Generated from \.\./tp(\d+)", note.read_text(encoding="utf-8"))
        if m:
            tp_dir = note.parent
            rel = tp_dir.relative_to(profiles_dir()).parts
            out.append((rel[0], f"{rel[1]}/{rel[2]}", int(tp_dir.name[2:]), int(m.group(1))))
    return out


def test_the_shipped_b200_70b_tp2_is_a_derived_bundle():
    assert _shipped_derived() == [("B200", "meta-llama/Llama-3.1-70B", 2, 1)]


@pytest.mark.parametrize("hw, model, tp, src_tp", _shipped_derived(), ids=lambda v: str(v))
def test_every_shipped_derived_bundle_is_todays_derivation(tmp_path, hw, model, tp, src_tp):
    """A derived folder checked into profiles/ is byte for byte what derive_bundle writes now
    (docs/derived-bundles.md: the B200 70B tp2 went stale once, when the derivation changed
    and the folder did not; regenerate with the command in its PROVENANCE.md)."""
    src = profiles_dir() / hw / model / "bf16"
    dst = tmp_path / hw / model / "bf16"
    shutil.copytree(src / f"tp{src_tp}", dst / f"tp{src_tp}")
    shutil.copy(src / "meta.yaml", dst / "meta.yaml")
    out = derive(hw, model, tp, root=tmp_path)
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in (src / f"tp{tp}").iterdir())
    for p in out.iterdir():
        assert p.read_bytes() == (src / f"tp{tp}" / p.name).read_bytes(), p.name


def test_a_measured_bundle_is_never_replaced(tmp_path):
    src = profiles_dir() / HW / MODEL / "bf16"
    dst = tmp_path / HW / MODEL / "bf16"
    shutil.copytree(src / "tp1", dst / "tp1")
    shutil.copytree(src / "tp2", dst / "tp2")
    with pytest.raises(ProfileError, match="tp2 is measured"):
        derive(HW, MODEL, 2, root=tmp_path)


@pytest.mark.parametrize("args, says", [
    (["RTXPRO6000", "no/such-model", "--tp", "2"], "unknown model"),
    (["RTXPRO6000", "meta-llama/Llama-3.1-8B", "--tp", "3"], "does not divide"),
    (["NoSuchGPU", "meta-llama/Llama-3.1-8B", "--tp", "4"], "unknown device"),
])
def test_cli_bad_input_is_one_line_exit_2(args, says, tmp_path):
    r = subprocess.run([sys.executable, "-m", "llmservingsim.derive_bundle", *args, "--profiles", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert says in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_run_at_an_unprofiled_tp_derives_its_bundle_on_the_fly(tmp_path, derived_root):
    """No tp2 folder, a measured tp1: the run derives tp2 itself, says so, writes nothing into
    the profile tree, and gives exactly the outputs of a run on the same bundle derived on disk."""
    import json

    from program_layer.run import run_config
    root = tmp_path / "profiles"
    src = profiles_dir() / HW / MODEL / "bf16"
    shutil.copytree(src / "tp1", root / HW / MODEL / "bf16" / "tp1")
    shutil.copy(src / "meta.yaml", root / HW / MODEL / "bf16" / "meta.yaml")
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    cfg = {"model": MODEL, "hardware": HW, "parallelism": {"tp": 2},
           "workload": {"generator": "swebench", "programs": 2, "rate_jps": 0.1, "seed": 0}}
    fly = run_config(dict(cfg, profiles=str(root)), tmp_path / "fly")
    disk = run_config(dict(cfg, profiles=str(derived_root)), tmp_path / "disk")
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before
    assert fly["bundle"] == {"path": f"{HW}/{MODEL}/bf16/tp2", "provenance": "derived from tp1 on the fly"}
    assert disk["bundle"]["provenance"] == "derived from tp1"
    for name in ("calls.csv", "programs.csv", "timeseries.csv"):
        assert (tmp_path / "fly" / name).read_bytes() == (tmp_path / "disk" / name).read_bytes(), name
    fly_s = json.loads((tmp_path / "fly" / "summary.json").read_text())
    disk_s = json.loads((tmp_path / "disk" / "summary.json").read_text())
    fly_s.pop("bundle"), disk_s.pop("bundle")
    assert fly_s == disk_s


def test_a_tp_the_model_cannot_take_names_the_config_key(tmp_path):
    from llmservingsim.errors import ConfigError
    from program_layer.run import run_config
    cfg = {"model": "meta-llama/Llama-3.1-70B", "hardware": "B200", "parallelism": {"tp": 3},
           "workload": {"generator": "swebench", "programs": 1, "rate_jps": 0.1, "seed": 0}}
    with pytest.raises(ConfigError) as exc:
        run_config(cfg, tmp_path / "out")
    assert exc.value.key == "parallelism.tp" and "TP=3 does not divide them" in exc.value.message
