"""PCB view: read-only snapshot, causal observation boundary, single writer."""
import re
import types
from pathlib import Path

import pytest

from llmservingsim.request import CallSpec
from pl_fakes import MS, S, build, make_program
from program_layer.orchestrator import Orchestrator
from program_layer.pcb import PCBView, ProgramControlBlock
from program_layer.policies import RetentionPolicy, RoutingPolicy, SchedulingPolicy

REPO = Path(__file__).resolve().parents[2]

# distinctive values that exist only in the trace
SECRET_OUTPUT = 987_654            # output tokens of every call
SECRET_GAP_NS = 3_141_592_653      # tool duration of every call but the last
SECRET_GAP_S = SECRET_GAP_NS / 1e9
NUM_CALLS = 7


def _reachable(root, limit=20_000):
    """Everything a policy can reach from ``root`` through attributes, slots, __dict__,
    containers, bound methods, closures and defaults (not module globals or classes)."""
    seen, out, stack = set(), [], [root]
    while stack and len(out) < limit:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (type, types.ModuleType)):
            continue
        seen.add(id(obj))
        out.append(obj)
        if isinstance(obj, (int, float, str, bytes, bool, type(None))):
            continue
        if isinstance(obj, (tuple, list, set, frozenset)):
            stack.extend(obj)
            continue
        if isinstance(obj, (dict, types.MappingProxyType)):
            stack.extend(obj.keys())
            stack.extend(obj.values())
            continue
        if isinstance(obj, types.MethodType):
            stack.extend([obj.__self__, obj.__func__])
            continue
        if isinstance(obj, types.FunctionType):
            stack.extend(c.cell_contents for c in (obj.__closure__ or ()))
            stack.extend(obj.__defaults__ or ())
            stack.extend((obj.__kwdefaults__ or {}).values())
            continue
        for name in dir(obj):
            if name.startswith("__") and name not in ("__dict__", "__self__", "__closure__"):
                continue
            try:
                stack.append(getattr(obj, name))
            except Exception:
                pass
        for cls in type(obj).__mro__:
            for name in getattr(cls, "__slots__", ()):
                try:
                    stack.append(getattr(obj, name))
                except AttributeError:
                    pass
    return out


def _assert_nothing_from_the_trace(objs, pcb, now):
    kinds = (CallSpec, ProgramControlBlock, Orchestrator)
    leaked = [o for o in objs if isinstance(o, kinds) or type(o).__name__ in (
        "FakeCluster", "ProgramSpec", "DispatchPlane", "RetentionPlane", "ProgramHooks")]
    assert not leaked, leaked
    numbers = {o for o in objs if isinstance(o, (int, float)) and not isinstance(o, bool)}
    assert SECRET_OUTPUT not in numbers
    assert not any(abs(x - SECRET_OUTPUT) < 1 or abs(x - 2 * SECRET_OUTPUT) < 1
                   for x in numbers if pcb.calls_completed == 0)
    # a gap is an observation only once it is over (the successor's release): this program
    # has seen exactly the gaps before its current call; none is reachable before any ended
    assert len(pcb.own_tool_gap_history("t")) == pcb.call_index
    if not pcb.tool_gap_history("t"):
        assert SECRET_GAP_S not in numbers and SECRET_GAP_NS not in numbers
    assert not hasattr(pcb, "__dict__")
    with pytest.raises(TypeError):
        vars(pcb)
    for name in ("_pcb", "pcb", "spec", "calls", "trace", "remaining_calls", "num_calls",
                 "output_tokens"):
        assert not hasattr(pcb, name)


class Prying:
    """Mixin: a malicious policy that walks everything it is handed."""
    checks = []

    def pry(self, pcb, now):
        objs = _reachable(pcb) + _reachable(self)
        _assert_nothing_from_the_trace(objs, pcb, now)
        Prying.checks.append((type(self).__name__, pcb.call_index, now))


class PryRet(RetentionPolicy, Prying):
    def on_turn_complete(self, pcb, request_id, now):
        self.pry(pcb, now)
        return ("protect", now + 1.0)

    def on_turn_arrival(self, pcb, now):
        self.pry(pcb, now)
        return "release"


class PrySched(SchedulingPolicy, Prying):
    def priority(self, pcb, now):
        self.pry(pcb, now)
        return 0


class PryRoute(RoutingPolicy, Prying):
    def select(self, pcb, inflight, now):
        self.pry(pcb, now)
        objs = _reachable(inflight)
        # str: the static facts role and device name (immutable, from the config)
        assert all(isinstance(o, (tuple, int, float, str, type(None))) for o in objs)
        return 0


