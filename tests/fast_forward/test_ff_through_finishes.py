"""Fast-forward runs through quiet finishes (llmservingsim/fast_forward.py, issue 15) and stays
exact: on trace-like workloads (many one-call programs decoding together, their lengths
spread so that requests finish inside decode runs, some multi-call programs whose finishes
schedule the next call and so must stop a run), outputs, bulk metrics and the timing handed
to the step after a run equal step mode's; a finish is taken inside a run only when the
instance and the cluster call it quiet.
"""
from __future__ import annotations

import json
import random

from hypothesis import HealthCheck, given, settings, strategies as st

from llmservingsim.errors import StuckError
from program_layer.run import build_simulation, run_config

from test_ff_equivalence import RETENTION, _handed_timings
from test_ff_metrics import _metrics

OUTPUTS = ("calls.csv", "programs.csv", "timeseries.csv", "summary.json")


def _trace_workload(tmp_path, seed: int, n_programs: int, multi: float) -> str:
    """Programs arriving in bursts (so that many decode at once), one call each but a share
    ``multi`` of them with 2-3 calls (their tool gaps 0 or short: the next call's release
    is an event right after the finish); outputs of 1-250 tokens, prompts of 5-300."""
    rng = random.Random(seed)
    lines = []
    t = 0
    for p in range(n_programs):
        t += rng.choice([0, 0, rng.randint(0, 50_000_000), rng.randint(0, 2_000_000_000)])
        calls = []
        ctx = rng.randint(5, 300)
        for _ in range(rng.randint(2, 3) if rng.random() < multi else 1):
            out = rng.randint(1, 250)
            calls.append({"input_toks": ctx, "output_toks": out,
                          "tool_duration_ns": rng.choice([0, 1_000_000, rng.randint(0, 500_000_000)]),
                          "tool_name": "bash"})
            ctx += out + rng.randint(0, 50)
        lines.append(json.dumps({"session_id": f"s{p}", "arrival_time_ns": t, "sub_requests": calls}))
    path = tmp_path / f"t{seed}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _cfg(tmp_path, seed, n_programs, multi, pool_blocks, max_num_seqs, budget=2048, retention="cache-lru",
         instances=1) -> dict:
    return {
        "model": "meta-llama/Llama-3.1-8B", "hardware": "RTXPRO6000", "instances": instances,
        "engine": {"kv_pool_tokens": pool_blocks * 16, "max_num_seqs": max_num_seqs,
                   "max_num_batched_tokens": budget, "max_model_len": pool_blocks * 16},
        "workload": {"path": _trace_workload(tmp_path, seed, n_programs, multi)},
        "policies": {"retention": retention},
    }


def _outputs_equal(tmp_path, cfg) -> bool:
    """Outputs of ``cfg`` in fast-forward and step mode are byte-identical (or both stick,
    with the same message but for the note naming each run's folder)."""
    a, b = tmp_path / "ff", tmp_path / "step"
    stuck = []
    for out, step_mode in ((a, False), (b, True)):
        try:
            run_config(cfg, out, step_mode=step_mode)
        except StuckError as exc:
            stuck.append(exc.message.split(" (")[0])
    if stuck:
        return len(stuck) == 2 and stuck[0] == stuck[1]
    return all((a / name).read_bytes() == (b / name).read_bytes() for name in OUTPUTS)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), n_programs=st.integers(2, 24), multi=st.sampled_from([0.0, 0.0, 0.3]),
       pool_blocks=st.integers(60, 600), max_num_seqs=st.integers(2, 32), budget=st.sampled_from([64, 2048]),
       retention=st.sampled_from(["cache-lru", "cache-lru", "cache-lru"] + RETENTION[1:]),
       instances=st.integers(1, 2))
def test_runs_through_finishes_match_step_mode(tmp_path, seed, n_programs, multi, pool_blocks, max_num_seqs,
                                               budget, retention, instances):
    cfg = _cfg(tmp_path, seed, n_programs, multi, pool_blocks, max_num_seqs, budget, retention, instances)
    assert _outputs_equal(tmp_path, cfg)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), n_programs=st.integers(2, 24), multi=st.sampled_from([0.0, 0.3]),
       pool_blocks=st.integers(60, 600), max_num_seqs=st.integers(2, 32))
def test_bulk_metrics_through_finishes_match_step_mode(tmp_path, seed, n_programs, multi, pool_blocks,
                                                        max_num_seqs):
    """The per-step trace (batch sizes shrinking inside a run), totals by second and sampled
    state runs (running requests and blocks in use change at a finish inside a run)."""
    cfg = _cfg(tmp_path, seed, n_programs, multi, pool_blocks, max_num_seqs)
    ff, step = _metrics(cfg, False), _metrics(cfg, True)
    assert (ff is None) == (step is None)
    if ff is not None:
        assert ff[0] == step[0]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), n_programs=st.integers(2, 24), max_num_seqs=st.integers(2, 32))
