"""``calibrate`` recovers known framework parameters from a run the simulator itself produced
(written in the real-run format), and its calibration file drives a config."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from llmservingsim.errors import ConfigError
from llmservingsim.overhead_model import Framework
from program_layer import outputs
from program_layer.calibrate import Evaluator, calibrate, objective, write_calibration
from program_layer.config import load_config
from program_layer.run import build_simulation
from program_layer.validate import load_real

TRUTH = Framework(step_us=800.0, prefill_us=4000.0, prefill_compute=0.0)


def _workload(path: Path, n: int = 60) -> None:
    import random
    rng = random.Random(7)
    t, lines = 0, []
    for _ in range(n):
        t += int(rng.expovariate(12.0) * 1e9)
        lines.append({"input_toks": rng.randint(100, 1800), "output_toks": rng.randint(20, 300), "arrival_time_ns": t})
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """A 'real' run made by the simulator with TRUTH, in requests.jsonl form (engine clock
    offset by 1000 s, as a real monotonic clock would be)."""
    d = tmp_path_factory.mktemp("syn")
    _workload(d / "w.jsonl")
    (d / "c.yaml").write_text("model: meta-llama/Llama-3.1-8B\nhardware: RTXPRO6000\n"
                              "engine: {max_num_seqs: 16, max_num_batched_tokens: 1024}\n"
                              "workload: {path: w.jsonl}\nseed: 1\n")
    cfg = load_config(d / "c.yaml")
    sim = build_simulation(cfg, framework=TRUTH)
    sim.run()
    (d / "real").mkdir()
    with open(d / "real" / "requests.jsonl", "w") as f:
        for r in outputs.call_rows(sim.cluster.finished_calls, sim.programs):
            f.write(json.dumps({"request_id": f"r{r['program_id']}", "input_toks": r["input_tokens"],
                                "output_toks": r["output_tokens"], "arrival_time": r["release_s"],
                                "queued_ts": r["queued_s"] + 1000.0, "scheduled_ts": r["scheduled_s"] + 1000.0,
                                "first_token_ts": r["first_token_s"] + 1000.0,
                                "last_token_ts": r["last_token_s"] + 1000.0}) + "\n")
    return d, cfg, load_real(d / "real")


def test_recovers_known_parameters_within_two_percent(synthetic):
    _, cfg, real = synthetic
    res = calibrate(cfg, real, Framework(), ("step_us", "prefill_us"), max_evals=120)
    assert abs(res.framework.step_us / TRUTH.step_us - 1) < 0.02
    assert abs(res.framework.prefill_us / TRUTH.prefill_us - 1) < 0.02
    assert all(abs(v["error_pct"]) < 0.5 for st in res.after.values() for v in st.values())
    assert objective(*Evaluator(cfg, real).evaluate(TRUTH)) < 1e-12     # the truth reproduces the run


def test_calibration_file_drives_a_config_and_is_checked(synthetic, tmp_path):
    d, cfg, real = synthetic
    res = calibrate(cfg, real, Framework(), ("prefill_us",), max_evals=30)
    cal = d / "cal.yaml"
    write_calibration(cal, res, cfg, real, str(d / "c.yaml"))
    doc = yaml.safe_load(cal.read_text())["calibration"]
    assert doc["applies_to"] == {"hardware": "RTXPRO6000", "model": "meta-llama/Llama-3.1-8B", "tp": 1, "pp": 1}
    assert doc["fitted"] == ["prefill_us"] and doc["fitted_on"]["requests"] == 60
    (d / "c2.yaml").write_text((d / "c.yaml").read_text() + "calibration: cal.yaml\n")
    sim = build_simulation(load_config(d / "c2.yaml"))
    assert sim.overhead.framework.prefill_us == pytest.approx(res.framework.prefill_us, abs=1e-6)
    assert sim.overhead.source == "calibration cal.yaml"
    (d / "c3.yaml").write_text((d / "c.yaml").read_text().replace("RTXPRO6000", "B200") + "calibration: cal.yaml\n")
    with pytest.raises(ConfigError, match="fitted for hardware='RTXPRO6000'"):
        build_simulation(load_config(d / "c3.yaml"))


def test_bad_parameter_names_are_one_error(synthetic):
    _, cfg, real = synthetic
    with pytest.raises(ConfigError, match="calibration parameters"):
        calibrate(cfg, real, Framework(), ("warp_factor",))


def test_cli_calibrate_then_validate_within_tolerance(synthetic, tmp_path):
    d, _, _ = synthetic
    run = lambda *a: subprocess.run([sys.executable, "-m", "program_layer.cli", *a], capture_output=True, text=True)
    r = run("calibrate", str(d / "real"), "--config", str(d / "c.yaml"), "--out", str(tmp_path / "cal.yaml"),
            "--params", "prefill_us", "--max-evals", "20")
    assert r.returncode == 0, r.stderr
    assert "after (prefill_us = " in r.stdout and (tmp_path / "cal.yaml").is_file()
    r = run("calibrate", str(d / "real"), "--config", str(d / "c.yaml"), "--out", str(tmp_path), "--params", "x")
    assert r.returncode == 2 and r.stderr.count("\n") == 1


@pytest.mark.parametrize("content,message", [
    (None, "cannot read the calibration file"),
    ("calibration:\n  applies_to: {hardware: RTXPRO6000}\n  framework: {step_us: fast}\n",
     "key 'calibration.framework.step_us': expected a finite number"),
    ("hello: 1\n", "not a calibration file"),
    (b"\xff\xfe", "cal.yaml:1: cannot read the calibration file: not UTF-8 text (byte 0xff at column 1)"),
])
def test_bad_calibration_files_are_one_line_exit_2(synthetic, tmp_path, content, message):
    d, _, _ = synthetic
    cal = tmp_path / "cal.yaml"
    if isinstance(content, bytes):
        cal.write_bytes(content)
    elif content is not None:
        cal.write_text(content)
    cfg = tmp_path / "c.yaml"
    cfg.write_text((d / "c.yaml").read_text().replace("w.jsonl", str(d / "w.jsonl")) + f"calibration: {cal.name}\n")
    r = subprocess.run([sys.executable, "-m", "program_layer.cli", "run", str(cfg), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and message in r.stderr, r.stderr
