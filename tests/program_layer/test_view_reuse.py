"""Orchestrator.view hands the last view out again only while nothing it shows changed: every
view a policy gets equals, field by field, the one ``ProgramControlBlock.view`` makes at that
moment (on the fake engine for random workloads, and on the real engine with KV pressure,
residency reports, expiries and an eviction key), and the reuse does happen."""
from pathlib import Path

from hypothesis import given, settings, strategies as st

from pl_fakes import MS, S, build, make_program
from program_layer import run
from program_layer.pcb import PCBView, ProgramControlBlock
from program_layer.policies import RetentionPolicy

REPO = Path(__file__).resolve().parents[2]
FRESH = ProgramControlBlock.view


def same_view(got: PCBView, fresh: PCBView) -> None:
    for name in PCBView.__slots__:
        a, b = getattr(got, name), getattr(fresh, name)
        if name in ("_gaps", "_own_gaps"):
            assert dict(a) == dict(b), name
        else:
            assert type(a) is type(b) and a == b, (name, a, b)


def check_every_view(orch, probe: bool = False) -> list:
    """Wrap ``orch.view`` so each view served is compared with a fresh one; returns the list
    of (owner, now, view) served. With ``probe``, after every PCB or gap-log change (a
    release, a retention decision, a residency report) every program's views at that time,
    on every instance, are asked for and checked too, as an eviction key could."""
    served = []
    cached = orch.view

    def view(owner, now_ns, instance=None):
        got = cached(owner, now_ns, instance)
        same_view(got, FRESH(orch._pcbs[owner], now_ns, orch._gaps.snapshot(), instance))
        served.append((owner, now_ns, got))
        return got
    orch.view = view

    def probing(method):
        def changed(*args, **kwargs):
            method(*args, **kwargs)
            now = orch.cluster.now_ns
            for owner, pcb in list(orch._pcbs.items()):
                for instance in [None, *range(orch.cluster.num_instances)]:
                    same_view(cached(owner, now, instance),
                              FRESH(pcb, now, orch._gaps.snapshot(), instance))
        return changed
    if probe:
        for name in ("_release", "on_retention_decision", "on_residency_change"):
            setattr(orch, name, probing(getattr(orch, name)))
    return served


class ProtectSome(RetentionPolicy):
    """Protects every other program's KV for a while, releases on arrival."""
    def on_turn_complete(self, pcb, request_id, now):
        return ("protect", now + 0.5, 1.0) if pcb.program_id % 2 else "release"

    def on_turn_arrival(self, pcb, now):
        return "release" if pcb.call_index % 3 == 2 else "none"


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0, 1, 2]), st.lists(
    st.tuples(st.sampled_from([4, 8, 400]), st.sampled_from([0, 1, 2, 250]),
              st.sampled_from(["a", "b", None])),
    min_size=1, max_size=4)), min_size=1, max_size=5), st.integers(1, 3),
    st.sampled_from(["round-robin", "least-loaded", "session-affinity"]), st.booleans())
def test_served_views_equal_fresh_ones(progs, num_instances, routing, probe):
    """Times on a coarse grid (1 ms services and gaps, zero gaps), so that releases,
    completions and decisions of several programs often fall on one instant."""
    programs = [make_program(i, arr * MS, [(p, 1, g * MS, tool) for p, g, tool in calls])
                for i, (arr, calls) in enumerate(progs)]
    cluster, orch = build(programs, num_instances=num_instances, routing=routing,
                          retention=ProtectSome(), scheduling="plas",
                          service_ns=lambda c: c.prompt_tokens * MS // 4)
    served = check_every_view(orch, probe)
    orch.start()
    cluster.run()
    assert orch.programs_done()
    assert len(served) == 4 * sum(len(p.calls) for p in programs)


def test_views_are_reused_while_nothing_changed(monkeypatch):
    """One instance, cache-lru: per call routing, priority and the arrival hook see one view
    (the first call of a program needs a second one: its dispatch sets prior_instance), the
    completion hook a new one."""
    built = []
    make = ProgramControlBlock.view

    def counting(self, *args):
        built.append(self.program_id)
        return make(self, *args)
    monkeypatch.setattr(ProgramControlBlock, "view", counting)
    a = make_program(0, 0, [(100, 10, S // 2, "search"), (200, 10, S // 4, "calc"),
                            (300, 10, 0, None)], session="A")
    b = make_program(1, 200 * MS, [(100, 10, 100 * MS, "search"), (150, 10, 0, None)],
                     session="B")
    cluster, orch = build([a, b])
    served = check_every_view(orch)
    orch.start()
    cluster.run()
    assert len(served) == 4 * 5
    assert built.count(0) == 3 + 2 + 2 and built.count(1) == 3 + 2
    assert len({id(v) for _, _, v in served}) == 12


KEYED_TTL = """
from program_layer.policies import RetentionPolicy

class KeyedTTL(RetentionPolicy):
    # TTL with a policy eviction key that reads the program's view
    def on_turn_complete(self, pcb, request_id, now):
        return ("protect", now + 3.0, float(pcb.context_tokens))

    def on_turn_arrival(self, pcb, now):
        return "release"

    def eviction_key(self, entry, now):
        prog = entry.program
        return (entry.protected, -1.0 if prog is None else prog.attained_service_s, entry.value)
"""


def test_served_views_equal_fresh_ones_on_the_real_engine(tmp_path):
    (tmp_path / "keyed.py").write_text(KEYED_TTL)
    cfg = {"model": "meta-llama/Llama-3.1-8B", "hardware": "RTXPRO6000", "parallelism": {"tp": 1},
           "workload": {"generator": "swebench", "programs": 6, "rate_jps": 2.0, "seed": 1},
           "policies": {"retention": "keyed.py:KeyedTTL", "scheduling": "plas",
                        "routing": "session-affinity"},
           "instances": 2, "seed": 0, "engine": {"kv_pool_tokens": 30000}}
    sim = run.build_simulation(cfg, base_dir=tmp_path)
    served = check_every_view(sim.orchestrator, probe=True)
    sim.run()
    assert sim.orchestrator.programs_done()
    calls = sum(len(p.calls) for p in sim.programs)
    assert len(served) > 4 * calls          # the eviction key asked for views too (KV pressure)
    assert len({id(v) for _, _, v in served}) < len(served) * 0.6


def test_a_gap_observed_at_the_same_time_is_seen():
    """Another program's release at the same instant adds a gap: the next view shows it."""
    a = make_program(0, 0, [(100, 10, 0, "t"), (100, 10, 0, None)])
    cluster, orch = build([a])
    orch.start()
    cluster.run()
    now = cluster.now_ns
    before = orch.view(0, now)
    assert len(before.tool_gap_history("t")) == 1
    orch._gaps.add("t", 5 * MS)           # what a release of another program does
    after = orch.view(0, now)
    assert after is not before and after.tool_gap_history("t") == (0.0, 0.005)
    assert orch.view(0, now) is after
