"""Planes: decision conversion and PolicyError messages."""
import pytest

from hooks import EVICT, NONE, RELEASE, KVEntryInfo, RetentionDecision, default_eviction_key
from llmservingsim.errors import PolicyError
from pl_fakes import MS, S, build, make_program
from pl_views import view
from program_layer.dispatch import DispatchPlane
from program_layer.policies import (FCFS, RetentionPolicy, RoundRobin, RoutingPolicy,
                                    SchedulingPolicy, Signals)
from program_layer.retention import RetentionPlane


class Fixed(RetentionPolicy):
    def __init__(self, complete, arrival="none"):
        self.complete, self.arrival = complete, arrival

    def on_turn_complete(self, pcb, request_id, now):
        return self.complete

    def on_turn_arrival(self, pcb, now):
        return self.arrival


def test_retention_decisions_convert_to_engine_terms():
    v = view()
    now = 5 * S

    def done(raw):
        return RetentionPlane(Fixed(raw)).on_complete(v, 0, Signals(), now)

    assert done(("protect", 7.25)) == RetentionDecision("protect", deadline_ns=7250 * MS)
    assert done(("protect", 7.25, 3)) == RetentionDecision("protect", 7250 * MS, 3.0)
    assert done(["protect", 7.25]) == RetentionDecision("protect", deadline_ns=7250 * MS)
    assert done(("protect", 5.0)) is RELEASE          # d = c: release at completion
    assert done(("protect", 4.0)) is RELEASE
    assert done("release") is RELEASE and done("evict") is EVICT
    assert done("none") is RELEASE                     # no entry yet: engine default
    def arrive(raw):
        return RetentionPlane(Fixed("release", raw)).on_arrival(v, Signals(), now)

    assert arrive("none") is NONE and arrive("release") is RELEASE and arrive("evict") is EVICT
    assert arrive(("protect", 9.0)) is NONE     # the engine keeps the entry as it is
    with pytest.raises(PolicyError, match="on_turn_arrival: protect deadline"):
        arrive(("protect", float("nan")))


@pytest.mark.parametrize("raw, detail", [
    ("keep", "returned 'keep'; expected ('protect', until[, value]), ('offload', until[, value]), "
             "'release', 'evict' or 'none'"),
    (("protect", float("nan")), "protect deadline 'until' must be finite, got nan"),
    (("protect", "7"), "protect deadline 'until' must be a number, got '7' (str)"),
    (("protect", 7.0, float("inf")), "protect value must be finite, got inf"),
    (None, "returned None (NoneType); expected ('protect', until[, value]), ('offload', until[, value]), "
           "'release', 'evict' or 'none'"),
])
def test_invalid_retention_decisions_raise_policy_error(raw, detail):
    plane = RetentionPlane(Fixed(raw))
    with pytest.raises(PolicyError) as err:
        plane.on_complete(view(session_id="agent-7", call_index=3), 0, Signals(), 1_500 * MS)
    assert str(err.value) == (
        "key 'policies.retention': retention policy Fixed failed for program 'agent-7' "
        f"call 3 at t=1.500000000 s: on_turn_complete: {detail}")


def test_raising_policy_message_names_policy_program_call_and_time():
    class Boom(SchedulingPolicy):
        def priority(self, pcb, now):
            return 1 / 0

    Boom.spec_label = "my/pol.py:Boom"
    plane = DispatchPlane(RoundRobin(), Boom(), 2)
    with pytest.raises(PolicyError) as err:
        plane.decide(lambda i: view(session_id="A", call_index=2), (None, None),
                     lambda i: Signals(), 2 * S + 1)
    assert str(err.value) == (
        "key 'policies.scheduling': scheduling policy Boom (my/pol.py:Boom) failed for "
        "program 'A' call 2 at t=2.000000001 s: priority: ZeroDivisionError: division by zero")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("ret, detail", [
    (2, "selected instance 2 out of range [0, 2)"),
    (-1, "selected instance -1 out of range [0, 2)"),
    (1.0, "selected instance must be an int, got 1.0 (float)"),
    (True, "selected instance must be an int, got True (bool)"),
])
def test_routing_validation(ret, detail):
    class R(RoutingPolicy):
        def select(self, pcb, inflight, now):
            return ret

    with pytest.raises(PolicyError, match="routing policy R failed for program 's0' call 0 "
                                          r"at t=0.000000000 s: select: " + detail.replace(
                                              "[", r"\[").replace("(", r"\(").replace(
                                              ")", r"\)")):
        DispatchPlane(R(), FCFS(), 2).decide(lambda i: view(), (None, None),
                                             lambda i: Signals(), 0)


