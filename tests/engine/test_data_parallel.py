"""Data / expert parallelism (llmservingsim/data_parallel.py, expert_parallel.py, dp_build.py):
vLLM 0.19's DP rank choice, MoE lockstep waves with dummy steps, the EP collectives' sizes,
the per-rank MoE work, and config errors. Every expected number is derived in the comments."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from engine_helpers import assert_engine_empty, create_scheduler, make_request
from hooks import Hooks
from llmservingsim.data_parallel import (DPLoadBalancer, DPRank, LockstepGroup, LockstepTimer, LockstepTiming,
                                         STATS_INTERVAL_NS)
from llmservingsim.errors import ConfigError
from llmservingsim.events import EventLoop
from llmservingsim.expert_parallel import EPCommModel, MoEParallel, moe_rank_work
from llmservingsim.hardware import load_device
from llmservingsim.memory_model import weight_bytes
from llmservingsim.model_config import load_model
from llmservingsim.op_cost import moe_work
from llmservingsim.perf_model import BatchShape
from llmservingsim.scheduler import ScheduledRequest, SchedulerOutput
from program_layer.run import build_simulation

QWEN = "Qwen/Qwen3-30B-A3B-Instruct-2507"


# ---- DP rank choice -------------------------------------------------------------------------
def _rank(waiting=0, running=0):
    return SimpleNamespace(scheduler=SimpleNamespace(waiting=[None] * waiting, running=[None] * running))


def test_rank_choice_follows_vllm_score():
    """score = 4 x waiting + running over the published counts, ties to the lowest rank, the
    chosen rank's waiting count incremented until the next 100-ms publication."""
    r0, r1 = _rank(), _rank()
    lb = DPLoadBalancer([r0, r1])
    picks = []
    # period 0: counts start at [0,0],[0,0]
    picks.append(lb.choose(0))                  # 0 vs 0 -> rank 0; counts[0] = [1, 0]
    picks.append(lb.choose(10_000_000))         # 4 vs 0 -> rank 1; counts[1] = [1, 0]
    picks.append(lb.choose(20_000_000))         # 4 vs 4 -> rank 0; counts[0] = [2, 0]
    picks.append(lb.choose(30_000_000))         # 8 vs 4 -> rank 1
    assert picks == [0, 1, 0, 1]
    # a new period publishes the real counts: rank 0 runs 3 (score 3), rank 1 has 1 waiting (4)
    r0.scheduler.running = [None] * 3
    r1.scheduler.waiting = [None]
    t = STATS_INTERVAL_NS + 1
    picks = [lb.choose(t)]                      # 3 vs 4 -> rank 0; counts[0] = [1, 3] (score 7)
    picks.append(lb.choose(t + 1))              # 7 vs 4 -> rank 1; counts[1] = [2, 0] (score 8)
    picks.append(lb.choose(t + 2))              # 7 vs 8 -> rank 0
    assert picks == [0, 1, 0]
    assert lb.assigned == [4, 3]


# ---- lockstep step time -----------------------------------------------------------------------
class _Perf:
    """compute 10 us per token + 100 us, of which per-sequence 5 us per sequence and MoE
    2 us per token per layer (the bundle's MoE at the rank's own tokens)."""
    bundle = None

    def compute_us(self, s):
        return 10.0 * s.num_tokens + 100.0

    def per_sequence_us(self, n):
        return 5.0 * n

    def moe_us(self, tokens):
        return 2.0 * tokens


class _MoE:
    def us(self, own, gathered):                # the rank's MoE: 3 us per gathered token
        return 3.0 * gathered


class _EP:
    def layer_ns(self, max_tokens):             # (all-gather, reduce-scatter) per layer
        return 50 * max_tokens, 70 * max_tokens


def _lockstep_timer(ep=True):
    timer = SimpleNamespace(perf=_Perf(), pp=1, comm=None, framework=SimpleNamespace(us=lambda *a: 0.0))
    return LockstepTimer(timer, _MoE(), _EP() if ep else None, moe_layers=2)