def test_malicious_policy_cannot_reach_the_trace():
    Prying.checks.clear()
    progs = [make_program(i, i * 100 * MS, [(100 + k, SECRET_OUTPUT,
                                             SECRET_GAP_NS if k < NUM_CALLS - 1 else 0, "t")
                                            for k in range(NUM_CALLS)]) for i in range(2)]
    cluster, orch = build(progs, retention=PryRet(), scheduling=PrySched(),
                          routing=PryRoute(), service_ns=lambda c: 10 * MS)
    orch.start()
    cluster.run()
    assert orch.programs_done()
    # every decision point of every call was pried: 2 programs x 7 calls x 4 points
    assert len(Prying.checks) == 2 * NUM_CALLS * 4


def test_view_is_a_read_only_snapshot_with_gap_state():
    seen = []

    class Spy(RetentionPolicy):
        def on_turn_complete(self, pcb, request_id, now):
            seen.append(("done", pcb.call_index, pcb.calls_completed, pcb.context_tokens,
                         pcb.tool_name, pcb.gap_elapsed_s(now + 0.25),
                         pcb.tool_gap_history("a"), pcb.own_tool_gap_history("a")))
            with pytest.raises(AttributeError):
                pcb.attained_service_s = 0.0
            return ("protect", now + 0.5)

        def on_turn_arrival(self, pcb, now):
            seen.append(("arrive", pcb.call_index, pcb.context_tokens, pcb.kv_protected,
                         pcb.kv_deadline_s, pcb.gap_elapsed_s(now + 5), pcb.release_s,
                         pcb.tool_gap_history("a"), pcb.own_tool_gap_history("a")))
            return "release"

    p0 = make_program(0, 0, [(100, 10, 250 * MS, "a"), (200, 10, 0, None)])
    p1 = make_program(1, 0, [(50, 5, S, "a"), (60, 5, 0, None)])
    cluster, orch = build([p0, p1], retention=Spy(), num_instances=2,
                          service_ns=lambda c: 125 * MS)
    orch.start()
    cluster.run()
    assert seen[:6] == [
        ("arrive", 0, 100, False, None, None, 0.0, (), ()),
        ("arrive", 0, 50, False, None, None, 0.0, (), ()),
        ("done", 0, 1, 110, "a", 0.25, (), ()),
        ("done", 0, 1, 55, "a", 0.25, (), ()),
        # p0's successor at 0.375 s: its entry (deadline 0.625 s) is protected; gap 0.25 s
        ("arrive", 1, 200, True, 0.625, 0.25, 0.375, (0.25,), (0.25,)),
        ("done", 1, 2, 210, None, 0.25, (0.25,), (0.25,)),
    ]
    # p1's gap (1 s) is seen by p1 at its successor's arrival; p0's by both. p1's entry
    # expired at 0.625 s but was not reclaimed: deadline shown, no longer protected
    assert seen[6] == ("arrive", 1, 60, False, 0.625, 1.0, 1.125, (0.25, 1.0), (1.0,))
    assert [r.attained_service_ns for r in orch.program_results()] == [250 * MS, 250 * MS]


def test_pcb_has_a_single_writer():
    """apply_* (the PCB mutators) are called only by the Orchestrator; PCBs are built only
    there; nothing outside pcb.py assigns to a PCB attribute."""
    mutator = re.compile(r"\.apply_(release|dispatch|completion|retention|residency)\(")
    build_ = re.compile(r"ProgramControlBlock\(")
    assign = re.compile(r"\bpcb\.\w+\s*(?<![=!<>])=(?!=)")
    offenders = []
    for top in ("program_layer", "llmservingsim", "hooks", "examples"):
        for path in sorted((REPO / top).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            text = path.read_text(errors="replace")
            if rel != "program_layer/orchestrator.py" and (mutator.search(text) or (
                    build_.search(text) and rel != "program_layer/pcb.py")):
                offenders.append(rel)
            if rel != "program_layer/pcb.py" and assign.search(text):
                offenders.append(rel)
    assert offenders == []


def test_pcb_view_exposes_only_the_documented_attributes():
    public = {n for n in PCBView.__slots__ if not n.startswith("_")}
    assert public == {
        "program_id", "session_id", "arrival_s", "call_index", "calls_completed",
        "attained_service_s", "prior_instance", "kv_protected", "kv_deadline_s",
        "kv_resident_tokens", "kv_instance", "kv_value", "tool_name", "gap_start_s",
        "context_tokens", "release_s", "num_preemptions"}


def test_the_walker_and_the_grep_would_catch_a_leak():
    from pl_views import view

    leak = make_program(0, 0, [(1, SECRET_OUTPUT, 0, None)]).calls[0]
    v = view(gaps={"x": (leak,)})
    assert leak in _reachable(v)
    with pytest.raises(AssertionError):
        _assert_nothing_from_the_trace(_reachable(v), v, 0.0)
    assert re.search(r"\.apply_(release|dispatch|completion|retention|residency)\(",
                     "pcb.apply_completion(1, 2)")
    assert re.search(r"\bpcb\.\w+\s*(?<![=!<>])=(?!=)", "    pcb.tool_name = 'x'")
    assert not re.search(r"\bpcb\.\w+\s*(?<![=!<>])=(?!=)", "if pcb.tool_name == 'x':")
