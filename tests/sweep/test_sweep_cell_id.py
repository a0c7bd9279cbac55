"""Cell ids: a short stable hash of the full config (canonical JSON)."""
from __future__ import annotations

import hashlib

from program_layer.sweep.grid import Axis, canonical_json, cell_id, expand

TABLE1_CELL = {"model": "meta-llama/Llama-3.1-70B", "hardware": "RTXPRO6000", "parallelism": {"tp": 2},
               "workload": {"generator": "swebench", "programs": 50, "rate_jps": 0.02, "seed": 0},
               "policies": {"retention": "cache-lru", "scheduling": "fcfs"}}


def test_cell_id_golden_values():
    # Golden: changing these breaks resuming every existing sweep folder.
    assert cell_id({}) == hashlib.sha256(b"{}").hexdigest()[:12] == "44136fa355b3"
    assert cell_id(TABLE1_CELL) == "e60c93f336a3"


def test_cell_id_ignores_key_order_but_not_values():
    reordered = dict(reversed(list(TABLE1_CELL.items())))
    reordered["workload"] = dict(reversed(list(TABLE1_CELL["workload"].items())))
    assert cell_id(reordered) == cell_id(TABLE1_CELL)
    changed = {**TABLE1_CELL, "workload": {**TABLE1_CELL["workload"], "rate_jps": 0.1}}
    assert cell_id(changed) != cell_id(TABLE1_CELL)
    assert canonical_json({"b": 1, "a": [1.5, "x"]}) == '{"a":[1.5,"x"],"b":1}'


def test_cell_id_independent_of_axis_order():
    base = {"model": "m"}
    a = Axis("policies.retention", ("ttl", "cache-lru"))
    b = Axis("policies.scheduling", ("fcfs", "plas"))
    ids_ab = {c.cell_id for c in expand(base, [a, b])}
    ids_ba = {c.cell_id for c in expand(base, [b, a])}
    assert ids_ab == ids_ba and len(ids_ab) == 4
