"""Tiny cells for the search tests: the real simulator when it is importable, else the fake."""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Cell:
    path: str
    second_path: str
    runner: Optional[str]          # None: the real program_layer.run.run_config
    import_line: str               # how a policy file imports RetentionPolicy
    timeout_probe_s: float         # wall-time limit for the timeout test


def real_simulator_available() -> bool:
    return all(importlib.util.find_spec(m) is not None
               for m in ("program_layer.run", "program_layer.policies"))


def fake_cell(tmp: Path) -> Cell:
    one = tmp / "fake_cell.yaml"
    one.write_text("fake: {programs: 4, calls: 5, gap_s: 1.0}\npolicies: {retention: evict-always}\n")
    two = tmp / "fake_cell_2.yaml"
    two.write_text("fake: {programs: 2, calls: 3, gap_s: 0.5}\npolicies: {retention: evict-always}\n")
    return Cell(str(one), str(two), f"{HERE / 'search_fake_sim.py'}:run_config",
                "from search_fake_policies import RetentionPolicy", 3.0)


@pytest.fixture
def cell(tmp_path, monkeypatch):
    """The tiny cell the evaluator tests score policies on (fake simulator for now)."""
    # Candidate processes import the fake policy bases from this folder.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    return fake_cell(tmp_path)
