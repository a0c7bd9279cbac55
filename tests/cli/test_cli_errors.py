"""Bad input stops `agentservesim run` with one clear line naming the file, line or key, and
exit status 2 (issue 2 acceptance); the default run prints a readable summary."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "program_layer.cli", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=120)


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def check_error(res, *fragments):
    assert res.returncode == 2, res.stdout + res.stderr
    err = res.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    for f in fragments:
        assert f in err, (f, err)


def test_unknown_config_key_names_file_line_and_key(tmp_path):
    wl = write(tmp_path / "w.jsonl", json.dumps({"input_toks": 10, "output_toks": 2, "arrival_time_ns": 0}) + "\n")
    cfg = write(tmp_path / "c.yaml", f"workload: {{path: {wl}}}\nengine:\n  max_num_seqz: 4\n")
    check_error(run_cli("run", cfg, "--out", str(tmp_path / "o")), f"{cfg}:3", "engine.max_num_seqz", "unknown key")


def test_wrong_type_names_the_key(tmp_path):
    cfg = write(tmp_path / "c.yaml", "workload: {generator: swebench}\nparallelism: {tp: two}\n")
    check_error(run_cli("run", cfg, "--out", str(tmp_path / "o")), "parallelism.tp", "expected int")


def test_empty_workload_file(tmp_path):
    wl = write(tmp_path / "w.jsonl", "")
    cfg = write(tmp_path / "c.yaml", f"workload: {{path: {wl}}}\n")
    check_error(run_cli("run", cfg, "--out", str(tmp_path / "o")), wl, "empty")


def test_malformed_line_names_file_and_line(tmp_path):
    ok = json.dumps({"input_toks": 10, "output_toks": 2, "arrival_time_ns": 0})
    wl = write(tmp_path / "w.jsonl", ok + "\n" + ok + "\n{\"input_toks\": 5,\n")
    cfg = write(tmp_path / "c.yaml", f"workload: {{path: {wl}}}\n")
    check_error(run_cli("run", cfg, "--out", str(tmp_path / "o")), f"{wl}:3")


def test_missing_field_names_the_field(tmp_path):
    wl = write(tmp_path / "w.jsonl", json.dumps({"input_toks": 10, "arrival_time_ns": 0}) + "\n")
    cfg = write(tmp_path / "c.yaml", f"workload: {{path: {wl}}}\n")
    check_error(run_cli("run", cfg, "--out", str(tmp_path / "o")), f"{wl}:1", "output_toks")


def test_a_model_without_any_bundle_is_synthesized_and_then_must_fit_in_memory(tmp_path):
    """No bundle of the model on the device at any TP: the run synthesizes one from the
    datasheet (tests/derive/test_synthesize.py), and here the memory plan refuses it: 70B
    weights over two 24 GB RTX 4090s leave no KV cache (65.74 GiB of weights per GPU)."""
    wl = write(tmp_path / "w.jsonl", json.dumps({"input_toks": 10, "output_toks": 2, "arrival_time_ns": 0}) + "\n")
    cfg = write(tmp_path / "c.yaml", f"hardware: RTX4090\nmodel: meta-llama/Llama-3.1-70B\nparallelism: {{tp: 2}}\n"
                                     f"workload: {{path: {wl}}}\n")
    check_error(run_cli("run", cfg, "--out", str(tmp_path / "o")), "engine.gpu_memory_utilization",
                "weights 65.74 GiB")


def test_missing_profile_root_names_the_expected_path(tmp_path):
    wl = write(tmp_path / "w.jsonl", json.dumps({"input_toks": 10, "output_toks": 2, "arrival_time_ns": 0}) + "\n")
    cfg = write(tmp_path / "c.yaml", f"workload: {{path: {wl}}}\n")
    check_error(run_cli("run", cfg, "--out", str(tmp_path / "o"), "--profiles", str(tmp_path / "nope")),
                str(tmp_path / "nope" / "RTXPRO6000" / "meta-llama" / "Llama-3.1-8B" / "bf16" / "tp1"))


def test_a_call_that_can_never_fit_the_pool(tmp_path):
    wl = write(tmp_path / "w.jsonl", json.dumps({"input_toks": 5000, "output_toks": 10, "arrival_time_ns": 0}) + "\n")
    cfg = write(tmp_path / "c.yaml", f"workload: {{path: {wl}}}\nengine: {{kv_pool_tokens: 1000}}\n")
    check_error(run_cli("run", cfg, "--out", str(tmp_path / "o")), f"{wl}:1", "never run")


def test_unknown_policy_lists_the_valid_names(tmp_path):
    cfg = write(tmp_path / "c.yaml", "workload: {generator: bfcl, programs: 2, rate_jps: 1.0}\n"
                                     "policies: {retention: keep-forever}\n")
    check_error(run_cli("run", cfg, "--out", str(tmp_path / "o")), "policies.retention", "ttl")


def test_default_run_prints_a_summary(tmp_path):
    res = run_cli("run", "--out", str(tmp_path / "o"))
    assert res.returncode == 0, res.stderr
    assert "JCT" in res.stdout and "TTFT" in res.stdout and "programs 10" in res.stdout
    for name in ("summary.json", "calls.csv", "programs.csv", "timeseries.csv"):
        assert (tmp_path / "o" / name).exists()


def test_out_that_is_a_file_stops_before_simulating(tmp_path):
    target = tmp_path / "afile"
    target.write_text("x")
    check_error(run_cli("run", "--out", str(target)), "--out", "not a folder")


def test_tp_larger_than_a_node(tmp_path):
    cfg = write(tmp_path / "c.yaml", "hardware: B200\nparallelism: {tp: 16}\nworkload: {generator: bfcl, programs: 1}\n")
    check_error(run_cli("run", cfg, "--out", str(tmp_path / "o")), f"{cfg}:2", "parallelism.tp", "has 8")


def test_model_typo_names_file_and_line(tmp_path):
    cfg = write(tmp_path / "c.yaml", "workload: {generator: bfcl, programs: 1}\nmodel: meta-llama/Llama3.1-8B\n")
    check_error(run_cli("run", cfg, "--out", str(tmp_path / "o")), f"{cfg}:2", "unknown model", "registry")


def test_validate_refuses_a_config_of_another_workload(tmp_path):
    real = Path(__file__).resolve().parents[2] / "examples" / "validation" / "RTXPRO6000-Llama-3.1-8B-sharegpt300-sps10"
    cfg = write(tmp_path / "c.yaml", "workload: {generator: bfcl, programs: 3, rate_jps: 1.0}\n")
    check_error(run_cli("validate", str(real), "--config", cfg, "--out", str(tmp_path / "o")),
                "does not simulate this run's workload", "300 real requests vs")


def test_seed_option_reseeds_the_generator(tmp_path):
    cfg = write(tmp_path / "c.yaml", "workload: {generator: bfcl, programs: 3, rate_jps: 1.0, seed: 0}\n")
    for seed in ("1", "2"):
        assert run_cli("run", cfg, "--out", str(tmp_path / seed), "--seed", seed, "--quiet").returncode == 0
    assert (tmp_path / "1" / "calls.csv").read_bytes() != (tmp_path / "2" / "calls.csv").read_bytes()
    assert json.loads((tmp_path / "2" / "summary.json").read_text())["seed"] == 2


@pytest.mark.parametrize("trace, fmt", [("mooncake_conversation_trace.jsonl", "mooncake"),
                                        ("azure_code_2023.csv", "azure"),
                                        ("tracelab_example_round_trace.jsonl", "tracelab")])
def test_raw_trace_as_workload_path_says_how_to_use_it(tmp_path, trace, fmt):
    path = Path(__file__).resolve().parents[2] / "examples" / "traces" / trace
    cfg = write(tmp_path / "c.yaml", f"workload: {{path: {path}}}\n")
    check_error(run_cli("run", cfg, "--out", str(tmp_path / "o")), f"workload.trace: {fmt}",
                f"workload import --format {fmt}")
