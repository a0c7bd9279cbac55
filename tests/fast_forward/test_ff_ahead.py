"""The launch after a spanning fast-forward run, with its step's end applied ahead
(llmservingsim/fast_forward.py, "The launch after a spanning run"; issue 15) stays exact.

The run applies that step's end (its sampled tokens) in bulk and makes only its
publications at its launch, after the schedule there; that schedule sees the requests whose
token completes a block one token short (step mode's placeholder). Checked on the outputs,
and directly: at every launch fast-forward executes, the engine state the schedule reads
(every running request's tokens, computed and known tokens, held and published blocks,
status; the waiting queue; the free blocks) equals step mode's at the same launch.
"""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings

import llmservingsim.fast_forward as ff
from llmservingsim.errors import StuckError
from llmservingsim.instance import Instance
from program_layer.run import build_simulation

from test_ff_spans import _cfg, _seen, _streams
from test_ff_through_finishes import _outputs_equal


def _launch_states(cfg, step_mode: bool, monkeypatch) -> dict:
    """{(time, instance): the state at that launch's entry} of every executed launch. At an
    ahead launch the batch's requests hold their token of the launched step already, but
    for those whose token completes a block (its num_known_tokens a multiple of the block
    size), one short as in step mode: their tokens are given here as step mode has them,
    so a request shown one token off is one the schedule would read wrongly."""
    states = {}
    launch, ahead = Instance._launch, ff._launch_ahead
    inside = [False]

    def seen(self, out, now, timing=None):
        kv = self.kv
        sched = self.scheduler
        bs = kv.block_size
        run = tuple((r.request_id, r.num_tokens - (inside[0] and r.num_known_tokens % bs != 0),
                     r.num_computed_tokens, r.num_known_tokens, r.status,
                     len(kv.req_blocks.get(r.request_id, ())), kv.num_cached_blocks.get(r.request_id))
                    for r in sched.running)
        waiting = tuple((r.request_id, r.num_tokens, r.num_computed_tokens) for r in sched.waiting)
        states[(now, self.index)] = (run, waiting, kv.pool.num_free)
        inside[0] = False
        launch(self, out, now, timing)

    def ahead_seen(*args):
        inside[0] = True
        ahead(*args)
    with monkeypatch.context() as m:
        m.setattr(Instance, "_launch", seen)
        m.setattr(ff, "_launch_ahead", ahead_seen)
        build_simulation(cfg, step_mode=step_mode).run()
    return states


def _aheads(monkeypatch, cfg) -> tuple[int, int]:
    """(ahead launches, their late publications) of a fast-forward run of ``cfg``."""
    n = [0, 0]
    real = ff._launch_ahead

    def counted(inst, nxt, t, timing, late):
        n[0] += 1
        n[1] += len(late)
        real(inst, nxt, t, timing, late)
    with monkeypatch.context() as m:
        m.setattr(ff, "_launch_ahead", counted)
        build_simulation(cfg).run()
    return n[0], n[1]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(**_streams)
def test_executed_launches_see_step_modes_state(tmp_path, monkeypatch, seed, n_programs, gap_ns, pool_blocks,
                                                max_num_seqs, budget, retention, instances, routing, scheduling):
    cfg = _cfg(tmp_path, seed, n_programs, gap_ns, pool_blocks, max_num_seqs, budget, retention, instances,
               routing, scheduling)
    try:
        fast = _launch_states(cfg, False, monkeypatch)
    except StuckError:
        return
    step = _launch_states(cfg, True, monkeypatch)
    for key, state in fast.items():
        assert state == step[key], key
    assert _outputs_equal(tmp_path, cfg)


def test_ahead_launches_are_taken_and_exact(tmp_path, monkeypatch):
    """The ahead launches happen, with publications made at them, and the launches, the
    loads the arrivals read and the outputs are step mode's (one instance, and three with a load-reading routing)."""
    for instances, routing in ((1, "round-robin"), (3, "least-loaded")):
        cfg = _cfg(tmp_path, 3, 120, 40_000_000, instances=instances, routing=routing)
        launches, late = _aheads(monkeypatch, cfg)
        assert launches >= 10 and late >= 3
        fast = _launch_states(cfg, False, monkeypatch)
        step = _launch_states(cfg, True, monkeypatch)
        assert all(state == step[key] for key, state in fast.items())
        # what the arrivals read (the loads: tokens held ahead are subtracted)
        assert _seen(cfg, False, monkeypatch) == _seen(cfg, True, monkeypatch)
        assert _outputs_equal(tmp_path, cfg)
