"""Policy misbehaviour is one clear error (issue 12): whatever a policy raises, SystemExit and
KeyboardInterrupt included, `agentservesim run` exits 2 with one line naming the policy, the
program, the call and the simulated time; an invalid protect deadline (negative, NaN,
infinite, too large) likewise. A real Ctrl-C that arrives while policy code runs still
interrupts the run (exit 130). Runs are in-process (``cli.main``) and take milliseconds."""
from __future__ import annotations

import json
import signal
import threading

import pytest

from hooks import KVEntryInfo
from llmservingsim.errors import PolicyError
from pl_views import view
from program_layer import cli
from program_layer.policies import RetentionPolicy
from program_layer.policies.checks import is_interrupt, signals_recorded
from program_layer.retention import RetentionPlane

POLICIES = '''
import signal
from program_layer.policies import RetentionPolicy, RoutingPolicy, SchedulingPolicy


def boom(kind):
    if kind == "exit0":
        raise SystemExit(0)
    if kind == "exit-msg":
        raise SystemExit("bye")
    if kind == "interrupt":
        raise KeyboardInterrupt
    if kind == "generator-exit":
        raise GeneratorExit
    if kind == "ctrl-c":            # a real SIGINT, delivered while policy code runs
        signal.raise_signal(signal.SIGINT)
    raise AssertionError(kind)


class OnComplete(RetentionPolicy):
    def __init__(self, kind):
        self.kind = kind

    def on_turn_complete(self, pcb, request_id, now):
        boom(self.kind)

    def on_turn_arrival(self, pcb, now):
        return "release"


class OnArrival(RetentionPolicy):
    def __init__(self, kind):
        self.kind = kind

    def on_turn_complete(self, pcb, request_id, now):
        return "release"

    def on_turn_arrival(self, pcb, now):
        boom(self.kind)


class Priority(SchedulingPolicy):
    def __init__(self, kind):
        self.kind = kind

    def priority(self, pcb, now):
        boom(self.kind)


class Select(RoutingPolicy):
    def __init__(self, kind):
        self.kind = kind

    def select(self, pcb, inflight, now):
        boom(self.kind)


class Protect(RetentionPolicy):
    """Returns ("protect", float(until)): until is a string ("nan", "-5.0", ...)."""
    def __init__(self, until):
        self.until = until

    def on_turn_complete(self, pcb, request_id, now):
        return ("protect", float(self.until))

    def on_turn_arrival(self, pcb, now):
        return "release"
'''

AXIS = {"OnComplete": "retention", "OnArrival": "retention", "Priority": "scheduling",
        "Select": "routing"}
METHOD = {"OnComplete": "on_turn_complete", "OnArrival": "on_turn_arrival",
          "Priority": "priority", "Select": "select"}


def run(tmp_path, capsys, cls: str, param: str, name: str = "kind"):
    (tmp_path / "policy.py").write_text(POLICIES)
    prog = {"session_id": "agent-7", "arrival_time_ns": 0, "sub_requests": [
        {"input_toks": 64, "output_toks": 4, "tool_duration_ns": 500_000_000, "tool_name": "bash"},
        {"input_toks": 96, "output_toks": 4, "tool_duration_ns": 0}]}
    (tmp_path / "w.jsonl").write_text(json.dumps(prog) + "\n")
    axis = AXIS.get(cls, "retention")
    policies = {"retention": {"name": "ttl", "tau_s": 1.0}, "scheduling": "fcfs", "routing": "round-robin"}
    policies[axis] = {"name": f"policy.py:{cls}", name: param}
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps({"model": "meta-llama/Llama-3.1-8B", "hardware": "RTXPRO6000",
                               "workload": {"path": "w.jsonl"}, "policies": policies}))
    capsys.readouterr()
    rc = cli.main(["run", str(cfg), "--out", str(tmp_path / "out")])
    return rc, capsys.readouterr().err.strip()


def check_one_line(rc, err, *fragments):
    assert rc == 2, err
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    for f in fragments:
        assert f in err, (f, err)


@pytest.mark.parametrize("cls", ["OnComplete", "OnArrival", "Priority", "Select"])
@pytest.mark.parametrize("kind,shown", [("exit0", "raised SystemExit(0)"),
                                        ("exit-msg", "raised SystemExit(bye)"),
                                        ("interrupt", "raised KeyboardInterrupt;"),
                                        ("generator-exit", "raised GeneratorExit;")])
def test_base_exceptions_from_policy_code_are_one_policy_error(tmp_path, capsys, cls, kind, shown):
    rc, err = run(tmp_path, capsys, cls, kind)
    # call 0 of the only program, at its release (t = 0) or completion (t > 0)
    check_one_line(rc, err, f"policies.{AXIS[cls]}", f"policy {cls} (policy.py:{cls}) failed for "
                   f"program 'agent-7' call 0 at t=", f"{METHOD[cls]}: {shown}",
                   "a policy must return a decision, not exit or interrupt the run")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("until,detail", [
    ("-5.0", "protect deadline 'until' must be >= 0, got -5.0"),
    ("nan", "protect deadline 'until' must be finite, got nan"),
    ("inf", "protect deadline 'until' must be finite, got inf"),
    ("-inf", "protect deadline 'until' must be finite, got -inf"),
    ("1e300", "protect deadline 'until' 1e+300 s is too large"),
])
def test_invalid_protect_deadline_is_one_policy_error(tmp_path, capsys, until, detail):
    rc, err = run(tmp_path, capsys, "Protect", until, name="until")
    check_one_line(rc, err, "policies.retention", "policy Protect (policy.py:Protect) failed for "
                   "program 'agent-7' call 0 at t=0.0", f"on_turn_complete: {detail}")


