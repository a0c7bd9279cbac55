"""Editing a file a cell references (workload, policy) makes the cell new on re-run."""
from __future__ import annotations

from program_layer.sweep.grid import cell_id


def test_cell_id_follows_referenced_file_contents(tmp_path):
    (tmp_path / "w.jsonl").write_text('{"input_toks": 1, "output_toks": 1, "arrival_time_ns": 0}\n')
    (tmp_path / "p.py").write_text("# v1\n")
    cfg = {"workload": {"path": "w.jsonl"}, "policies": {"retention": "p.py:P", "scheduling": "plas"}}
    plain = cell_id(cfg)
    first = cell_id(cfg, tmp_path)
    assert first != plain and cell_id(cfg, tmp_path) == first          # stable while unchanged
    (tmp_path / "p.py").write_text("# v2\n")
    second = cell_id(cfg, tmp_path)
    assert second != first
    (tmp_path / "w.jsonl").write_text('{"input_toks": 2, "output_toks": 1, "arrival_time_ns": 0}\n')
    assert cell_id(cfg, tmp_path) not in (first, second)


def test_configs_without_files_keep_their_plain_id(tmp_path):
    cfg = {"workload": {"generator": "swebench"}, "policies": {"retention": "ttl"}}
    assert cell_id(cfg, tmp_path) == cell_id(cfg)
