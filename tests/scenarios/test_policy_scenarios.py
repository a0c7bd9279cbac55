"""End-to-end policy scenarios on the real engine (issue 4 acceptance), exact outcomes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmservingsim.errors import PolicyError
from program_layer.run import run_config

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "examples" / "policies"


def _program(path: Path, gap_ns: int, ctx: int = 4000, calls: int = 2, out: int = 20, programs: int = 1,
             spacing_ns: int = 0) -> str:
    lines = []
    for p in range(programs):
        subs = [{"input_toks": ctx + k * (out + 50), "output_toks": out, "tool_duration_ns": gap_ns,
                 "tool_name": "pytest"} for k in range(calls)]
        lines.append(json.dumps({"session_id": f"p{p}", "arrival_time_ns": p * spacing_ns, "sub_requests": subs}))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _calls(out: Path) -> list[dict]:
    rows = (out / "calls.csv").read_text().splitlines()
    head = rows[0].split(",")
    return [dict(zip(head, r.split(","))) for r in rows[1:]]


def _cfg(workload: str, retention, scheduling="fcfs", **extra) -> dict:
    cfg = {"model": "meta-llama/Llama-3.1-8B", "hardware": "RTXPRO6000", "workload": {"path": workload},
           "policies": {"retention": retention, "scheduling": scheduling}}
    cfg.update(extra)
    return cfg


def test_ttl_keeps_kv_across_a_short_gap_evict_always_reprefills(tmp_path):
    wl = _program(tmp_path / "w.jsonl", gap_ns=500_000_000)
    run_config(_cfg(wl, {"name": "ttl", "tau_s": 2.0}), tmp_path / "ttl")
    run_config(_cfg(wl, "evict-always"), tmp_path / "evict")
    ttl, evict = _calls(tmp_path / "ttl"), _calls(tmp_path / "evict")
    # call 1's prompt = call 0's prompt (4000) + output (20) + tool result (50): the whole
    # previous context except the last (unsampled-KV) token is cached, in whole blocks.
    assert int(ttl[1]["cached_tokens"]) == (4000 + 20 - 1) // 16 * 16 == 4016
    assert int(evict[1]["cached_tokens"]) == 0
    assert float(evict[1]["ttft_s"]) > float(ttl[1]["ttft_s"])


def test_listings_1_and_3_from_files_equal_the_builtin_seeds(tmp_path):
    wl = _program(tmp_path / "w.jsonl", gap_ns=1_500_000_000, programs=6, calls=3, spacing_ns=200_000_000)
    cfg_builtin = _cfg(wl, {"name": "ttl", "tau_s": 2.0}, "plas", engine={"kv_pool_tokens": 12000})
    cfg_files = _cfg(wl, f"{POLICIES}/listing1_seed_retention.py:EvolvedRetention",
                     f"{POLICIES}/listing3_seed_scheduling.py:EvolvedScheduling", engine={"kv_pool_tokens": 12000})
    run_config(cfg_builtin, tmp_path / "a")
    run_config(cfg_files, tmp_path / "b")
    for name in ("calls.csv", "programs.csv", "timeseries.csv"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_listings_2_and_4_run_and_differ_only_where_the_policy_does(tmp_path):
    wl = _program(tmp_path / "w.jsonl", gap_ns=1_500_000_000, programs=6, calls=3, spacing_ns=200_000_000)
    base = _cfg(wl, f"{POLICIES}/listing1_seed_retention.py:EvolvedRetention",
                f"{POLICIES}/listing3_seed_scheduling.py:EvolvedScheduling", engine={"kv_pool_tokens": 12000})
    evolved = dict(base, policies={"retention": f"{POLICIES}/listing2_evolved_retention.py:EvolvedRetention",
                                   "scheduling": f"{POLICIES}/listing4_evolved_scheduling.py:EvolvedScheduling"})
    sa = run_config(base, tmp_path / "a")
    sb = run_config(evolved, tmp_path / "b")
    assert sa["calls"] == sb["calls"] == 18
    # the first call of every program is released at its arrival whatever the policy
    ca, cb = _calls(tmp_path / "a"), _calls(tmp_path / "b")
    assert [r["release_s"] for r in ca if r["call_index"] == "0"] == [r["release_s"] for r in cb if r["call_index"] == "0"]


def test_a_policy_that_raises_stops_with_one_message(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from program_layer.policies import SchedulingPolicy\n"
                   "class Bad(SchedulingPolicy):\n"
                   "    engine_args = {'scheduling_policy': 'priority'}\n"
                   "    def priority(self, pcb, now):\n"
                   "        if pcb.call_index == 1:\n"
                   "            raise ValueError('boom')\n"
                   "        return 0\n")
    wl = _program(tmp_path / "w.jsonl", gap_ns=250_000_000)
    with pytest.raises(PolicyError) as err:
        run_config(_cfg(wl, "cache-lru", f"{bad}:Bad"), tmp_path / "o")
    msg = str(err.value)
    assert "Bad" in msg and "p0" in msg and "call 1" in msg and "ValueError: boom" in msg
    assert "t=" in msg or " s" in msg
    assert "\n" not in msg


def test_same_config_and_seed_give_byte_identical_outputs(tmp_path):
    cfg = {"model": "meta-llama/Llama-3.1-8B", "hardware": "RTXPRO6000",
           "workload": {"generator": "swebench", "programs": 3, "rate_jps": 0.5, "seed": 3},
           "policies": {"retention": "pressure-ttl", "scheduling": "plas"}, "engine": {"kv_pool_tokens": 40000}}
    run_config(cfg, tmp_path / "a")
    run_config(cfg, tmp_path / "b")
    for name in ("calls.csv", "programs.csv", "timeseries.csv", "summary.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
