"""Evaluator: fitness, failure modes (each scores 0 with its reason) and the seed cache."""
from __future__ import annotations

import json
import textwrap

import pytest

from program_layer.search import evaluator as ev
from program_layer.search import sandbox

from search_cells import Cell, cell, seed_cache  # noqa: F401 (fixtures)


def policy_file(tmp_path, cell: Cell, name: str, complete: str, arrival: str = 'return "none"',
                extra: str = "") -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(f"""\
        {cell.import_line}
        {extra}

        class {name}(RetentionPolicy):
            def on_turn_complete(self, pcb, request_id, now):
                {complete}

            def on_turn_arrival(self, pcb, now):
                {arrival}
        """))
    return f"{path}:{name}"


def settings(tmp_path, c: Cell, cache: str | None = None, **kw) -> ev.EvalSettings:
    base = dict(cell=c.path, axis="retention", seed_policy="evict-always", timeout_s=60,
                memory_mb=2048, cache_dir=cache or str(tmp_path / "cache"),
                work_dir=str(tmp_path / "runs"), runner=c.runner)
    base.update(kw)
    return ev.EvalSettings(**base)


def test_protecting_beats_evict_always(tmp_path, cell, seed_cache):
    good = policy_file(tmp_path, cell, "Protect", 'return ("protect", now + 60.0)')
    result = ev.evaluate_policy(good, settings(tmp_path, cell, seed_cache))
    assert result["status"] == "ok", result
    assert result["combined_score"] > 1.0
    assert result["combined_score"] == pytest.approx(result["seed_mean_jct_s"] / result["mean_jct_s"])
    for key in ("p99_jct_s", "throughput", "wall_s"):
        assert result[key] > 0


@pytest.mark.parametrize("case, complete, extra, status, reason", [
    ("import_error", 'return "evict"', "import no_such_module_xyz", "error", "import of 'no_such_module_xyz' is not allowed"),
    ("syntax_error", 'return (', "", "error", "syntax error at line"),
    ("reflection", "return ('protect', now + len(().__class__.__mro__))", "", "error", "attribute '__"),
    ("escape", 'return "evict"', "import os", "error", "import of 'os' is not allowed"),
    ("raises", "return 1 / 0", "", "error", "ZeroDivisionError"),
    ("invalid", 'return "keep-forever"', "", "error", "keep-forever"),
    ("causal", "return ('protect', now + pcb.output_tokens)", "", "error", ""),
    ("timeout", "while True: pass", "", "timeout", "timeout"),
    ("memory", "return ('protect', now + len(bytearray(64 * 1024 ** 3)))", "", "error", "MemoryError"),
])
def test_failures_score_zero_with_reason(tmp_path, cell, case, complete, extra, status, reason, seed_cache):
    spec = policy_file(tmp_path, cell, "Broken", complete, extra=extra)
    s = settings(tmp_path, cell, seed_cache, timeout_s=cell.timeout_probe_s if case == "timeout" else 60)
    result = ev.evaluate_policy(spec, s)
    assert result["combined_score"] == 0.0
    assert result["status"] == status, result
    assert reason in result["error"]
    if case in ("import_error", "syntax_error", "reflection", "escape"):   # rejected before running
        assert result["error"].startswith("rejected before running")
    if case == "causal":   # past the causal boundary: PolicyError or AttributeError
        assert "PolicyError" in result["error"] or "AttributeError" in result["error"]


def test_no_policy_class_is_an_error(tmp_path, cell, seed_cache):
    path = tmp_path / "empty.py"
    path.write_text("x = 1\n")
    result = ev.evaluate_policy(str(path), settings(tmp_path, cell, seed_cache))
    assert result["status"] == "error" and result["combined_score"] == 0.0
    assert "RetentionPolicy" in result["error"]


