"""OpenEvolve config (Appendix F defaults, LLM config, key handling) and history rows/plot."""
from __future__ import annotations

import json

import pytest
import yaml
from openevolve.config import Config

from llmservingsim.errors import ConfigError
from program_layer.search import history, oe_config


def build(llm, **kw):
    args = dict(axis="scheduling", base_name="SchedulingPolicy", cell="/x/target_cell.yaml",
                iterations=50, llm=llm, eval_timeout_s=5400, trace_path="/tmp/t.jsonl")
    args.update(kw)
    return oe_config.build_config(**args)


def test_appendix_f_defaults_reach_openevolve(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    cfg = Config.from_dict(build(oe_config.load_llm_config(None)))
    db = cfg.database
    assert (db.num_islands, db.population_size, db.migration_interval) == (2, 40, 10)
    assert (db.elite_selection_ratio, db.exploration_ratio, db.exploitation_ratio) == (0.2, 0.3, 0.6)
    assert cfg.diff_based_evolution and cfg.full_rewrite_probability == 0.0
    assert (cfg.prompt.num_top_programs, cfg.prompt.num_diverse_programs) == (3, 2)
    assert [(m.name, m.weight, m.temperature) for m in cfg.llm.models] == [
        ("qwen3.7-plus", 0.7, 1.0), ("claude-sonnet-5", 0.3, 1.0)]
    assert cfg.evaluator.timeout == 5400 + 60 and not cfg.evaluator.cascade_evaluation
    assert "SchedulingPolicy" in cfg.prompt.system_message
    assert cfg.evolution_trace.enabled and cfg.evolution_trace.include_failures


def test_llm_config_file_and_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://gateway:9/v1")
    llm = oe_config.load_llm_config(None)
    assert (llm["api_base"], llm["api_key"]) == ("http://gateway:9/v1", "sk-env")
    path = tmp_path / "llm.yaml"
    path.write_text("api_base: http://local:8000/v1\ntemperature: 0.5\nmodels: [{name: a, weight: 2}]\n")
    llm = oe_config.load_llm_config(path)
    cfg = build(llm)
    assert cfg["llm"]["api_base"] == "http://local:8000/v1" and cfg["llm"]["api_key"] == "sk-env"
    assert cfg["llm"]["models"] == [{"name": "a", "weight": 2.0}] and cfg["llm"]["temperature"] == 0.5
    on_disk = yaml.safe_load(oe_config.dump_yaml(oe_config.redacted(cfg, key_from_env=True)))
    assert on_disk["llm"]["api_key"] == "${OPENAI_API_KEY}"        # OpenEvolve expands it
    assert on_disk["prompt"]["system_message"] == cfg["prompt"]["system_message"]


def test_literal_key_is_never_written(tmp_path):
    path = tmp_path / "llm.yaml"
    path.write_text("api_key: sk-secret\n")
    llm = oe_config.load_llm_config(path)
    text = oe_config.dump_yaml(oe_config.redacted(build(llm), key_from_env=llm["api_key_from_env"]))
    assert "sk-secret" not in text


def test_unknown_llm_key_names_file_and_key(tmp_path):
    path = tmp_path / "llm.yaml"
    path.write_text("model: gpt\n")
    with pytest.raises(ConfigError, match="key 'model'") as err:
        oe_config.load_llm_config(path)
    assert str(path) in str(err.value)


def test_history_rows_from_trace_and_failures(tmp_path):
    trace = tmp_path / "evolution_trace.jsonl"
    trace.write_text("\n".join(json.dumps(e) for e in [
        {"iteration": 2, "child_id": "b", "child_metrics": {"combined_score": 0.0},
         "artifacts": {"status": "timeout", "error": "timeout: run exceeded 5 s"}},
        {"iteration": 1, "child_id": "a", "child_metrics": {"combined_score": 1.2, "mean_jct_s": 5.0},
         "artifacts": {"status": "ok"}},
    ]) + "\n")
    history.failures_path(trace).write_text(json.dumps({"iteration": 3, "error": "No valid diffs"}) + "\n")
    seed = {"iteration": 0, "candidate": "seed", "fitness": 1.0, "mean_jct_s": 6.0, "status": "ok", "error": ""}
    rows = history.collect_rows(trace, seed)
    assert [(r["iteration"], r["status"], r["fitness"]) for r in rows] == [
        (0, "ok", 1.0), (1, "ok", 1.2), (2, "timeout", 0.0), (3, "no_candidate", None)]
    assert history.best_by_iteration(rows) == ([0, 1, 2, 3], [1.0, 1.2, 1.2, 1.2])
    history.write_csv(rows, tmp_path / "h.csv")
    lines = (tmp_path / "h.csv").read_text().splitlines()
    assert lines[0] == "iteration,candidate,fitness,mean_jct_s,status,error"
    assert lines[4] == "3,,,,no_candidate,No valid diffs"
    history.plot(rows, tmp_path / "p.png", title="t")
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
