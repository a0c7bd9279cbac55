"""The shipped sweep specs parse, expand and pass the simulator's config validation."""
from __future__ import annotations

from pathlib import Path

import pytest

from program_layer.sweep.spec import load_spec
from program_layer.sweep.sweep import validate_cells

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "sweeps"


def test_table1_spec_is_the_papers_grid():
    spec = load_spec(EXAMPLES / "table1.yaml")
    cells = spec.cells()
    validate_cells(spec, cells)
    assert [tuple(c.values.values()) for c in cells] == [
        ("cache-lru", "fcfs"), ("cache-lru", "plas"), ("ttl", "fcfs"), ("ttl", "plas"),
        ("pressure-ttl", "fcfs"), ("pressure-ttl", "plas")]
    assert cells[0].config == {"model": "meta-llama/Llama-3.1-70B", "hardware": "RTXPRO6000",
                               "parallelism": {"tp": 2},
                               "workload": {"generator": "swebench", "programs": 50, "rate_jps": 0.02, "seed": 0},
                               "policies": {"retention": "cache-lru", "scheduling": "fcfs"}}
    assert cells[0].cell_id == "e60c93f336a3"
    assert spec.baseline == {"policies.retention": "cache-lru", "policies.scheduling": "fcfs"}


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_spec_validates(path):
    spec = load_spec(path)
    validate_cells(spec, spec.cells())
