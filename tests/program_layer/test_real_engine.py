"""The program layer on the real engine (llmservingsim) through the run wiring: Listings 2
and 4 with session affinity on two instances; eq. 2 and eq. 3 against the engine's own
measurements."""
from pathlib import Path

from program_layer import run

REPO = Path(__file__).resolve().parents[2]


def test_listings_on_the_real_engine_follow_eq2_and_eq3():
    cfg = {"model": "meta-llama/Llama-3.1-8B", "hardware": "RTXPRO6000", "parallelism": {"tp": 1},
           "workload": {"generator": "swebench", "programs": 3, "rate_jps": 1.0, "seed": 0},
           "policies": {
               "retention": "examples/policies/listing2_evolved_retention.py:EvolvedRetention",
               "scheduling": "examples/policies/listing4_evolved_scheduling.py:EvolvedScheduling",
               "routing": "session-affinity"},
           "instances": 2, "seed": 0}
    sim = run.build_simulation(cfg, base_dir=REPO)
    sim.run()
    orch = sim.orchestrator
    assert orch.programs_done()
    recs = {(r.program_id, r.call_index): r for r in orch.call_records()}
    engine = {f.info.request_id: f for f in sim.cluster.finished_calls}
    results = {r.program_id: r for r in orch.program_results()}
    for spec in sim.programs:
        assert recs[spec.program_id, 0].release_ns == spec.arrival_ns
        for k in range(1, len(spec.calls)):
            prev = recs[spec.program_id, k - 1]
            assert recs[spec.program_id, k].release_ns == prev.completion_ns + prev.tool_duration_ns
        served = sum(engine[recs[spec.program_id, k].request_id].info.completion_ns
                     - engine[recs[spec.program_id, k].request_id].first_scheduled_ns
                     for k in range(len(spec.calls)))
        assert results[spec.program_id].attained_service_ns == served
    # session affinity kept every program on one instance (no pressure in this cell)
    for spec in sim.programs:
        assert len({recs[spec.program_id, k].instance for k in range(len(spec.calls))}) == 1
