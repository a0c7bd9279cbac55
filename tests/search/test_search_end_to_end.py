"""End to end: `agentservesim search` with OpenEvolve against a scripted local LLM.

Iteration 1's diff makes the seed (evict-always) protect KV across tool gaps, which lowers
mean JCT on a cell with cache reuse (fitness > 1); iteration 2's diff raises in the policy
(fitness 0, reason kept). No network beyond 127.0.0.1.
"""
from __future__ import annotations

import argparse
import csv

import pytest
from openevolve.config import Config

from llmservingsim.errors import SimError

from program_layer.search import cli

from search_cells import cell  # noqa: F401 (fixture)
from search_llm_server import ScriptedLLM

IMPROVE = '''I will keep the KV cache across the tool gap.
<<<<<<< SEARCH
        return "evict"
=======
        return ("protect", now + 60.0)
>>>>>>> REPLACE
'''

BREAK = '''Simplify arrival handling.
<<<<<<< SEARCH
    def on_turn_arrival(self, pcb, now):
        return "none"
=======
    def on_turn_arrival(self, pcb, now):
        raise RuntimeError("broken candidate")
>>>>>>> REPLACE
'''


def seed_file(tmp_path, c) -> str:
    path = tmp_path / "seed.py"
    path.write_text(f'''{c.import_line}


class EvictAll(RetentionPolicy):
    def on_turn_complete(self, pcb, request_id, now):
        return "evict"

    def on_turn_arrival(self, pcb, now):
        return "none"
''')
    return f"{path}:EvictAll"


def test_search_end_to_end(tmp_path, cell):
    out = tmp_path / "search"
    with ScriptedLLM([IMPROVE, BREAK]) as llm:
        llm_cfg = tmp_path / "llm.yaml"
        llm_cfg.write_text(f"api_base: {llm.api_base}\napi_key: test-key\ntemperature: 1.0\n"
                           "request_timeout_s: 30\nretries: 0\nmodels: [{name: scripted, weight: 1.0}]\n")
        parser = argparse.ArgumentParser()
        cli.add_arguments(parser)
        args = parser.parse_args([
            "--axis", "retention", "--cell", cell.path, "--seed-policy", seed_file(tmp_path, cell),
            "--iterations", "2", "--out", str(out), "--llm-config", str(llm_cfg),
            "--timeout", "60", "--memory-mb", "4096"] + (["--runner", cell.runner] if cell.runner else []))
        assert cli.main(args) == 0
        assert len(llm.requests) == 2
    for name in ("seed_policy.py", "evaluator.py", "openevolve_config.yaml", "best_policy.py",
                 "history.csv", "fitness_by_iteration.png"):
        assert (out / name).is_file(), name
    assert "# EVOLVE-BLOCK-START" in (out / "seed_policy.py").read_text()
    rows = list(csv.DictReader(open(out / "history.csv")))
    by_iter = {int(r["iteration"]): r for r in rows}
    assert by_iter[0]["candidate"] == "seed" and float(by_iter[0]["fitness"]) == 1.0
    assert by_iter[1]["status"] == "ok" and float(by_iter[1]["fitness"]) > 1.0
    assert float(by_iter[1]["mean_jct_s"]) < float(by_iter[0]["mean_jct_s"])
    assert by_iter[2]["status"] == "error" and float(by_iter[2]["fitness"]) == 0.0
    assert "broken candidate" in by_iter[2]["error"]
    best = (out / "best_policy.py").read_text()
    assert '("protect", now + 60.0)' in best and "broken candidate" not in best
    assert (out / "openevolve_config.yaml").read_text().count("test-key") == 0   # key not on disk
    saved = Config.from_yaml(out / "openevolve_config.yaml")     # re-runnable with openevolve-run
    assert saved.max_iterations == 2 and saved.database.num_islands == 2


def test_search_without_any_usable_reply_keeps_history_and_fails_in_one_line(tmp_path, cell):
    out = tmp_path / "search"
    with ScriptedLLM(["I have no diff for you."]) as llm:
        llm_cfg = tmp_path / "llm.yaml"
        llm_cfg.write_text(f"api_base: {llm.api_base}\napi_key: k\nretries: 0\nmodels: [{{name: m}}]\n")
        parser = argparse.ArgumentParser()
        cli.add_arguments(parser)
        args = parser.parse_args(["--axis", "retention", "--cell", cell.path, "--seed-policy", "evict-always",
                                  "--iterations", "1", "--out", str(out), "--llm-config", str(llm_cfg)])
        with pytest.raises(SimError, match="no candidate"):
            cli.main(args)
    rows = list(csv.DictReader(open(out / "history.csv")))
    assert [r["status"] for r in rows] == ["ok", "no_candidate"]
    assert "diff" in rows[1]["error"].lower()
    assert (out / "best_policy.py").read_text() == (out / "seed_policy.py").read_text()