def test_lockstep_step_is_the_slowest_rank_and_a_dummy_is_one_token():
    """Rank 0: a prefill of 100 tokens; rank 1: nothing (dummy step of one token).
    gathered = 101 tokens, largest rank 100, 2 MoE layers.
    rank 0 compute = 10*100 + 100 - 2*(2*100) + 2*(3*101) = 1100 - 400 + 606 = 1306 us
    rank 1 compute = 10*1 + 100 - 5 (no sampling) - 2*(2*1) + 2*(3*101) = 105 - 4 + 606 = 707 us
    EP per rank = 2 layers x (50*100 + 70*100) ns = 24000 ns
    totals: 1306000 + 24000 = 1330000 ns; 707000 + 24000 = 731000 ns -> the step is 1330000 ns,
    rank 1 waits 599000 ns (counted in its exposed comm)."""
    lt = _lockstep_timer()
    busy = _Out([(100, 0)])
    t0, t1 = lt.time([busy, _Out([])])
    assert (t0.total_ns, t1.total_ns) == (1_330_000, 1_330_000)
    assert (t0.compute_ns, t1.compute_ns) == (1_306_000, 707_000)
    assert (t0.ep_all_gather_ns, t0.ep_reduce_scatter_ns) == (10_000, 14_000)
    assert (t0.dp_wait_ns, t1.dp_wait_ns) == (0, 599_000)
    assert t1.comm_ns == 24_000 + 599_000


def _Out(reqs) -> SchedulerOutput:
    """A scheduler output of (num_new, ctx_before) requests, with its tallies."""
    out = SchedulerOutput([ScheduledRequest(None, n, c, True) for n, c in reqs])
    out.tally(out.scheduled)
    return out


# ---- waves: dummy steps and the 32-step finish sync ---------------------------------------
class _FixedTimer:
    """Step = 1000 + 100 x (largest rank's tokens, a dummy counting 1) ns."""

    def time(self, outs):
        toks = [sum(sr.num_new for sr in o.scheduled) if o else 1 for o in outs]
        step = 1000 + 100 * max(toks)
        return [LockstepTiming(step, step, 0, 0) for _ in outs]


def _group(n=2, async_scheduling=False):
    loop = EventLoop()
    finished = []
    ranks = []
    for i in range(n):
        sched = create_scheduler(clock=lambda: loop.now)
        ranks.append(DPRank(i, loop, sched, None, Hooks(), async_scheduling,
                            lambda req, now: finished.append((req.request_id, now))))
    group = LockstepGroup(ranks, _FixedTimer())
    return loop, ranks, group, finished


def test_idle_rank_runs_dummy_steps_until_the_wave_check():
    """One request (10 prompt tokens, 3 output tokens) on rank 0 of 2, synchronous scheduling.
    Steps: prefill 10 tokens (1000 + 100*10 = 2000 ns, samples token 1), then two decodes
    (1000 + 100*1 = 1100 ns each): the request finishes at 2000 + 1100 + 1100 = 4200 ns.
    Rank 1 runs a dummy step in each. No rank has work after step 3, but the finish sync
    runs only every 32 steps: 29 more all-dummy steps of 1100 ns, the wave ends at
    4200 + 29 * 1100 = 36100 ns. Rank 1: 32 dummy steps; rank 0: 29."""
    loop, ranks, group, finished = _group()
    req = make_request(0, num_tokens=10, max_tokens=3)
    loop.schedule(0, lambda: ranks[0].submit(req))
    loop.run()
    assert finished == [(0, 4200)]
    assert loop.now == 36_100
    assert [r.num_steps for r in ranks] == [32, 32]
    assert [r.dummy_steps for r in ranks] == [29, 32]
    assert group.dummy_steps == 61 and not group.in_wave and group.step_counter == 0
    for r in ranks:
        assert_engine_empty(r.scheduler)


