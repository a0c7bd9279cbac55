"""The tiny cells the search tests score policies on (real simulator, well under a second).

``data/tiny_cell.yaml``: Llama-3.1-8B on one RTX PRO 6000, 4 programs x 4 calls with a
24k-token context growing by 1k per call and 1 s tool gaps. Evict-always re-prefills the
whole context on every call; protecting it across the gap turns that into a prefix hit,
so a protecting candidate lowers mean JCT by about half (16.3 s -> 7.4 s).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

DATA = Path(__file__).resolve().parent / "data"


@dataclass(frozen=True)
class Cell:
    path: str
    second_path: str
    runner: Optional[str]          # None: the real program_layer.run.run_config
    import_line: str               # how a policy file imports RetentionPolicy
    timeout_probe_s: float         # wall-time limit for the timeout test


@pytest.fixture
def cell() -> Cell:
    return Cell(str(DATA / "tiny_cell.yaml"), str(DATA / "tiny_cell_2.yaml"), None,
                "from program_layer.policies import RetentionPolicy", 2.0)


@pytest.fixture(scope="session")
def seed_cache(tmp_path_factory) -> str:
    """One seed-JCT cache for the whole session: each seed runs once (keys cover the cell,
    the seed source and the simulator source, so sharing is safe)."""
    return str(tmp_path_factory.mktemp("seed-cache"))
