"""Orchestrator: eq. 2 release times, eq. 3 attained service, request ids, results."""
from hypothesis import given, settings, strategies as st

from pl_fakes import MS, S, build, make_program


def two_programs():
    a = make_program(0, 0, [(100, 10, S // 2, "search"), (200, 10, S // 4, "calc"),
                            (300, 10, 0, None)], session="A")
    b = make_program(1, 200 * MS, [(100, 10, 100 * MS, "search"), (150, 10, 0, None)],
                     session="B")
    return [a, b]


def test_release_times_follow_eq2_and_service_excludes_initial_queueing():
    cluster, orch = build(two_programs())
    orch.start()
    cluster.run()
    assert orch.programs_done()
    rec = {(r.session_id, r.call_index): r for r in orch.call_records()}
    # hand-computed: one instance, one call at a time, 1 s per call, FCFS
    assert [rec["A", k].release_ns for k in range(3)] == [0, 1500 * MS, 3250 * MS]
    assert [rec["B", k].release_ns for k in range(2)] == [200 * MS, 2100 * MS]
    assert [rec["A", k].first_scheduled_ns for k in range(3)] == [0, 2 * S, 4 * S]
    assert [rec["B", k].first_scheduled_ns for k in range(2)] == [1 * S, 3 * S]
    # eq. 2 exactly: r_{k+1} = c_k + g_k
    for sid, n in (("A", 3), ("B", 2)):
        for k in range(n - 1):
            assert rec[sid, k + 1].release_ns == rec[sid, k].completion_ns + rec[
                sid, k].tool_duration_ns
    res = {r.session_id: r for r in orch.program_results()}
    assert res["A"].completion_ns == 5 * S and res["A"].jct_ns == 5 * S
    assert res["B"].completion_ns == 4 * S and res["B"].jct_ns == 3800 * MS
    # A_p: 1 s per call, queueing (0.5 s + 1 s + 0.75 s for A) excluded
    assert res["A"].attained_service_ns == 3 * S
    assert res["B"].attained_service_ns == 2 * S
    assert [r.queue_delay_ns for r in orch.call_records()] == [0, 800 * MS, 500 * MS,
                                                               900 * MS, 750 * MS]


def test_request_ids_follow_release_order_and_runs_are_deterministic():
    def run():
        cluster, orch = build(two_programs())
        orch.start()
        cluster.run()
        return cluster.submitted, orch.call_records(), orch.program_results()

    first = run()
    assert [(rid, owner, k) for _, _, rid, owner, k in first[0]] == [
        (0, 0, 0), (1, 1, 0), (2, 0, 1), (3, 1, 1), (4, 0, 2)]
    assert run() == first


def test_service_includes_waiting_after_first_admission():
    """Eq. 3 counts completion - first admission: a slow call on a 2-slot instance."""
    progs = [make_program(0, 0, [(2000, 1, 0, None)]), make_program(1, 0, [(500, 1, 0, None)])]
    cluster, orch = build(progs, slots=2, service_ns=lambda c: c.prompt_tokens * MS)
    orch.start()
    cluster.run()
    res = orch.program_results()
    assert [r.attained_service_ns for r in res] == [2 * S, S // 2]


def test_plas_runs_fresh_program_before_long_served_one():
    from program_layer.policies import RoutingPolicy

    class Pinned(RoutingPolicy):      # P0's first call on instance 1, everything else on 0
        def select(self, pcb, inflight, now):
            return 1 if (pcb.program_id, pcb.call_index) == (0, 0) else 0

    def run(scheduling):
        blocker = make_program(9, 0, [(3000, 1, 0, None)], session="blocker")
        p0 = make_program(0, 0, [(1000, 1, 0, "t"), (1000, 1, 0, None)], session="P0")
        p1 = make_program(1, 2 * S, [(1000, 1, 0, None)], session="P1")
        cluster, orch = build([blocker, p0, p1], scheduling=scheduling, routing=Pinned(),
                              num_instances=2, service_ns=lambda c: c.prompt_tokens * MS)
        orch.start()
        cluster.run()
        return {(r.session_id, r.call_index): (r.first_scheduled_ns, r.priority)
                for r in orch.call_records()}

    fcfs, plas = run("fcfs"), run("plas")
    assert fcfs["P0", 1] == (3 * S, 1 * S) and fcfs["P1", 0] == (4 * S, 2 * S)
    assert plas["P1", 0] == (3 * S, 0) and plas["P0", 1] == (4 * S, 1000)


def test_ttl_protects_until_completion_plus_tau_and_view_sees_protection():
    from program_layer.policies import SchedulingPolicy

    seen = []

    class Spy(SchedulingPolicy):
        def priority(self, pcb, now):
            seen.append((pcb.call_index, pcb.kv_protected, pcb.kv_deadline_s,
                         pcb.gap_elapsed_s(now), pcb.tool_name, pcb.context_tokens))
            return 0

    prog = make_program(0, 0, [(100, 20, S // 2, "search"), (150, 5, 0, None)])
    cluster, orch = build([prog], retention={"name": "ttl", "tau_s": 2.0}, scheduling=Spy())
    orch.start()
    cluster.run()
    kinds = [(rid, now, d.kind, d.deadline_ns) for rid, now, d in cluster.completion_decisions]
    assert kinds == [(0, S, "protect", 3 * S), (1, 2500 * MS, "protect", 4500 * MS)]
    assert [d.kind for _, d in cluster.arrival_decisions] == ["release", "release"]
    # call 1 is dispatched (before its arrival releases the entry): KV protected till 3 s
    assert seen == [(0, False, None, None, None, 100), (1, True, 3.0, 0.5, "search", 150)]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3000), st.lists(
    st.tuples(st.integers(1, 2000), st.integers(0, 2000)), min_size=1, max_size=4)),
    min_size=1, max_size=5), st.integers(1, 3), st.integers(1, 2))
def test_eq2_and_eq3_hold_for_random_workloads(progs, num_instances, slots):
    programs = [make_program(i, arr * MS, [(p, 1, g * MS, "t") for p, g in calls])
                for i, (arr, calls) in enumerate(progs)]
    cluster, orch = build(programs, num_instances=num_instances, slots=slots,
                          routing="least-loaded", scheduling="plas",
                          service_ns=lambda c: c.prompt_tokens * MS // 2)
    orch.start()
    cluster.run()
    assert orch.programs_done()
    recs = {(r.program_id, r.call_index): r for r in orch.call_records()}
    for spec in programs:
        assert recs[spec.program_id, 0].release_ns == spec.arrival_ns
        for k in range(1, len(spec.calls)):
            prev = recs[spec.program_id, k - 1]
            assert recs[spec.program_id, k].release_ns == prev.completion_ns + prev.tool_duration_ns
        res = orch.program_results()[spec.program_id]
        assert res.attained_service_ns == sum(c.prompt_tokens * MS // 2 for c in spec.calls)
        assert res.completion_ns == recs[spec.program_id, len(spec.calls) - 1].completion_ns