def test_a_request_during_the_tail_joins_the_running_wave():
    """A second request reaches rank 1 at 5000 ns, during the tail's all-dummy step that
    started at 4200 (ends 5300): it is ingested then (queued at 5300) and scheduled in the
    step starting at 5300, without a new wave (the step counter keeps counting)."""
    loop, ranks, group, finished = _group()
    a = make_request(0, num_tokens=10, max_tokens=3)
    b = make_request(1, num_tokens=10, max_tokens=1)
    loop.schedule(0, lambda: ranks[0].submit(a))
    loop.schedule(5000, lambda: ranks[1].submit(b))
    loop.run()
    # b: one prefill step of 10 tokens from 5300 (2000 ns): finishes at 7300
    assert finished == [(0, 4200), (1, 7300)]
    assert b.queued_ns == 5300 and b.first_scheduled_ns == 5300
    # steps: 3 (a) + 1 dummy (4200-5300) + 1 (b) = 5, then the tail to 32: 27 x 1100 ns
    assert loop.now == 7300 + 27 * 1100


# ---- EP collectives and per-rank MoE work ------------------------------------------------
def test_ep_collective_bytes_per_moe_layer():
    """Qwen3-30B-A3B: hidden 2048, bf16. Ranks with 3 and 5 tokens: the all-gather's
    comm_size is what each rank contributes, the largest rank's 5 x 2048 x 2 = 20480 bytes;
    the reduce-scatter's is the whole buffer, dp x that = 40960 bytes. Each is timed on the
    2-GPU group by the system simulator."""
    model = load_model(QWEN)
    device = load_device("RTXPRO6000")
    ep = EPCommModel(model, device, dp=2, tp=1)
    assert ep.sizes(5) == (20_480, 40_960)
    ag, rs = ep.layer_ns(5)
    assert ag == ep.sim.collective_time_ns("all_gather", 20_480, [0, 1])
    assert rs == ep.sim.collective_time_ns("reduce_scatter", 40_960, [0, 1])
    assert ag > 0 and rs > 0


def test_moe_rank_work_reduces_to_the_op_cost_model_without_dp_or_ep():
    model = load_model(QWEN)
    for tokens in (1, 7, 300):
        A = 128 * (1 - (1 - 8 / 128) ** tokens)
        for tp in (1, 2):
            assert moe_rank_work(model, tokens, tokens, MoEParallel(1, tp, 1)) == moe_work(model, tokens, A, tp)


def test_ep_rank_reads_its_share_of_the_experts():
    """ep = 2 over 2 x 128 gathered tokens: the rank holds 64 experts, activated with
    probability 1 - (1 - 8/128)^256 each; its weight bytes are those experts x 3 x 2048 x 768
    x 2 bytes, half the all-expert figure, and its routed pairs 256 x 8 / 2 = 1024."""
    model = load_model(QWEN)
    w = moe_rank_work(model, 128, 256, MoEParallel(2, 1, 2))
    p = 1 - (1 - 8 / 128) ** 256
    weights = 2 * 64 * p * 3 * 2048 * 768
    router = 2 * (128 * 2048 + 2048 * 128 + 128 * 128)
    acts = 2 * 1024 * (2048 + 3 * 768 + 2048) + 2 * 256 * 2048
    assert w.bytes == pytest.approx(router + weights + acts, rel=1e-12)
    assert w.flops == pytest.approx(2.0 * 128 * 2048 * 128 + 2.0 * 1024 * 3 * 2048 * 768, rel=1e-12)


def test_memory_ep_holds_half_the_experts():
    """Qwen3-30B-A3B expert weights: 48 layers x 128 experts x 3 x 2048 x 768 x 2 bytes; EP2
    keeps 64 experts per GPU: exactly half of that less per rank than TP1."""
    model = load_model(QWEN)
    experts = 48 * 128 * 3 * 2048 * 768 * 2
    assert weight_bytes(model, 1) - weight_bytes(model, 1, 1, dp=2, ep=2) == experts // 2
    # without EP the same two GPUs split every expert's width instead: the same bytes here
    assert weight_bytes(model, 1, 1, dp=2, ep=1) == weight_bytes(model, 1, 1, dp=2, ep=2)