def test_the_step_after_a_run_through_finishes_gets_its_own_timing(tmp_path, monkeypatch, seed, n_programs,
                                                                   max_num_seqs):
    """The batch handed on after a run that finished requests has the tallies of its own
    entries (every launched batch's, checked at its launch), and the timing planned for it
    is that batch's."""
    from llmservingsim.instance import Instance
    from llmservingsim.scheduler import SchedulerOutput
    launch = Instance._launch

    def tallied(inst, out, now, timing=None):
        fresh = SchedulerOutput(list(out.scheduled), num_tokens=sum(sr.num_new for sr in out.scheduled))
        fresh.tally(fresh.scheduled)
        for name in ("num_tokens", "num_decodes", "decode_kv_sum", "decode_kv_max", "decode_kv_min",
                     "prefill_tokens", "prefill_ctx_sum", "num_sampled"):
            assert getattr(out, name) == getattr(fresh, name), name
        launch(inst, out, now, timing)
    monkeypatch.setattr(Instance, "_launch", tallied)
    try:
        _handed_timings(monkeypatch, _cfg(tmp_path, seed, n_programs, 0.0, 400, max_num_seqs))
    except StuckError:
        pass


def _finishes(cfg) -> tuple[int, int]:
    sim = build_simulation(cfg)
    sim.run()
    scheds = [inst.scheduler for inst in sim.cluster.instances]
    return sum(s.num_ff_finishes for s in scheds), sum(s.num_ff_steps for s in scheds)


def test_runs_through_finishes_engage(tmp_path):
    """The properties above are only meaningful if finishes are taken inside runs."""
    cfg = _cfg(tmp_path, 3, 24, 0.0, 600, 32)
    fins, _ = _finishes(cfg)
    assert fins > 5
    assert _outputs_equal(tmp_path, cfg)


def test_a_finish_that_is_not_quiet_stops_the_run(tmp_path):
    """A retention hook (any policy but cache-lru) reads the cluster at a finish and may
    schedule an expiry; a call that is not its program's last schedules its successor:
    neither finish is taken inside a run."""
    cfg = _cfg(tmp_path, 3, 24, 0.0, 600, 32, retention="evict-always")
    assert _finishes(cfg)[0] == 0
    cfg = _cfg(tmp_path, 3, 24, 1.0, 600, 32)       # every program has 2-3 calls
    sim = build_simulation(cfg)
    orch, cluster = sim.orchestrator, sim.cluster
    checked = []
    quiet = orch.finish_is_quiet

    def spy(request_id):
        flight = orch._in_flight[request_id]
        got = quiet(request_id)
        assert got == (flight.call_index + 1 == len(orch._specs[flight.program_id].calls))
        checked.append(got)
        return got
    cluster.finish_listener_quiet = spy
    sim.run()
    assert True in checked and False in checked


def test_a_listener_that_does_not_say_it_is_quiet_stops_the_run(tmp_path):
    """A finish listener set without ``finish_listener_quiet`` may do anything."""
    cfg = _cfg(tmp_path, 3, 24, 0.0, 600, 32)
    sim = build_simulation(cfg)
    sim.cluster.finish_listener_quiet = None
    sim.run()
    assert sum(inst.scheduler.num_ff_finishes for inst in sim.cluster.instances) == 0
    assert sum(inst.scheduler.num_ff_steps for inst in sim.cluster.instances) > 0


def _finish_states(cfg, step_mode: bool):
    """Each finish as the engine leaves it (the request's counters and times, its instance's
    running requests and free blocks when ``Cluster.finished`` runs), then every pool's
    blocks (references, contents) and prefix map at the end; None if the run sticks."""
    from llmservingsim.cluster import Cluster
    seen = []
    finished = Cluster.finished

    def spy(cluster, req, now_ns):
        inst = cluster.instances[req.instance]
        seen.append((req.request_id, now_ns, req.num_tokens, req.num_computed_tokens, req.num_placeholders,
                     req.status, req.first_token_ns, req.last_token_ns, req.finished_ns, req.first_scheduled_ns,
                     len(inst.scheduler.running), inst.kv.pool.num_free))
        return finished(cluster, req, now_ns)
    try:
        Cluster.finished = spy
        sim = build_simulation(cfg, step_mode=step_mode)
        sim.run()
    except StuckError:
        return None
    finally:
        Cluster.finished = finished
    pools = []
    for inst in sim.cluster.instances:
        pool = inst.kv.pool
        pools.append(([(b.block_id, b.ref_cnt, b.block_hash) for b in pool._blocks],
                      {h: b.block_id for h, b in pool.cached.items()},
                      {h: [b.block_id for b in bs] for h, bs in pool.copies.items()}, pool.num_free))
    return seen, pools


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), n_programs=st.integers(2, 24), multi=st.sampled_from([0.0, 0.3]),
       pool_blocks=st.integers(60, 600), max_num_seqs=st.integers(2, 32))
def test_finished_requests_and_pools_match_step_mode(tmp_path, seed, n_programs, multi, pool_blocks,
                                                     max_num_seqs):
    """What no output shows: a request finished inside a run is left as ``update_from_output``
    leaves it (its last token never computed), at its finish its instance holds what it
    holds step by step, and the pools end alike (no block published that step mode does not
    publish, e.g. the one a last, uncomputed token completes)."""
    cfg = _cfg(tmp_path, seed, n_programs, multi, pool_blocks, max_num_seqs)
    assert _finish_states(cfg, False) == _finish_states(cfg, True)