def test_seed_runs_once_and_is_cached_on_disk(tmp_path, cell, monkeypatch):
    runs = []
    real = sandbox.run_policy

    def counting(policy, *a, **kw):
        runs.append(policy)
        return real(policy, *a, **kw)

    monkeypatch.setattr(ev.sandbox, "run_policy", counting)
    s = settings(tmp_path, cell)
    good = policy_file(tmp_path, cell, "Protect", 'return ("protect", now + 60.0)')
    first = ev.evaluate_policy(good, s)
    second = ev.evaluate_policy(good, s)
    assert (first["seed_cached"], second["seed_cached"]) == (False, True)
    assert runs.count("evict-always") == 1 and len(runs) == 3
    assert first["combined_score"] == second["combined_score"]
    cached = list((tmp_path / "cache").glob("seed-*.json"))
    assert len(cached) == 1
    assert json.loads(cached[0].read_text())["cells"][0]["mean_jct_s"] == first["seed_mean_jct_s"]


def test_cache_key_changes_with_seed_source_and_cell(tmp_path, cell):
    s = settings(tmp_path, cell)
    k1 = ev.seed_cache_key(s)
    assert ev.seed_cache_key(s) == k1
    assert ev.seed_cache_key(settings(tmp_path, cell, seed_policy="ttl")) != k1
    (tmp_path / "sub").mkdir()
    moved = tmp_path / "sub" / "cell.yaml"      # same content, other folder
    moved.write_text(open(cell.path).read())
    assert ev.seed_cache_key(settings(tmp_path, cell, cell=str(moved))) != k1
    edited = tmp_path / "sub" / "edited.yaml"
    edited.write_text(open(cell.path).read() + "seed: 1\n")
    assert ev.seed_cache_key(settings(tmp_path, cell, cell=str(edited))) != k1


def test_candidate_identical_to_seed_is_not_rerun(tmp_path, cell, monkeypatch):
    seed = policy_file(tmp_path, cell, "Seed", 'return "evict"')
    s = settings(tmp_path, cell, seed_policy=seed)
    ev.seed_baseline(s)
    monkeypatch.setattr(ev.sandbox, "run_policy", lambda *a, **k: pytest.fail("re-ran the seed"))
    result = ev.evaluate_policy(seed.rpartition(":")[0], s)
    assert result["status"] == "ok" and result["combined_score"] == 1.0


def test_second_cell_scores_mean_of_ratios(tmp_path, cell, seed_cache):
    good = policy_file(tmp_path, cell, "Protect", 'return ("protect", now + 60.0)')
    result = ev.evaluate_policy(good, settings(tmp_path, cell, seed_cache, second_cell=cell.second_path))
    assert result["status"] == "ok"
    assert result["combined_score"] == pytest.approx((result["jct_ratio"] + result["jct_ratio_2"]) / 2)
    assert result["mean_jct_s_2"] > 0


def test_openevolve_adapter_keeps_numbers_as_metrics_and_reasons_as_artifacts(tmp_path, cell, seed_cache):
    spec = policy_file(tmp_path, cell, "Broken", "return 1 / 0")
    out = ev.evaluate_for_openevolve(spec.rpartition(":")[0], settings(tmp_path, cell, seed_cache).to_dict())
    assert out.metrics["combined_score"] == 0.0
    assert all(isinstance(v, float) for v in out.metrics.values())
    assert out.artifacts["status"] == "error" and "ZeroDivisionError" in out.artifacts["error"]


def test_candidate_with_a_helper_policy_class_uses_the_seeds_class_name(tmp_path, cell, seed_cache):
    seed = policy_file(tmp_path, cell, "Seed", 'return "evict"')
    path = tmp_path / "cand.py"
    path.write_text(f"{cell.import_line}\n\n\nclass Helper(RetentionPolicy):\n    pass\n\n\n"
                    "class Seed(Helper):\n    def on_turn_complete(self, pcb, request_id, now):\n"
                    "        return ('protect', now + 60.0)\n")
    result = ev.evaluate_policy(str(path), settings(tmp_path, cell, seed_cache, seed_policy=seed))
    assert result["status"] == "ok" and result["combined_score"] > 1.0
