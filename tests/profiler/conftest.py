"""Shared by the profiler tests: run a small workload on a measured bundle."""
import json

import pytest


@pytest.fixture
def run_on_bundle(tmp_path):
    """``run(model_cfg, root, tp)``: ``agentservesim run`` of 2 bfcl programs on the RTX4090
    device with the bundles under ``root``; asserts exit 0 and returns summary.json."""
    from program_layer.cli import main

    def run(model_cfg, root, tp: int) -> dict:
        config = tmp_path / "cfg.yaml"
        config.write_text(f"model: {model_cfg}\nhardware: RTX4090\nparallelism: {{tp: {tp}}}\nprofiles: {root}\n"
                          "workload: {generator: bfcl, programs: 2, rate_jps: 1.0, seed: 0}\nseed: 0\n")
        assert main(["run", str(config), "--quiet", "--out", str(tmp_path / "out")]) == 0
        return json.loads((tmp_path / "out" / "summary.json").read_text())
    return run
