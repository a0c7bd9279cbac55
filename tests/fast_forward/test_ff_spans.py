"""Fast-forward runs that span events (llmservingsim/fast_forward.py, issue 15) stay exact.

A run may take the step that contains the next event (an arrival) as its last bulk step:
everything an event inside it reads (``Cluster.load`` of every instance, ``current`` and
``step_end_ns`` through a submit, the priority hook, the metrics watcher) must be what step
mode has while that step is in flight. Checked on dense-arrival streams, one instance and
several, routings that read the loads and that do not, priorities, and directly: the loads
every release reads and every request's ingest time and priority equal step mode's.
"""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings, strategies as st

import llmservingsim.fast_forward as ff
from llmservingsim.cluster import Cluster
from llmservingsim.instance import Instance
from program_layer.run import build_simulation

from test_ff_short_runs import _cfg as _dense_cfg
from test_ff_through_finishes import _outputs_equal

ROUTING = ["round-robin", "least-loaded", "session-affinity", "least-ect"]
SCHEDULING = ["fcfs", "program-fcfs", "plas"]


def _cfg(tmp_path, seed, n_programs, gap_ns, pool_blocks=800, max_num_seqs=64, budget=2048,
         retention="cache-lru", instances=1, routing="round-robin", scheduling="fcfs") -> dict:
    cfg = _dense_cfg(tmp_path, seed, n_programs, gap_ns, pool_blocks, max_num_seqs, budget, retention, instances)
    cfg["policies"]["routing"] = routing
    cfg["policies"]["scheduling"] = scheduling
    return cfg


def _seen(cfg, step_mode: bool, monkeypatch) -> tuple[list, list]:
    """What the arrivals read: every ``Cluster.load`` (time, instance, load) and, per
    submitted request, (id, time, ingest time, priority, whether its instance was idle)."""
    loads, submits = [], []
    load, submit = Cluster.load, Instance.submit

    def load_seen(self, i):
        got = load(self, i)
        loads.append((self.loop.now, i, got))
        return got

    def submit_seen(self, req, ingest_hooks=True):
        idle = self.current is None
        submit(self, req, ingest_hooks)
        submits.append((req.request_id, self.loop.now, req.queued_ns, req.priority, idle))
    monkeypatch.setattr(Cluster, "load", load_seen)
    monkeypatch.setattr(Instance, "submit", submit_seen)
    try:
        sim = build_simulation(cfg, step_mode=step_mode)
        sim.run()
    finally:
        monkeypatch.setattr(Cluster, "load", load)
        monkeypatch.setattr(Instance, "submit", submit)
    return loads, submits


_streams = dict(seed=st.integers(0, 10_000), n_programs=st.integers(2, 40),
                gap_ns=st.sampled_from([5_000_000, 20_000_000, 60_000_000]), pool_blocks=st.integers(40, 800),
                max_num_seqs=st.integers(2, 64), budget=st.sampled_from([64, 2048]),
                retention=st.sampled_from(["cache-lru", "cache-lru", "cache-lru", "evict-always"]),
                instances=st.integers(1, 3), routing=st.sampled_from(ROUTING),
                scheduling=st.sampled_from(SCHEDULING))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(**_streams)
def test_runs_spanning_arrivals_match_step_mode(tmp_path, seed, n_programs, gap_ns, pool_blocks, max_num_seqs,
                                                budget, retention, instances, routing, scheduling):
    cfg = _cfg(tmp_path, seed, n_programs, gap_ns, pool_blocks, max_num_seqs, budget, retention, instances,
               routing, scheduling)
    assert _outputs_equal(tmp_path, cfg)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(**_streams)
def test_arrivals_inside_a_run_read_step_modes_state(tmp_path, monkeypatch, seed, n_programs, gap_ns, pool_blocks,
                                                     max_num_seqs, budget, retention, instances, routing,
                                                     scheduling):
    """Stronger than the outputs: every load a release reads (all fields, every instance)
    and every request's ingest time, priority and idle-or-busy instance at its submit."""
    from llmservingsim.errors import StuckError
    cfg = _cfg(tmp_path, seed, n_programs, gap_ns, pool_blocks, max_num_seqs, budget, retention, instances,
               routing, scheduling)
    try:
        fast = _seen(cfg, False, monkeypatch)
    except StuckError:
        return
    assert fast == _seen(cfg, True, monkeypatch)


def _spans(monkeypatch, cfg) -> list:
    """(time, instance, tokens ahead) of every instance inside a spanning run at a submit."""
    inside = []
    submit = Cluster.submit

    def submit_seen(self, instance, call, request_id):
        inside.extend((self.loop.now, inst.index, inst.tokens_ahead) for inst in self.instances
                      if inst.tokens_ahead)
        submit(self, instance, call, request_id)
    monkeypatch.setattr(Cluster, "submit", submit_seen)
    try:
        build_simulation(cfg).run()
    finally:
        monkeypatch.setattr(Cluster, "submit", submit)
    return inside


def test_runs_span_arrivals(tmp_path, monkeypatch):
    """The spanning runs are taken: arrivals land inside one (one instance; three with a
    load-reading routing, where the events spanned are mostly the other instances' steps),
    and the outputs stay step mode's."""
    for instances, routing, least in ((1, "round-robin", 5), (3, "least-loaded", 1)):
        cfg = _cfg(tmp_path, 3, 120, 40_000_000, instances=instances, routing=routing)
        assert len(_spans(monkeypatch, cfg)) >= least
        assert _outputs_equal(tmp_path, cfg)


def test_a_retention_hook_stops_a_run_before_an_arrival(tmp_path, monkeypatch):
    """``on_arrival`` may release KV entries on every instance: no run spans an arrival."""
    cfg = _cfg(tmp_path, 3, 120, 40_000_000, retention="evict-always")
    assert _spans(monkeypatch, cfg) == []
    assert _outputs_equal(tmp_path, cfg)
