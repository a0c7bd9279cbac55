"""Fast-forward is exact: calls.csv, programs.csv, timeseries.csv and summary.json are
byte-identical with and without it (issue 5), over random workloads, policies and pools."""
from __future__ import annotations

import json
import random

from hypothesis import HealthCheck, given, settings, strategies as st

from llmservingsim.errors import StuckError
from program_layer.run import run_config

RETENTION = ["cache-lru", "evict-always", {"name": "ttl", "tau_s": 2.0}, {"name": "pressure-ttl", "tau_s": 1.0},
             "continuum"]
SCHEDULING = ["fcfs", "program-fcfs", "plas"]
ROUTING = ["round-robin", "least-loaded", "session-affinity"]


def _workload(tmp_path, seed: int, n_programs: int) -> str:
    """Random programs; some prompts extend the previous context exactly and end one token
    past a block (a call admitted as a single-token step), program 0 may decode long."""
    rng = random.Random(seed)
    lines = []
    t = 0
    for p in range(n_programs):
        t += rng.randint(0, 3_000_000_000)
        calls = []
        ctx = rng.randint(20, 400)
        for k in range(rng.randint(1, 4)):
            out = rng.randint(1, 120) if p or rng.random() < 0.5 else rng.randint(300, 700)
            exact = rng.random() < 0.3
            if exact:   # the next prompt is exactly this context and ends 1 past a block:
                out += (1 - ctx - out) % 16    # admitted with all but its last token cached
            calls.append({"input_toks": ctx, "output_toks": out,
                          "tool_duration_ns": rng.choice([0, 10_000_000, rng.randint(0, 4_000_000_000)]),
                          "tool_name": rng.choice(["bash", "python", "grep"])})
            ctx += out + (0 if exact else rng.randint(0, 200))
        lines.append(json.dumps({"session_id": f"s{p}", "arrival_time_ns": t, "sub_requests": calls}))
    path = tmp_path / f"w{seed}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), n_programs=st.integers(1, 8), pool_blocks=st.integers(60, 400),
       retention=st.sampled_from(RETENTION), scheduling=st.sampled_from(SCHEDULING),
       routing=st.sampled_from(ROUTING), instances=st.integers(1, 2), max_num_seqs=st.integers(2, 16),
       budget=st.sampled_from([64, 256, 2048]))
def test_fast_forward_matches_step_mode(tmp_path, seed, n_programs, pool_blocks, retention, scheduling,
                                        routing, instances, max_num_seqs, budget):
    cfg = {
        "model": "meta-llama/Llama-3.1-8B", "hardware": "RTXPRO6000", "instances": instances,
        "engine": {"kv_pool_tokens": pool_blocks * 16, "max_num_seqs": max_num_seqs,
                   "max_num_batched_tokens": budget, "max_model_len": pool_blocks * 16},
        "workload": {"path": _workload(tmp_path, seed, n_programs)},
        "policies": {"retention": retention, "scheduling": scheduling, "routing": routing},
    }
    a, b = tmp_path / "ff", tmp_path / "step"
    errors = []
    for out, step_mode in ((a, False), (b, True)):
        try:
            run_config(cfg, out, step_mode=step_mode)
        except StuckError as exc:        # a call larger than the pool: both modes must say so
            errors.append(exc.message.replace(str(out), "OUT"))   # the note names the run folder
    if errors:      # the same message, but for the note naming each run's own --out folder
        errors = [e.split(" (the previous outputs in ")[0].split(" (no outputs were written to ")[0]
                  for e in errors]
        assert len(errors) == 2 and errors[0] == errors[1]
        return
    for name in ("calls.csv", "programs.csv", "timeseries.csv", "summary.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_fast_forward_engages_on_a_decode_heavy_cell(tmp_path):
    """The property above is only meaningful if fast-forward actually runs."""
    from program_layer.run import build_simulation
    cfg = {"model": "meta-llama/Llama-3.1-8B", "hardware": "RTXPRO6000",
           "workload": {"path": _workload(tmp_path, 7, 6)}}
    sim = build_simulation(cfg)
    sim.run()
    sched = sim.cluster.instances[0].scheduler
    assert sched.num_ff_steps > 0


def test_fast_forward_engages_with_requests_waiting(tmp_path):
    """Under load (a batch capped at max_num_seqs, a pool too small for every context) decode
    runs with requests waiting are fast-forwarded too, and the outputs still equal step mode."""
    from program_layer.run import build_simulation
    cfg = {"model": "meta-llama/Llama-3.1-8B", "hardware": "RTXPRO6000",
           "engine": {"max_num_seqs": 2, "kv_pool_tokens": 120 * 16},
           "workload": {"path": _workload(tmp_path, 7, 8)}}
    sim = build_simulation(cfg)
    sim.run()
    sched = sim.cluster.instances[0].scheduler
    assert sched.num_ff_queued_steps > 0
    a, b = tmp_path / "ff", tmp_path / "step"
    run_config(cfg, a)
    run_config(cfg, b, step_mode=True)
    for name in ("calls.csv", "programs.csv", "timeseries.csv", "summary.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def _handed_timings(monkeypatch, cfg) -> list:
    """Run ``cfg``; the timings fast-forward handed to launches, each checked against the
    timing of the launched batch itself."""
    from llmservingsim.instance import Instance
    from program_layer.run import build_simulation
    launch = Instance._launch
    handed = []

    def checked(inst, out, now, timing=None):
        if timing is not None:
            handed.append(timing)
            assert timing == inst.timer.time(out)
        launch(inst, out, now, timing)
    with monkeypatch.context() as m:
        m.setattr(Instance, "_launch", checked)
        sim = build_simulation(cfg)
        sim.run()
    return handed


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), n_programs=st.integers(1, 8), max_num_seqs=st.integers(2, 16))
def test_the_step_after_a_bulk_run_launches_with_its_own_timing(tmp_path, monkeypatch, seed, n_programs,
                                                              max_num_seqs):
    """Fast-forward times the step after its bulk steps while planning them and hands that
    timing to the launch: it is the timing the step's own batch gets."""
    cfg = {"model": "meta-llama/Llama-3.1-8B", "hardware": "RTXPRO6000",
           "engine": {"max_num_seqs": max_num_seqs, "kv_pool_tokens": 200 * 16},
           "workload": {"path": _workload(tmp_path, seed, n_programs)}}
    try:
        _handed_timings(monkeypatch, cfg)
    except StuckError:
        pass


def test_a_decode_heavy_cell_hands_timings_on(tmp_path, monkeypatch):
    """The property above is only meaningful if timings are handed on."""
    cfg = {"model": "meta-llama/Llama-3.1-8B", "hardware": "RTXPRO6000",
           "workload": {"path": _workload(tmp_path, 7, 6)}}
    assert len(_handed_timings(monkeypatch, cfg)) > 0