# ---- config errors ----------------------------------------------------------------------
def _cfg(tmp_path, model=QWEN, **par):
    w = tmp_path / "w.jsonl"
    w.write_text("".join(json.dumps({"input_toks": 40 + 8 * i, "output_toks": 3 + i % 4,
                                     "arrival_time_ns": 3_000_000 * i}) + "\n" for i in range(12)))
    return {"model": model, "hardware": "RTXPRO6000", "parallelism": par,
            "engine": {"max_num_seqs": 8, "max_num_batched_tokens": 256},
            "workload": {"path": str(w)}}


@pytest.mark.parametrize("par, key, text", [
    ({"dp": 2, "ep": 3}, "parallelism.ep", "dp x tp = 2"),
    ({"dp": 2, "tp": 2, "ep": 2}, "parallelism.ep", "dp x tp = 4"),
    ({"dp": 3, "ep": 3}, "parallelism.ep", "does not divide"),
    ({"dp": 4, "tp": 4}, "parallelism.dp", "tp x pp x dp = 16"),
    ({"dp": 0}, "parallelism.dp", ">= 1"),
])
def test_bad_parallelism_is_a_config_error(tmp_path, par, key, text):
    with pytest.raises(ConfigError) as e:
        build_simulation(_cfg(tmp_path, **par))
    assert e.value.key == key and text in str(e.value)


def test_ep_on_a_dense_model_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError) as e:
        build_simulation(_cfg(tmp_path, model="meta-llama/Llama-3.1-8B", dp=2, ep=2))
    assert e.value.key == "parallelism.ep" and "dense" in str(e.value)


def test_cli_names_the_key_and_exits_2(tmp_path, capsys):
    import yaml

    from program_layer.cli import main
    cfg = _cfg(tmp_path, dp=2, ep=3)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["run", str(path), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "parallelism.ep" in err and "Traceback" not in err


# ---- property: every call finishes, KV balances per rank ----------------------------------
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dp=st.sampled_from([1, 2, 3, 4]), tp=st.sampled_from([1, 2]), ep_on=st.booleans(),
       async_scheduling=st.booleans(), pool=st.sampled_from([None, 512, 1024]),
       sizes=st.lists(st.tuples(st.integers(1, 300), st.integers(1, 40), st.integers(0, 40_000_000)),
                      min_size=1, max_size=14),
       dense=st.booleans())
def test_every_call_finishes_and_kv_balances_per_rank(tmp_path, dp, tp, ep_on, async_scheduling, pool, sizes,
                                                      dense):
    if dp * tp > 8 or (ep_on and 128 % (dp * tp)):
        return
    w = tmp_path / "w.jsonl"
    t = 0
    lines = []
    for prompt, out, gap in sizes:
        t += gap
        lines.append(json.dumps({"input_toks": prompt, "output_toks": out, "arrival_time_ns": t}))
    w.write_text("\n".join(lines) + "\n")
    cfg = {"model": "meta-llama/Llama-3.1-8B" if dense else QWEN, "hardware": "RTXPRO6000",
           "parallelism": {"tp": tp, "dp": dp, "ep": dp * tp if ep_on and not dense and dp * tp > 1 else 1},
           "engine": {"max_num_seqs": 4, "max_num_batched_tokens": 128, "kv_pool_tokens": pool,
                      "async_scheduling": async_scheduling},
           "workload": {"path": str(w)}}
    sim = build_simulation(cfg)
    sim.run()
    assert len(sim.cluster.finished_calls) == len(sizes)
    assert len(sim.cluster.instances) == dp
    assert sim.cluster.num_instances == 1
    assert {f.info.instance for f in sim.cluster.finished_calls} == {0}
    for core in sim.cluster.instances:          # cache-lru retention: every block back
        core.kv.check_invariants()
        assert not core.scheduler.running and len(core.scheduler.waiting) == 0
        assert core.kv.num_free_blocks == core.kv.pool.num_usable
        assert core.current is None and not core.pending     # no step in flight or scheduled
    if dp > 1:
        assert sum(sim.dpep.servers[0].balancer.assigned) == len(sizes)