@pytest.mark.parametrize("q", [1.5, "3", None, float("nan"), True])
def test_non_int_priority_is_rejected(q):
    class Q(SchedulingPolicy):
        def priority(self, pcb, now):
            return q

    with pytest.raises(PolicyError, match="priority: priority must be an int"):
        DispatchPlane(RoundRobin(), Q(), 1).decide(lambda i: view(), (None,),
                                                   lambda i: Signals(), 0)


def test_numpy_integer_priority_is_accepted():
    np = pytest.importorskip("numpy")

    class Q(SchedulingPolicy):
        def priority(self, pcb, now):
            return np.int64(42)

    inst, q = DispatchPlane(RoundRobin(), Q(), 1).decide(lambda i: view(), (None,),
                                                         lambda i: Signals(), 0)
    assert (inst, q, type(q)) == (0, 42, int)


def test_scheduling_sees_chosen_instance_signals_and_residency():
    seen = {}

    class Two(RoutingPolicy):
        def select(self, pcb, inflight, now):
            seen["route_kv"] = (pcb.kv_instance, pcb.kv_protected)
            return 1

    class S_(SchedulingPolicy):
        def priority(self, pcb, now):
            seen["sched"] = (self.signals.instance, pcb.kv_protected, pcb.kv_resident_tokens)
            return 0

    def view_on(instance):
        on = instance in (None, 0)
        return view(kv_instance=0, kv_protected=on, kv_resident_tokens=100 if on else 0)

    DispatchPlane(Two(), S_(), 2).decide(view_on, (None, None),
                                         lambda i: Signals(instance=i), 0)
    assert seen == {"route_kv": (0, True), "sched": (1, False, 0)}


def test_eviction_key_default_and_policy_defined():
    entry = KVEntryInfo(owner=0, instance=0, created_ns=0, deadline_ns=2 * S, value=None,
                        num_blocks=4, seq=9)
    plane = RetentionPlane(Fixed("release"))
    assert plane.eviction_key(entry, None, S) == default_eviction_key(entry, S)

    class Biggest(Fixed):
        def eviction_key(self, entry, now):
            return (not entry.protected, -entry.num_blocks)

    plane = RetentionPlane(Biggest("release"))
    assert plane.eviction_key(entry, None, S) == (False, -4, 9)

    class Bad(Fixed):
        def eviction_key(self, entry, now):
            return ("x",)

    with pytest.raises(PolicyError, match="eviction_key: eviction_key element 0 must be a "
                                          "number"):
        RetentionPlane(Bad("release")).eviction_key(entry, view(), S)


def test_policy_error_propagates_out_of_a_run():
    class Late(RetentionPolicy):
        def on_turn_complete(self, pcb, request_id, now):
            if pcb.call_index == 1:
                raise KeyError("gap")
            return "release"

    prog = make_program(0, 0, [(10, 1, S, "t"), (10, 1, 0, None)], session="sess-1")
    cluster, orch = build([prog], retention=Late())
    orch.start()
    with pytest.raises(PolicyError) as err:
        cluster.run()
    assert str(err.value) == ("key 'policies.retention': retention policy Late failed for "
                              "program 'sess-1' call 1 at t=3.000000000 s: on_turn_complete: "
                              "KeyError: 'gap'")
