"""What the engine core's launch and end of step rely on, over random workloads and
policies (priority preemption included), in fast-forward and step mode:

- ``SchedulerOutput.first_admitted``: after a launch every scheduled request has been
  stamped ``first_scheduled_ns`` (the launch stamps only the entries admitted by the pass,
  so the ones before them must have been stamped by an earlier launch);
- ``Scheduler.recycle``: the entries of the step in flight and of the pending step are
  distinct objects, each for its own request, a recycled output is empty, and every spare
  entry is decode-shaped (num_new 1, samples: a decode run sets only req and ctx_before).
"""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings, strategies as st

from llmservingsim.errors import StuckError
from llmservingsim.instance import Instance
from program_layer.run import build_simulation

from test_ff_equivalence import RETENTION, SCHEDULING, _workload


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), n_programs=st.integers(1, 8), pool_blocks=st.integers(60, 300),
       retention=st.sampled_from(RETENTION), scheduling=st.sampled_from(SCHEDULING),
       max_num_seqs=st.integers(2, 16), budget=st.sampled_from([64, 256, 2048]), step_mode=st.booleans())
def test_launch_stamps_and_recycled_entries(tmp_path, monkeypatch, seed, n_programs, pool_blocks, retention,
                                            scheduling, max_num_seqs, budget, step_mode):
    cfg = {
        "model": "meta-llama/Llama-3.1-8B", "hardware": "RTXPRO6000",
        "engine": {"kv_pool_tokens": pool_blocks * 16, "max_num_seqs": max_num_seqs,
                   "max_num_batched_tokens": budget, "max_model_len": pool_blocks * 16},
        "workload": {"path": _workload(tmp_path, seed, n_programs)},
        "policies": {"retention": retention, "scheduling": scheduling},
    }
    launch, end = Instance._launch, Instance._end_step
    seen = {"launches": 0}

    def checked_launch(self, out, now, timing=None):
        launch(self, out, now, timing)
        seen["launches"] += 1
        assert all(sr.req.first_scheduled_ns is not None and sr.req.first_scheduled_ns <= now
                   for sr in out.scheduled)
        if self.pending:
            live = out.scheduled + self.pending.scheduled
            assert len({id(sr) for sr in live}) == len(live)
            assert len({id(sr.req) for sr in out.scheduled}) == len(out.scheduled)

    def checked_end(self):
        out = self.current
        end(self)
        assert out.scheduled == []
        assert all(sr.num_new == 1 and sr.samples for sr in self.scheduler._spare)

    monkeypatch.setattr(Instance, "_launch", checked_launch)
    monkeypatch.setattr(Instance, "_end_step", checked_end)
    try:
        sim = build_simulation(cfg, step_mode=step_mode)
        sim.run()
    except StuckError:
        return
    assert seen["launches"] > 0