def test_deadline_zero_or_past_is_still_a_release(tmp_path, capsys):
    """0 <= until <= now is the paper's d = c: a release, not an error."""
    rc, err = run(tmp_path, capsys, "Protect", "0.0", name="until")
    assert rc == 0, err


@pytest.mark.skipif(not callable(signal.getsignal(signal.SIGINT)),
                    reason="SIGINT is not handled by Python here")
def test_a_real_ctrl_c_inside_policy_code_still_interrupts(tmp_path, capsys):
    rc, err = run(tmp_path, capsys, "OnComplete", "ctrl-c")
    assert rc == 130 and err.startswith("interrupted"), (rc, err)
    assert "policy" not in err


def _entry():
    return KVEntryInfo(owner=0, instance=0, created_ns=0, deadline_ns=2_000_000_000, value=None,
                       num_blocks=3, seq=1)


def test_eviction_key_base_exception_and_interrupt_rule():
    class ExitKey(RetentionPolicy):
        def on_turn_complete(self, pcb, request_id, now):
            return "release"

        def eviction_key(self, entry, now):
            raise SystemExit(1)

    plane = RetentionPlane(ExitKey())
    with pytest.raises(PolicyError, match=r"program 's0' call 0 at t=1\.000000000 s: eviction_key: "
                                          r"raised SystemExit\(1\)"):
        plane.eviction_key(_entry(), view(), 1_000_000_000)

    class InterruptKey(ExitKey):
        def eviction_key(self, entry, now):
            raise KeyboardInterrupt

    plane = RetentionPlane(InterruptKey())
    # outside a simulation's signals_recorded, on the main thread, a KeyboardInterrupt cannot
    # be told from a Ctrl-C: it is let through (never blamed on the policy) ...
    with pytest.raises(KeyboardInterrupt):
        plane.eviction_key(_entry(), view(), 0)
    # ... inside, an unmarked one is the policy's own
    with signals_recorded():
        with pytest.raises(PolicyError, match="eviction_key: raised KeyboardInterrupt"):
            plane.eviction_key(_entry(), view(), 0)


def test_signals_recorded_restores_handlers_and_marks_only_signal_exceptions():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with signals_recorded():
        assert is_interrupt(KeyboardInterrupt()) is False       # raised by code, not a signal
        assert is_interrupt(SystemExit(0)) is False
        if callable(before[signal.SIGINT]):
            with pytest.raises(KeyboardInterrupt) as caught:
                signal.raise_signal(signal.SIGINT)
            assert is_interrupt(caught.value) is True
    assert {s: signal.getsignal(s) for s in before} == before


def test_off_the_main_thread_a_keyboard_interrupt_is_the_policys():
    seen = []
    t = threading.Thread(target=lambda: seen.append(is_interrupt(KeyboardInterrupt())))
    t.start()
    t.join()
    assert seen == [False]


def test_eviction_key_is_made_of_plain_numbers():
    """Parts other than bool/int/float are replaced by their floats, so no policy code runs
    when the engine sorts the keys later (outside the plane's try)."""
    class Weird(float):
        def __lt__(self, other):
            raise RuntimeError("compare")

    class Key(RetentionPolicy):
        def on_turn_complete(self, pcb, request_id, now):
            return "release"

        def eviction_key(self, entry, now):
            return (True, Weird(2.5), 7)

    key = RetentionPlane(Key()).eviction_key(_entry(), None, 0)
    assert key == (True, 2.5, 7, 1) and [type(k) for k in key] == [bool, float, int, int]


@pytest.mark.parametrize("where,source,detail", [
    ("constructor", "from program_layer.policies import RetentionPolicy\n"
                    "class P(RetentionPolicy):\n    def __init__(self):\n        raise SystemExit(0)\n",
     "retention policy 'policy.py:P' raised while constructing: SystemExit: 0"),
    ("import", "raise SystemExit(0)\n", "policy file raised while loading: SystemExit: 0")])
def test_exit_while_a_policy_is_loaded_is_one_config_error(tmp_path, capsys, where, source, detail):
    (tmp_path / "policy.py").write_text(source)
    (tmp_path / "w.jsonl").write_text(json.dumps({"input_toks": 8, "output_toks": 2, "arrival_time_ns": 0}) + "\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps({"model": "meta-llama/Llama-3.1-8B", "hardware": "RTXPRO6000",
                               "workload": {"path": "w.jsonl"}, "policies": {"retention": "policy.py:P"}}))
    capsys.readouterr()
    rc = cli.main(["run", str(cfg), "--out", str(tmp_path / "out")])
    check_one_line(rc, capsys.readouterr().err.strip(), "key 'policies.retention'", detail)
