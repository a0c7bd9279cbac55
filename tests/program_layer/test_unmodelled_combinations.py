"""Combinations of cluster features that are not modelled are one clear ConfigError naming
the key (not a silent approximation): pipeline x data parallelism, KV tiers with pipeline or
data parallelism or with a list of instances, and a list of instances with a ``cluster``
description, data parallelism or an instance larger than a node."""
from __future__ import annotations

import json

import pytest

from llmservingsim.errors import ConfigError
from program_layer.run import build_simulation

QWEN = "Qwen/Qwen3-30B-A3B-Instruct-2507"
TIERS = {"cpu": {"capacity_gib": 4}}


@pytest.fixture
def wl(tmp_path):
    p = tmp_path / "w.jsonl"
    p.write_text(json.dumps({"input_toks": 32, "output_toks": 2, "arrival_time_ns": 0}) + "\n")
    return str(p)


@pytest.mark.parametrize("extra, key, text", [
    ({"model": QWEN, "parallelism": {"tp": 1, "pp": 2, "dp": 2, "ep": 2}}, "parallelism.pp",
     "pipeline parallelism together with data parallelism"),
    ({"parallelism": {"tp": 1, "pp": 2}, "kv_tiers": TIERS}, "kv_tiers", "KV tiers with pipeline"),
    ({"model": QWEN, "parallelism": {"dp": 2}, "kv_tiers": TIERS}, "kv_tiers", "KV tiers with pipeline"),
    ({"instances": [{}, {"hardware": "B200"}], "kv_tiers": TIERS}, "kv_tiers", "a list of instances"),
    ({"instances": [{}, {}], "cluster": {"nodes": 2}}, "cluster", "with a list of instances"),
    ({"instances": [{"model": QWEN, "parallelism": {"dp": 2}}, {"model": QWEN}], "model": QWEN},
     "instances[0].parallelism.dp", "data / expert parallelism in a list"),
    ({"instances": [{"parallelism": {"tp": 8, "pp": 2}}], "hardware": "B200"},
     "instances[0].parallelism.tp", "each must fit in one node"),
])
def test_unmodelled_combination_is_one_error_naming_the_key(wl, extra, key, text):
    cfg = {"workload": {"path": wl}, **extra}
    with pytest.raises(ConfigError) as e:
        build_simulation(cfg)
    assert e.value.key == key
    assert text in e.value.message
