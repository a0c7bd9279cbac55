"""`agentservesim evaluate-policy` prints one JSON object; the axis follows from the base class."""
from __future__ import annotations

import argparse
import json

import pytest

from llmservingsim.errors import ConfigError
from program_layer.search import evaluate_cmd

from search_cells import cell, seed_cache  # noqa: F401 (fixtures)


def run(argv, capsys) -> dict:
    """One JSON object on stdout; exit status 0 when the policy was scored, 1 when it failed."""
    parser = argparse.ArgumentParser()
    evaluate_cmd.add_arguments(parser)
    rc = evaluate_cmd.main(parser.parse_args(argv))
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1
    result = json.loads(out[0])
    assert rc == (0 if result["status"] == "ok" else 1)
    return result


def write(tmp_path, cell, name, body, base="RetentionPolicy"):
    path = tmp_path / f"{name}.py"
    path.write_text(f"{cell.import_line}\n\n\nclass {name}({base}):\n{body}")
    return path


def common(cell, cache):
    return ["--cell", cell.path, "--seed-policy", "evict-always", "--timeout", "30",
            "--memory-mb", "2048", "--cache-dir", cache] + \
        (["--runner", cell.runner] if cell.runner else [])


def test_prints_one_json_object_with_the_documented_keys(tmp_path, cell, seed_cache, capsys):
    path = write(tmp_path, cell, "Keep", "    def on_turn_complete(self, pcb, request_id, now):\n"
                                          "        return ('protect', now + 30.0)\n")
    result = run([f"{path}:Keep"] + common(cell, seed_cache), capsys)
    for key in ("combined_score", "mean_jct_s", "seed_mean_jct_s", "p99_jct_s", "throughput",
                "status", "wall_s"):
        assert key in result, key
    assert result["status"] == "ok" and result["axis"] == "retention"
    assert result["combined_score"] > 1.0 and "error" not in result


def test_failed_policy_is_a_result_with_error(tmp_path, cell, seed_cache, capsys):
    path = write(tmp_path, cell, "Bad", "    def on_turn_complete(self, pcb, request_id, now):\n"
                                         "        return 'maybe'\n")
    result = run([str(path)] + common(cell, seed_cache), capsys)    # class found from the base
    assert result["status"] == "error" and result["combined_score"] == 0.0
    assert "PolicyError" in result["error"] and "'maybe'" in result["error"]


def test_axis_of_a_class_deriving_from_a_user_class_is_probed(tmp_path, cell, seed_cache, capsys):
    path = tmp_path / "two.py"
    path.write_text(f"{cell.import_line}\n\n\nclass Mid(RetentionPolicy):\n    pass\n\n\n"
                    "class Leaf(Mid):\n    def on_turn_complete(self, pcb, request_id, now):\n"
                    "        return 'release'\n")
    result = run([f"{path}:Leaf"] + common(cell, seed_cache), capsys)
    assert result["axis"] == "retention" and result["status"] == "ok"


def test_missing_cell_is_a_config_error(tmp_path, cell, seed_cache, capsys):
    parser = argparse.ArgumentParser()
    evaluate_cmd.add_arguments(parser)
    with pytest.raises(ConfigError, match="not found"):
        evaluate_cmd.main(parser.parse_args(["ttl", "--cell", str(tmp_path / "nope.yaml")]))
