"""``instances:`` as a list of per-instance mappings: validation, errors naming the key, and
the invariant that any role mix able to prefill and decode completes every call."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmservingsim.errors import ConfigError
from program_layer.config import load_config, validate_config
from program_layer.run import build_simulation, run_config

WL = {"generator": "swebench"}


def _err(instances, **top) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        validate_config({"instances": instances, "workload": WL, **top})
    return e.value


def test_list_items_keep_their_given_keys_and_get_a_role():
    cfg = validate_config({"instances": [{"hardware": "B200", "count": 2}, {"role": "decode"}], "workload": WL})
    assert cfg["instances"] == [{"hardware": "B200", "count": 2, "role": "both"}, {"role": "decode"}]


@pytest.mark.parametrize("instances, key, text", [
    ([{"role": "prefill"}], "instances", "no instance can decode"),
    ([{"role": "decode"}, {"role": "decode"}], "instances", "no instance can prefill"),
    ([{"role": "mixed"}], "instances[0].role", "one of both, prefill, decode"),
    ([{"count": 0}], "instances[0].count", ">= 1"),
    ([{"gpu": "B200"}], "instances[0].gpu", "unknown key"),
    ([{}, {"engine": {"block_size": 7}}], "instances[1].engine.block_size", "vLLM's block sizes"),
    ([{}, {"engine": {"block_size": 32}}], "instances[1].engine.block_size", "same engine.block_size"),
    ([{}, {"parallelism": {"tp": 0}}], "instances[1].parallelism.tp", ">= 1"),
    ([], "instances", "empty list"),
    (["B200"], "instances[0]", "expected a mapping"),
])
def test_bad_lists_are_one_config_error_naming_the_key(instances, key, text):
    e = _err(instances)
    assert e.key == key and text in e.message


def test_errors_carry_the_file_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("workload: {generator: swebench}\ninstances:\n  - {role: prefill}\n  - role: both\n"
                    "    engine: {block_size: 7}\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert (e.value.key, e.value.line) == ("instances[1].engine.block_size", 5)


def test_a_mix_of_model_families_is_refused(tmp_path):
    with pytest.raises(ConfigError) as e:
        build_simulation({"instances": [{"model": "meta-llama/Llama-3.1-8B"}, {"model": "Qwen/Qwen3-32B"}],
                          "workload": WL})
    assert e.value.key == "instances[1].model" and "one tokenizer and architecture" in e.value.message


def test_roles_across_nodes_without_an_inter_node_block_are_refused():
    # 3 RTX 4090 instances (2 GPUs a node, no inter_node block): the third starts node 1; a
    # KV transfer between nodes needs the network between them
    with pytest.raises(ConfigError) as e:
        build_simulation({"hardware": "RTX4090", "instances": [{"role": "prefill"}, {"role": "decode", "count": 2}],
                          "workload": WL})
    assert e.value.key == "instances" and "inter_node" in e.value.message


def test_a_list_of_equal_mappings_runs_like_instances_n(tmp_path):
    base = {"model": "meta-llama/Llama-3.1-8B", "workload": {"generator": "swebench", "programs": 2},
            "policies": {"routing": "least-loaded"}}
    a = run_config({**base, "instances": 2}, tmp_path / "a")
    b = run_config({**base, "instances": [{"count": 2}]}, tmp_path / "b")
    for name in ("calls.csv", "programs.csv", "timeseries.csv"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert a["placement"] == b["placement"] and "instance_specs" not in a and len(b["instance_specs"]) == 2


def _workload(path: Path) -> str:
    lines = []
    for p in range(3):
        subs = [{"input_toks": 300 + 200 * p + 40 * k, "output_toks": 4 + k, "tool_duration_ns": 20_000_000,
                 "tool_name": "t"} for k in range(2)]
        lines.append(json.dumps({"session_id": f"p{p}", "arrival_time_ns": p * 5_000_000, "sub_requests": subs}))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(roles=st.lists(st.sampled_from(["prefill", "decode", "both"]), min_size=1, max_size=4),
       routing=st.sampled_from(["round-robin", "least-loaded", "least-ect", "session-affinity"]),
       pool=st.sampled_from([None, 1024]))
def test_any_role_mix_that_can_prefill_and_decode_completes_every_call(tmp_path_factory, roles, routing, pool):
    d = tmp_path_factory.mktemp("mix")
    cfg = {"model": "meta-llama/Llama-3.1-8B", "workload": {"path": _workload(d / "w.jsonl")},
           "instances": [{"role": r} for r in roles], "policies": {"routing": routing},
           "engine": {"kv_pool_tokens": pool}}
    able = any(r in ("prefill", "both") for r in roles) and any(r in ("decode", "both") for r in roles)
    if not able:
        with pytest.raises(ConfigError) as e:
            run_config(cfg, d / "out")
        assert e.value.key == "instances"
        return
    summary = run_config(cfg, d / "out")
    assert summary["calls"] == 6 and summary["programs"] == 3
    assert all(r["jct_s"] for r in _rows(d / "out" / "programs.csv"))
    # fast-forward changes no byte with P/D legs in flight either
    run_config(cfg, d / "step", step_mode=True)
    assert (d / "out" / "calls.csv").read_bytes() == (d / "step" / "calls.csv").read_bytes()


def _rows(path: Path) -> list[dict]:
    rows = path.read_text().splitlines()
    head = rows[0].split(",")
    return [dict(zip(head, r.split(","))) for r in rows[1:]]
