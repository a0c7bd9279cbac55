"""Fast-forward's bulk metrics (``MetricsCollector.on_decode_steps``) record exactly what the
step-by-step path records.

- Whole runs: with the per-step trace on, the trace rows (step index included), every
  instance's totals by second and sampled state runs, and the token and busy-time totals of
  a fast-forwarded run equal those of the same run in step mode, over random workloads;
- one call: a run of decode steps recorded in one call equals the reference, each step
  sampled at its start and recorded by ``_record`` (what the step-by-step loop's launch
  does), on random step times crossing second boundaries.
"""
from __future__ import annotations

from types import SimpleNamespace

from hypothesis import HealthCheck, given, settings, strategies as st

from llmservingsim.errors import StuckError
from llmservingsim.metrics import NS_PER_S, MetricsCollector
from llmservingsim.step_timer import StepTiming
from program_layer.run import build_simulation

from test_ff_equivalence import RETENTION, _workload


def _metrics(cfg: dict, step_mode: bool):
    try:        # a call larger than the pool: both modes must say so
        sim = build_simulation(cfg, trace_steps=True, step_mode=step_mode)
        sim.run()
    except StuckError:
        return None
    m = sim.metrics
    series = [(s.bins, s.prompt, s.gen, s.busy_ns, s.run_bins, s.run_states, s.next_bin) for s in m.series]
    ff = sum(inst.scheduler.num_ff_steps for inst in sim.cluster.instances)
    return (m.trace_rows, series, m.prompt_tokens, m.gen_tokens, m.compute_ns, m.comm_ns, m.overhead_ns), ff


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), n_programs=st.integers(1, 8), pool_blocks=st.integers(60, 400),
       retention=st.sampled_from(RETENTION), instances=st.integers(1, 2), max_num_seqs=st.integers(2, 16))
def test_bulk_metrics_match_step_mode(tmp_path, seed, n_programs, pool_blocks, retention, instances, max_num_seqs):
    cfg = {
        "model": "meta-llama/Llama-3.1-8B", "hardware": "RTXPRO6000", "instances": instances,
        "engine": {"kv_pool_tokens": pool_blocks * 16, "max_num_seqs": max_num_seqs,
                   "max_model_len": pool_blocks * 16},
        "workload": {"path": _workload(tmp_path, seed, n_programs)},
        "policies": {"retention": retention},
    }
    ff, step = _metrics(cfg, False), _metrics(cfg, True)
    assert (ff is None) == (step is None)
    if ff is not None:
        assert step[1] == 0
        assert ff[0] == step[0]


def test_bulk_metrics_engage(tmp_path):
    """The property above is only meaningful if runs are fast-forwarded with the trace on."""
    cfg = {
        "model": "meta-llama/Llama-3.1-8B", "hardware": "RTXPRO6000",
        "engine": {"kv_pool_tokens": 400 * 16, "max_num_seqs": 8, "max_model_len": 400 * 16},
        "workload": {"path": _workload(tmp_path, 7, 4)},
    }
    got = _metrics(cfg, False)
    assert got is not None and got[1] > 100
    assert got[0] == _metrics(cfg, True)[0]


class _Pool:
    def __init__(self, used: int):
        self.num_usable, self.num_free = 1000, 1000 - used

    def usage(self) -> float:
        return (self.num_usable - self.num_free) / self.num_usable


def _instance(index: int, used: int):
    sched = SimpleNamespace(running=[0] * 3, waiting=[0] * (index + 1))
    return SimpleNamespace(index=index, num_steps=0, loop=SimpleNamespace(watch=lambda f, t: None),
                           scheduler=sched, kv=SimpleNamespace(pool=_Pool(used)))


def _state(m: MetricsCollector):
    return ([(s.bins, s.prompt, s.gen, s.busy_ns, s.run_bins, s.run_states, s.next_bin) for s in m.series],
            m.trace_rows, m.prompt_tokens, m.gen_tokens, m.compute_ns, m.comm_ns, m.overhead_ns)


@settings(max_examples=300, deadline=None)
@given(first=st.integers(0, 5 * NS_PER_S), gap=st.integers(0, 2 * NS_PER_S),
       steps=st.lists(st.tuples(st.integers(1, 3 * NS_PER_S // 4), st.integers(0, 10**6), st.integers(0, 10**6)),
                      min_size=1, max_size=40),
       used=st.lists(st.integers(0, 999), min_size=41, max_size=41), n=st.integers(1, 64))
def test_one_call_per_sample_equals_step_by_step(first, gap, steps, used, n):
    """After an executed step and an idle gap, a run of decode steps whose KV usage before
    step k's launch is ``used[k]`` (KV events between the steps): recorded in calls split
    where ``on_decode_steps`` says the next start samples, the state set before each call
    as it is at that call's last start (what fast_forward._apply does), or step by step
    with the state of each step's start."""
    # the run starts when the executed step (of max(gap, 1) ns, below) ends: steps never overlap
    times, t = [], first + max(gap, 1)
    for compute, comm, overhead in steps:
        total = compute + comm + overhead
        times.append((t, StepTiming(total, compute, comm, overhead)))
        t += total
    results = []
    calls = 0
    for bulk in (True, False):
        m = MetricsCollector(2, trace=True)
        inst = _instance(1, 7)
        inst.num_steps += 1         # an executed step opens the series
        m._record(inst, first, StepTiming(max(gap, 1), max(gap, 1), 0, 0), 5, 1, 1, 0, 1)
        if bulk:
            due, lo = -1, 0
            while lo < len(times):
                hi = lo
                while hi < len(times) and times[hi][0] <= due:
                    hi += 1
                last = min(hi + 1, len(times))
                inst.kv.pool = _Pool(used[last - 1])
                inst.num_steps += last - lo
                due = m.on_decode_steps(inst, times, lo, last, n)
                calls += 1
                lo = last
        else:
            s = m.series[inst.index]
            for k, (now, timing) in enumerate(times):
                inst.kv.pool = _Pool(used[k])
                inst.num_steps += 1
                upto = -(-now // NS_PER_S)
                if s.next_bin < upto:
                    s.sample(upto)
                m._record(inst, now, timing, 0, n, 0, n, n)
        m._sample_all(t + 3 * NS_PER_S)
        results.append(_state(m))
    assert results[0] == results[1]
    assert calls <= 2 + (times[-1][0] - times[0][0]) // NS_PER_S + 1     # one per second crossed
