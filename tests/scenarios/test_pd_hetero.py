"""Prefill/decode disaggregation and heterogeneous clusters, end to end, exact outcomes
(issue 16 items 3 and 4; docs/serving-architectures.md)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmservingsim.perf_model import BatchShape
from program_layer.policies import InflightLoad, LeastExpectedCompletion
from program_layer.run import build_simulation, run_config

LLAMA_8B_KV_BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2     # K and V x 32 layers x 8 KV heads x head 128 x bf16
# RTXPRO6000: hardware/networks/RTXPRO6000_pcie5_switch.yml (Switch, link 33.903 GB/s) and
# collective_latency_ns 12700 in hardware/RTXPRO6000.yaml: per link 12700 / (2 messages x 2 hops)
RTX_LINK_GBS, RTX_HOP_NS, SWITCH_HOPS = 33.903, 12700 / 4, 2


def _workload(path: Path, calls: list[tuple[int, int]], gap_ns: int = 1_000_000_000) -> str:
    subs = [{"input_toks": p, "output_toks": o, "tool_duration_ns": gap_ns, "tool_name": "t"} for p, o in calls]
    path.write_text(json.dumps({"session_id": "p0", "arrival_time_ns": 0, "sub_requests": subs}) + "\n")
    return str(path)


def _calls(out: Path) -> list[dict]:
    rows = (out / "calls.csv").read_text().splitlines()
    head = rows[0].split(",")
    return [dict(zip(head, r.split(","))) for r in rows[1:]]


def _pd_cfg(wl: str, **extra) -> dict:
    cfg = {"model": "meta-llama/Llama-3.1-8B", "hardware": "RTXPRO6000", "parallelism": {"tp": 1},
           "instances": [{"role": "prefill"}, {"role": "decode"}], "workload": {"path": wl}}
    cfg.update(extra)
    return cfg


def _send_ns(num_bytes: int) -> int:
    # ASTRA-Sim analytical message: floor(hops x latency + bytes / (GB/s x 2^30 / 1e9))
    return int(SWITCH_HOPS * RTX_HOP_NS + num_bytes / (RTX_LINK_GBS * (1 << 30) / 1e9))


def test_a_pd_call_pays_its_prefill_the_kv_transfer_and_one_decode_step(tmp_path):
    wl = _workload(tmp_path / "w.jsonl", [(4000, 20)])
    sim = build_simulation(_pd_cfg(wl))
    sim.run()
    timer = sim.built[0].timer
    # prefill leg on instance 0: one 4000-token step (budget 8192), samples its one token
    t_prefill = timer.time_shape(BatchShape(4000, 0.0, 1, 0, 0, 0, 0)).total_ns
    # the decode instance has nothing cached: it pulls ceil(4000 / 16) = 250 whole blocks,
    # 250 x 16 x 131072 B = 524,288,000 B, from GPU 0 to GPU 1 over the PCIe switch
    blocks = 250
    nbytes = blocks * 16 * LLAMA_8B_KV_BYTES_PER_TOKEN
    assert nbytes == 524_288_000
    transfer = _send_ns(nbytes)
    assert transfer == 14_408_652      # 6350 + 524,288,000 / 36.403070 B/ns = 6350 + 14,402,302.5
    # then the last prompt token is recomputed with 4000 tokens of KV and samples token 1
    t_first = timer.time_shape(BatchShape(0, 0.0, 0, 1, 4000, 4000, 4000)).total_ns
    f = sim.cluster.finished_calls[0]
    assert f.info.instance == 1 and f.info.arrival_ns == 0 and f.first_scheduled_ns == 0
    assert f.first_token_ns == t_prefill + transfer + t_first
    rec = sim.cluster.disagg.records[0]
    assert (rec.blocks, rec.bytes, rec.start_ns, rec.end_ns) == (blocks, nbytes, t_prefill, t_prefill + transfer)
    # the decode instance received and published the prompt's 250 blocks; the prefill
    # instance freed its blocks but keeps their content in its prefix cache
    d, p = sim.cluster.instances[1].kv, sim.cluster.instances[0].kv
    hashes = sim.programs[0].calls[0].tokens.block_hashes(250)[:250]
    assert all(h in d.pool.cached for h in hashes)
    assert all(h in p.pool.cached for h in hashes)
    assert p.pool.num_free == p.pool.num_usable and not p.req_blocks
    assert sim.cluster.instances[0].num_sending == 0 and sim.cluster.instances[1].scheduler.num_receiving == 0


def test_the_successor_hits_the_prefill_cache_and_pulls_only_what_decode_lacks(tmp_path):
    # call 1's prompt = call 0's context 4020 + a 50-token tool result = 4070 tokens
    wl = _workload(tmp_path / "w.jsonl", [(4000, 20), (4070, 20)])
    summary = run_config(_pd_cfg(wl), tmp_path / "out")
    rows = _calls(tmp_path / "out")
    # prefill instance: call 0's 4000 prompt tokens are cached there (250 full blocks); the
    # output tokens were decoded elsewhere, so its hit stops at 4000
    assert int(rows[1]["cached_tokens"]) == 4000
    # decode instance: call 0's 4020-token context left 251 full blocks (4016 tokens) in its
    # cache, so of call 1's ceil(4070 / 16) = 255 blocks it pulls 255 - 251 = 4
    assert summary["kv_transfers"]["count"] == 2
    assert summary["kv_transfers"]["blocks"] == 250 + 4
    assert summary["kv_transfers"]["bytes"] == (250 + 4) * 16 * LLAMA_8B_KV_BYTES_PER_TOKEN
    assert [r["instance"] for r in rows] == ["1", "1"]


def test_heterogeneous_routing_picks_the_faster_instance_at_equal_load(tmp_path):
    wl = _workload(tmp_path / "w.jsonl", [(2000, 10)])
    cfg = {"model": "meta-llama/Llama-3.1-8B", "instances": [{"hardware": "RTXPRO6000"}, {"hardware": "B200"}],
           "workload": {"path": wl}, "policies": {"routing": "least-ect"}}
    summary = run_config(cfg, tmp_path / "ect")
    assert _calls(tmp_path / "ect")[0]["instance"] == "1"            # B200 (both idle)
    assert run_config(dict(cfg, policies={"routing": "least-loaded"}), tmp_path / "ll")["calls"] == 1
    assert _calls(tmp_path / "ll")[0]["instance"] == "0"             # least-loaded: the lower index
    specs = summary["instance_specs"]
    assert [s["hardware"] for s in specs] == ["RTXPRO6000", "B200"]
    assert specs[1]["decode_step_s"] < specs[0]["decode_step_s"]
    assert specs[1]["bundle"]["path"] == "B200/meta-llama/Llama-3.1-8B/bf16/tp1"
    assert summary["instances"] == 2 and [p["node"] for p in summary["placement"]] == [0, 1]


def _load(calls, decode_s, prefill_s=0.0, role="both", util=0.0):
    return InflightLoad(calls, 0, util, 0, 1000, 0, role, "", 1, 0.0, 0.0, decode_s, prefill_s)


def test_least_ect_weighs_queues_by_speed():
    pol = LeastExpectedCompletion()
    # equal loads: (0 + 1) x 0.010 < (0 + 1) x 0.025 -> the faster instance 1
    assert pol.select(None, (_load(0, 0.025), _load(0, 0.010)), 0.0) == 1
    # two calls on the fast one: (2 + 1) x 0.010 = 0.030 > (0 + 1) x 0.025 -> instance 0
    assert pol.select(None, (_load(0, 0.025), _load(2, 0.010)), 0.0) == 0
    # no speed facts (0.0): least-loaded
    assert pol.select(None, (_load(1, 0.0), _load(0, 0.0)), 0.0) == 1
    # roles: a pair, the prefill side by prefill_step_s, the decode side by decode_step_s
    loads = (_load(0, 0.0, 0.08, "prefill"), _load(0, 0.0, 0.02, "prefill"),
             _load(0, 0.03, 0.0, "decode"), _load(1, 0.01, 0.0, "decode"))
    # decode: (0 + 1) x 0.03 = 0.03 > (1 + 1) x 0.01 = 0.02 -> instance 3
    assert pol.select(None, loads, 0.0) == (1, 3)


def test_an_int_decision_is_paired_with_the_least_loaded_of_the_other_role(tmp_path):
    wl = _workload(tmp_path / "w.jsonl", [(500, 5)])
    # round-robin picks instance 0 (a prefill instance): its decode partner is the
    # least-loaded decode instance, the lower index of the idle two
    cfg = _pd_cfg(wl, instances=[{"role": "prefill"}, {"role": "decode", "count": 2}])
    summary = run_config(cfg, tmp_path / "out")
    assert _calls(tmp_path / "out")[0]["instance"] == "1"
    assert summary["kv_transfers"]["count"] == 1


def test_a_pair_naming_a_decode_instance_to_prefill_is_a_policy_error(tmp_path):
    from llmservingsim.errors import PolicyError
    pol = tmp_path / "bad.py"
    pol.write_text("from program_layer.policies import RoutingPolicy\n"
                   "class Bad(RoutingPolicy):\n"
                   "    def select(self, pcb, inflight, now):\n"
                   "        return (1, 1)\n")
    wl = _workload(tmp_path / "w.jsonl", [(500, 5)])
    with pytest.raises(PolicyError, match="prefill instance 1 has role decode"):
        run_config(_pd_cfg(wl, policies={"routing": f"{pol}:Bad"}), tmp_path / "out")
