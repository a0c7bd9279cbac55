"""Fast-forward is exact with KV tiers: a run's bulk steps store their new full blocks at
their own ends (``InstanceTiers.after_decode_run``), as step mode's ``after_step`` does,
refused stores (a full tier) retried every step, so every output is byte-identical with
``--step-mode``."""
from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings, strategies as st

import llmservingsim.kv_tiers as kv_tiers
from program_layer.run import build_simulation

from test_ff_equivalence import _workload
from test_ff_through_finishes import _outputs_equal


def _cfg(tmp_path, seed: int, n_programs: int, pool_blocks: int, capacity_gib: float, gbs: float,
         retention, max_num_seqs: int, budget: int) -> dict:
    return {
        "model": "meta-llama/Llama-3.1-8B", "hardware": "RTXPRO6000",
        "engine": {"kv_pool_tokens": pool_blocks * 16, "max_num_seqs": max_num_seqs,
                   "max_num_batched_tokens": budget, "max_model_len": pool_blocks * 16},
        "workload": {"path": _workload(tmp_path, seed, n_programs)},
        "policies": {"retention": retention},
        # a Llama-3.1-8B block is 2 MiB: 0.05 GiB holds 25 blocks (stores are refused while
        # every block is still in flight), 64 GiB never fills
        "kv_tiers": {"cpu": {"capacity_gib": capacity_gib, "bandwidth_gbs": gbs}},
    }


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), n_programs=st.integers(1, 6), pool_blocks=st.integers(60, 400),
       capacity_gib=st.sampled_from([0.02, 0.05, 1.0, 64.0]), gbs=st.sampled_from([0.5, 25.63]),
       retention=st.sampled_from(["cache-lru", "evict-always", {"name": "offload-ttl", "default_s": 1.0}]),
       max_num_seqs=st.integers(2, 16), budget=st.sampled_from([64, 256, 2048]))
def test_fast_forward_with_kv_tiers_matches_step_mode(tmp_path, seed, n_programs, pool_blocks, capacity_gib,
                                                      gbs, retention, max_num_seqs, budget):
    cfg = _cfg(tmp_path, seed, n_programs, pool_blocks, capacity_gib, gbs, retention, max_num_seqs, budget)
    assert _outputs_equal(tmp_path, cfg)


def test_runs_store_at_their_steps_and_retry_refusals(tmp_path, monkeypatch):
    """The property above is only meaningful if runs store blocks, and refused stores are
    met inside runs: on this cell both happen, and the outputs still match step mode."""
    attempts = {"stored": 0, "refused": 0}
    inside = [False]
    real_run, real_prepare = kv_tiers.InstanceTiers.after_decode_run, kv_tiers.TierStore.prepare_store

    def run(self, scheduled, times):
        inside[0] = True
        try:
            real_run(self, scheduled, times)
        finally:
            inside[0] = False

    def prepare(self, hashes, ready_ns, now_ns):
        new = real_prepare(self, hashes, ready_ns, now_ns)
        if inside[0]:
            attempts["refused" if new is None else "stored"] += 1
        return new

    monkeypatch.setattr(kv_tiers.InstanceTiers, "after_decode_run", run)
    monkeypatch.setattr(kv_tiers.TierStore, "prepare_store", prepare)
    rng = random.Random(3)
    cfg = _cfg(tmp_path, rng.randint(0, 10_000), 6, 300, 0.02, 0.5, "cache-lru", 8, 2048)
    states = []
    for step_mode in (False, True):
        sim = build_simulation(cfg, step_mode=step_mode)
        sim.run()
        states.append([_tier_state(inst.tiers) for inst in sim.cluster.instances])
        if not step_mode:
            assert sum(inst.scheduler.num_ff_steps for inst in sim.cluster.instances) > 0
            assert attempts["stored"] > 0 and attempts["refused"] > 0, attempts
    # the whole tier state, every block's copy end included (a store timed at the wrong
    # step end moves a ready time that the outputs need not show)
    assert states[0] == states[1]


def _tier_state(tiers) -> tuple:
    links = [(name, link.free_ns, link.busy_ns, link.bytes, link.transfers)
             for d in (tiers.d2h, tiers.h2d) for name, link in sorted(d.items())]
    stores = [(s.name, [(h, slot.ready_ns, slot.ref, slot.pins) for h, slot in s.blocks.items()],
               s.stats) for s in tiers.stores]
    return sorted(tiers.next_store.items()), links, stores
