"""ProgramHooks: the four engine hooks on top of the Orchestrator and planes."""
import pytest

from hooks import CallInfo, Hooks, KVEntryInfo, default_eviction_key
from llmservingsim.errors import WorkloadError
from pl_fakes import MS, S, build, make_program
from program_layer.policies import RetentionPolicy


def test_bundle_priority_residency_and_victim_key():
    prog = make_program(0, 0, [(100, 10, S, "t"), (120, 10, 0, None)], session="x")
    cluster, orch = build([prog], retention="ttl", scheduling="plas")
    hooks = cluster.hooks
    assert isinstance(hooks, Hooks)
    assert hooks.priority is hooks.retention is hooks.victim_protection is hooks.residency
    orch.start()
    cluster.run()
    assert [r.priority for r in orch.call_records()] == [0, 1000]
    entry = KVEntryInfo(owner=0, instance=0, created_ns=S, deadline_ns=3 * S, value=None,
                        num_blocks=7, seq=0)
    assert hooks.victim_protection.eviction_key(entry, 2 * S) == default_eviction_key(
        entry, 2 * S)
    # the engine reports the entry reclaimed: the PCB (and so views) follow
    hooks.residency.on_residency(0, 0, 0, False, 4 * S)
    v = orch.view(0, 4 * S)
    assert (v.kv_protected, v.kv_resident_tokens, v.kv_instance, v.kv_deadline_s) == (
        False, 0, None, None)
    hooks.residency.on_residency(0, 0, 64, True, 4 * S)
    v = orch.view(0, 4 * S)
    assert (v.kv_resident_tokens, v.kv_instance) == (64, 0)
    hooks.residency.on_residency(99, 0, 64, True, 4 * S)      # unknown owner: ignored


def test_policy_eviction_key_sees_entry_and_program():
    seen = []

    class ByContext(RetentionPolicy):
        def on_turn_complete(self, pcb, request_id, now):
            return ("protect", now + 10.0, 1.0)

        def eviction_key(self, entry, now):
            seen.append((entry.owner, entry.protected, entry.program.context_tokens))
            return (entry.protected, -entry.program.context_tokens)

    prog = make_program(0, 0, [(100, 10, 0, None)])
    cluster, orch = build([prog], retention=ByContext())
    orch.start()
    cluster.run()
    entry = KVEntryInfo(owner=0, instance=0, created_ns=S, deadline_ns=11 * S, value=1.0,
                        num_blocks=7, seq=3)
    assert cluster.hooks.victim_protection.eviction_key(entry, 2 * S) == (True, -110, 3)
    assert seen == [(0, True, 110)]


def test_preemptions_from_call_info_when_the_engine_reports_them():
    prog = make_program(0, 0, [(100, 10, 0, None)])
    cluster, orch = build([prog])
    orch.start()
    finished = cluster.on_request_finished

    def with_preemptions(info: CallInfo):     # CallInfo extended as the engine may extend it
        extended = type("Info", (), {s: getattr(info, s) for s in CallInfo.__slots__})()
        extended.num_preemptions = 2
        finished(extended)

    cluster.on_request_finished = with_preemptions
    cluster.run()
    assert orch.call_records()[0].num_preemptions == 2
    assert orch.program_results()[0].num_preemptions == 2


@pytest.mark.parametrize("mutate, msg", [
    (lambda p: p[1].__setattr__("program_id", 0), "duplicate program id"),
    (lambda p: p[0].__setattr__("calls", []), "has no calls"),
    (lambda p: p[0].calls[1].__setattr__("call_index", 5), "call 1 has owner 0 and index 5"),
    (lambda p: p[0].calls[0].__setattr__("tool_duration_ns", -1), "negative tool duration"),
])
def test_workload_validation(mutate, msg):
    progs = [make_program(0, 0, [(1, 1, 0, None), (1, 1, 0, None)], session="a"),
             make_program(1, 0, [(1, 1, 0, None)], session="b")]
    mutate(progs)
    with pytest.raises(WorkloadError, match=msg):
        build(progs)


def test_unknown_request_and_unbound_hooks_are_internal_errors():
    from program_layer.program_hooks import ProgramHooks

    with pytest.raises(RuntimeError, match="before an Orchestrator was bound"):
        ProgramHooks().priority(CallInfo(0, 0, 0, 0, 1, 1), 0)
    cluster, orch = build([make_program(0, 0, [(1, 1, 0, None)])])
    with pytest.raises(RuntimeError, match="never released"):
        orch.on_request_finished(CallInfo(5, 0, 0, 0, 1, 1, 0, MS))
