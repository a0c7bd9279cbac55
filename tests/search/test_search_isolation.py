"""Hostile candidates against the OS boundary (docs/security.md).

Each candidate below is run through the evaluator the search uses, with the static check
off (it is a friendly early error, not the boundary) so that the attack really executes in
the candidate process. Each must score 0 with a reason (or, for in-process rewrites, leave
the score exactly as an honest candidate's), leave no file and no process behind, and not
change the score of the honest candidate evaluated after it.
"""
from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from program_layer.search import channel, evaluator as ev, proxy
from program_layer.search.safety import UnsafeCandidate, check_policy_file

from search_cells import Cell, cell, seed_cache  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the candidate process is confined by Linux")

# A memory limit no other test uses: it appears in the candidate's command line, so the
# process scan below finds this module's candidates only (other suites may run meanwhile).
MEMORY_MB = 1024 + os.getpid() % 389
HONEST = 'return ("protect", now + 60.0)'


def write_policy(tmp_path: Path, name: str, complete: str, prelude: str = "") -> str:
    """A retention policy file whose on_turn_complete body is ``complete``; ``prelude`` runs
    when the file is loaded."""
    path = tmp_path / f"{name}.py"
    body = textwrap.indent(textwrap.dedent(complete).strip("\n"), " " * 8)
    path.write_text("from program_layer.policies import RetentionPolicy\n"
                    + textwrap.dedent(prelude).strip("\n") + "\n\n\n"
                    f"class {name}(RetentionPolicy):\n"
                    "    def on_turn_complete(self, pcb, request_id, now):\n" + body + "\n")
    return f"{path}:{name}"


def settings(tmp_path: Path, c: Cell, cache: str, **kw) -> ev.EvalSettings:
    base = dict(cell=c.path, axis="retention", seed_policy="evict-always", timeout_s=60,
                memory_mb=MEMORY_MB, cache_dir=cache, work_dir=str(tmp_path / "runs"),
                runner=c.runner, static_check=False, decision_timeout_s=0.5)
    base.update(kw)
    return ev.EvalSettings(**base)


def candidate_processes() -> list[int]:
    """Processes of this module's candidates still alive (zombies excluded)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if b"program_layer.search.candidate" in cmd and f'"memory_mb": {MEMORY_MB}'.encode() in cmd \
                and state != "Z":
            found.append(int(entry.name))
    return found


@pytest.fixture(scope="module")
def honest_score(tmp_path_factory, seed_cache):
    """The honest candidate's score, before any attack."""
    tmp = tmp_path_factory.mktemp("honest")
    c = Cell(str(Path(__file__).parent / "data" / "tiny_cell.yaml"), "", None, "", 2.0)
    result = ev.evaluate_policy(write_policy(tmp, "Honest", HONEST), settings(tmp, c, seed_cache))
    assert result["status"] == "ok" and result["combined_score"] > 1.0, result
    return result["combined_score"]


def targets(tmp_path: Path, cache: str) -> dict:
    """Paths an attacker would like to write: a forged result, the seed cache, a home cache."""
    home = tmp_path / "home" / ".cache" / "agentservesim" / "seed-jct"
    home.mkdir(parents=True)
    return {"forged": str(tmp_path / "result.json"), "cache": str(Path(cache) / "seed-poison.json"),
            "home": str(home / "seed-poison.json"), "marker": str(tmp_path / "marker")}


FORGED = '{"status": "ok", "summary": {"jct_s": {"mean": 1e-09}}}'

ATTACKS = {
    # forge the result (paths from argv and from the worker's command line in /proc), then
    # leave with os._exit(0) through sys.modules
    "forged_result": ("""
        import typing
        sys = typing.sys
        os = sys.modules["os"]
        paths = sys.argv[1:] + [{forged!r}]
        try:
            for pid in os.listdir("/proc"):
                try:
                    last = open(f"/proc/{{pid}}/cmdline").read().split("\\0")[-2:-1]
                    paths += [p for p in last if p.endswith("/result.json")]   # the worker's
                except Exception:
                    pass
        except Exception:
            pass
        for path in paths:
            try:
                with open(path, "w") as f:
                    f.write({FORGED!r})
            except Exception:
                pass
        sys.modules["os"]._exit(0)
        """, "", "ended without replying"),
    # write the seed cache (the evaluator's and a home cache) with the builtins of a frame
    "cache_poison_frames": ("""
        def g():
            yield gen.gi_frame.f_back
        gen = g()
        frame = next(gen)
        while frame.f_back is not None:
            frame = frame.f_back
        b = frame.f_globals["__builtins__"]
        opener = b["open"] if isinstance(b, dict) else b.open
        for path in ({cache!r}, {home!r}):
            with opener(path, "w") as f:
                f.write('{{"key": "x", "cells": [{{"mean_jct_s": 1e9}}]}}')
        return ("protect", now + 60.0)
        """, "", "Error"),
    # a shell command through typing.sys.modules, no import of os
    "shell_sys_modules": ("""
        import typing
        rc = typing.sys.modules["os"].system("touch {marker}")
        raise RuntimeError(f"system returned {{rc}}")
        """, "", "system returned"),
    # builtins through a dataclasses alias, and an alias of open
    "file_alias": ("""
        import dataclasses
        o = dataclasses.builtins.open
        o({marker!r}, "w").write("x")
        return ("protect", now + 60.0)
        """, "", "Error"),
    # the loader's importlib: import subprocess and run a shell
    "loader_importlib": ("""
        from program_layer.policies import loader
        loader.importlib.import_module("subprocess").run(["touch", {marker!r}], check=True)
        return ("protect", now + 60.0)
        """, "", "Error"),
    # lift the memory limit, then allocate
    "raise_limits": ("""
        import typing
        resource = typing.sys.modules["resource"]
        inf = resource.RLIM_INFINITY
        resource.setrlimit(resource.RLIMIT_AS, (inf, inf))
        return ("protect", now + len(bytearray(16 * 1024 ** 3)))
        """, "", "Error"),
    # fork, leave the session, write a file later (RLIMIT_NPROC = 0: fork fails)
    "fork_detach": ("""
        import typing
        os = typing.sys.modules["os"]
        if os.fork() == 0:
            os.setsid()
            typing.sys.modules["time"].sleep(1.0)
            open({marker!r}, "w").write("x")
            os._exit(0)
        return ("protect", now + 60.0)
        """, "", "BlockingIOError"),
    "infinite_loop": ("""
        while True:
            pass
        """, "", "per-decision deadline"),
    # touches memory until the address-space limit (or the deadline, on a slow machine)
    "memory_bomb": ("""
        chunks = []
        while True:
            chunks.append(bytearray(256 << 20))
        """, "", ("MemoryError", "per-decision deadline")),
    "output_flood": ("""
        import typing
        line = "x" * 65536
        while True:
            print(line)
            typing.sys.stderr.write(line)
        """, "", "per-decision deadline"),
    "exit_at_import": ("pass", """
        import typing
        typing.sys.modules["os"]._exit(0)
        """, "ended without replying"),
    # a TCP connection through libc (no socket module can be imported)
    "network": ("""
        import typing
        ctypes = typing.sys.modules["ctypes"]
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.socket(2, 1, 0)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "socket() refused")
        addr = (2).to_bytes(2, "little") + (22).to_bytes(2, "big") + bytes([127, 0, 0, 1]) + bytes(8)
        if libc.connect(fd, addr, 16) != 0:
            raise OSError(ctypes.get_errno(), "connect() failed")
        return ("protect", now + 60.0)
        """, "", ("socket() refused", "connect() failed")),
}


def run_attack(tmp_path, c, cache, name, isolation="auto", **kw):
    paths = targets(tmp_path, cache)
    body, prelude, reason = ATTACKS[name]
    fmt = dict(paths, FORGED=FORGED)
    spec = write_policy(tmp_path, "Hostile", body.format(**fmt), prelude.format(**fmt))
    started = time.perf_counter()
    result = ev.evaluate_policy(spec, settings(tmp_path, c, cache, isolation=isolation, **kw))
    return result, paths, reason, time.perf_counter() - started


def assert_contained(result, paths, reason, at_decision=True):
    assert result["combined_score"] == 0.0 and result["status"] in ("error", "timeout"), result
    error = result["error"]
    reasons = (reason,) if isinstance(reason, str) else reason
    assert any(r in error for r in reasons) and "\n" not in error, error
    if at_decision:      # one line naming the policy, the program, the call and the time
        assert "retention policy Hostile" in error and "program 'p" in error and "call 0" in error \
            and " at t=" in error, error
    for key, path in paths.items():
        assert not os.path.exists(path), f"{key} file was written: {path}"
    assert candidate_processes() == []


# attacks meant to outlive the candidate: an honest candidate is scored right after them
PERSISTENT = {"forged_result", "cache_poison_frames", "fork_detach", "shell_sys_modules"}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_hostile_candidate_scores_zero_and_leaves_nothing(tmp_path, cell, seed_cache, name, honest_score):
    result, paths, reason, wall = run_attack(tmp_path, cell, seed_cache, name)
    assert_contained(result, paths, reason, at_decision=name != "exit_at_import")
    assert result.get("isolation") in ("namespaces", "fallback")
    assert wall < 20
    if name in PERSISTENT:     # the search goes on: the next honest candidate scores as before
        honest = ev.evaluate_policy(write_policy(tmp_path, "Honest", HONEST), settings(tmp_path, cell, seed_cache))
        assert honest["combined_score"] == honest_score


@pytest.mark.parametrize("name", ["forged_result", "shell_sys_modules", "file_alias", "fork_detach",
                                  "raise_limits", "cache_poison_frames", "network"])
def test_hostile_candidate_is_contained_by_the_fallback_too(tmp_path, cell, seed_cache, name, honest_score):
    result, paths, reason, _ = run_attack(tmp_path, cell, seed_cache, name, isolation="fallback")
    assert result.get("isolation") == "fallback"
    assert_contained(result, paths, reason)


def test_honest_candidate_scores_the_same_after_all_attacks(tmp_path, cell, seed_cache, honest_score,
                                                          monkeypatch, caplog):
    """Also: the fallback is a visible decision, a warning line and a field in the result."""
    monkeypatch.setattr(ev, "_warned", set())
    for isolation in ("auto", "fallback"):
        honest = ev.evaluate_policy(write_policy(tmp_path, "Honest", HONEST),
                                    settings(tmp_path, cell, seed_cache, isolation=isolation))
        assert honest["status"] == "ok" and honest["combined_score"] == honest_score
    assert honest["isolation"] == "fallback"
    assert any("WITHOUT Linux namespaces" in r.getMessage() for r in caplog.records)


def test_rewriting_the_workload_through_gc_and_frames_changes_nothing(tmp_path, cell, seed_cache, honest_score):
    """The issue's 108-score attack: every call's output_tokens = 1, tool_duration_ns = 0,
    found through gc.get_objects() and frame walking. The simulator is in another process:
    there is nothing to find, and the score is the honest one, to the last bit."""
    spec = write_policy(tmp_path, "Rewriter", """
        import importlib
        import typing
        gc = importlib.import_module("gc")
        hits = 0
        for obj in gc.get_objects():
            for attr in ("output_tokens", "tool_duration_ns", "_pcbs", "programs"):
                if attr in getattr(type(obj), "__slots__", ()) or attr in getattr(obj, "__dict__", {}):
                    try:
                        setattr(obj, attr, 1 if attr == "output_tokens" else 0)
                        hits += 1
                    except Exception:
                        pass
        frame = typing.sys._getframe()
        while frame is not None:
            for value in list(frame.f_locals.values()):
                if type(value).__name__ in ("Orchestrator", "Cluster", "Simulation"):
                    hits += 1
            frame = frame.f_back
        self.hits = hits
        return ("protect", now + 60.0)
        """)
    result = ev.evaluate_policy(spec, settings(tmp_path, cell, seed_cache))
    assert result["status"] == "ok", result["error"]
    assert result["combined_score"] == honest_score
    assert candidate_processes() == []


def test_a_detached_descendant_dies_with_the_candidate(tmp_path, cell, seed_cache, honest_score):
    """With forks allowed (RLIMIT_NPROC raised for this test), a child that leaves the
    session and sleeps is still in the candidate's PID namespace: it dies when the
    candidate's PID 1 does, and never writes its file."""
    marker = tmp_path / "late-marker"
    spec = write_policy(tmp_path, "Forker", f"""
        import typing
        os = typing.sys.modules["os"]
        if not getattr(self, "forked", False):
            self.forked = True
            if os.fork() == 0:
                try:
                    os.setsid()
                except OSError:
                    pass
                typing.sys.modules["time"].sleep(1.5)
                try:
                    open({str(marker)!r}, "w").write("late")
                finally:
                    os._exit(0)
        return ("protect", now + 60.0)
        """)
    result = ev.evaluate_policy(spec, settings(tmp_path, cell, seed_cache, max_processes=64))
    if result.get("isolation") != "namespaces":
        pytest.skip("no namespaces on this platform")
    assert result["status"] == "ok" and result["combined_score"] == honest_score
    assert candidate_processes() == []
    time.sleep(2.0)
    assert not marker.exists()
    assert candidate_processes() == []


def test_the_per_candidate_deadline_kills_the_candidate_with_the_simulator(tmp_path, cell, seed_cache):
    """A candidate that stays within each decision's deadline but not within the run's: the
    worker is killed at the run's wall-time limit, and the candidate (and its namespace)
    with it."""
    spec = write_policy(tmp_path, "Slow", """
        import typing
        typing.sys.modules["time"].sleep(0.4)
        return ("protect", now + 60.0)
        """)
    started = time.perf_counter()
    result = ev.evaluate_policy(spec, settings(tmp_path, cell, seed_cache, timeout_s=2.0, decision_timeout_s=5))
    assert result["status"] == "timeout" and result["combined_score"] == 0.0
    assert "wall time" in result["error"] and time.perf_counter() - started < 15
    deadline = time.monotonic() + 5
    while candidate_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert candidate_processes() == []


def test_seed_cache_entries_are_verified_on_read(tmp_path, cell, honest_score):
    """An entry changed behind the evaluator's back (or by a candidate on a platform without
    any file-system confinement) is detected by its stored key and checksum and recomputed."""
    cache = str(tmp_path / "cache")
    s = settings(tmp_path, cell, cache)
    honest = write_policy(tmp_path, "Honest", HONEST)
    first = ev.evaluate_policy(honest, s)
    entry_path = next(Path(cache).glob("seed-*.json"))
    entry = json.loads(entry_path.read_text())
    assert entry["key"] == ev.seed_cache_key(s, full=True) and entry["checksum"]
    entry["cells"][0]["mean_jct_s"] = 3.1e8            # the poisoned seed JCT
    entry_path.write_text(json.dumps(entry))
    second = ev.evaluate_policy(honest, s)
    assert second["seed_cached"] is False and second["combined_score"] == first["combined_score"]
    third = ev.evaluate_policy(honest, s)
    assert third["seed_cached"] is True and third["combined_score"] == first["combined_score"] == honest_score


def test_cache_key_covers_the_workload_file(tmp_path, cell):
    cell_dir = tmp_path / "cell"
    cell_dir.mkdir()
    src = Path(cell.path)
    (cell_dir / "cell.yaml").write_text(src.read_text())
    (cell_dir / "tiny_programs.jsonl").write_text((src.parent / "tiny_programs.jsonl").read_text())
    s = settings(tmp_path, cell, str(tmp_path / "cache"), cell=str(cell_dir / "cell.yaml"))
    k1 = ev.seed_cache_key(s)
    with open(cell_dir / "tiny_programs.jsonl", "a") as f:
        f.write("\n")
    assert ev.seed_cache_key(s) != k1


def test_the_candidate_reports_its_confinement(tmp_path):
    """Started directly: namespaces (when the platform has them) or the fallback, named."""
    process = proxy.CandidateProcess(memory_mb=MEMORY_MB, cpu_s=10).start()
    try:
        isolation = process.wait_ready()
        assert isolation in ("namespaces", "fallback")
        assert "hard limits" in process.detail
        if isolation == "namespaces":
            assert "PID 1" in process.detail and "empty read-only root" in process.detail
    finally:
        process.close()
    assert candidate_processes() == []


def test_namespaces_mode_refuses_rather_than_falls_back(tmp_path, cell, seed_cache):
    """isolation="namespaces" never runs a candidate with weaker containment."""
    probe = proxy.CandidateProcess(memory_mb=MEMORY_MB, cpu_s=10).start()
    try:
        available = probe.wait_ready() == "namespaces"
    finally:
        probe.close()
    result = ev.evaluate_policy(write_policy(tmp_path, "Honest", HONEST),
                                settings(tmp_path, cell, seed_cache, isolation="namespaces"))
    if available:
        assert result["status"] == "ok" and result["isolation"] == "namespaces"
    else:
        assert result["status"] == "error" and "namespaces unavailable" in result["error"]


# ----- the channel carries exactly what a policy sees ------------------------------------

def test_snapshot_fields_are_exactly_the_view():
    from program_layer.pcb import PCBView
    from program_layer.policies.base import InflightLoad, Signals
    from program_layer.retention import EntryView
    assert set(channel.VIEW_FIELDS) | {"_gaps", "_own_gaps"} == set(PCBView.__slots__)
    assert channel.SIGNAL_FIELDS == tuple(Signals.__dataclass_fields__)
    assert channel.INFLIGHT_FIELDS == InflightLoad._fields
    assert set(channel.ENTRY_FIELDS) | {"program"} == set(EntryView.__slots__)


def test_views_cross_the_channel_unchanged():
    """A PCB's views, rebuilt on the candidate side from the encoder's messages (gap
    histories as deltas, including an older snapshot after a newer one), equal the
    originals field by field and in every gap history, bit for bit."""
    import random
    from program_layer.pcb import ProgramControlBlock, ToolGapLog
    from program_layer.policies.base import Signals
    from program_layer.search.candidate import _Server

    rng = random.Random(7)
    log, enc, server = ToolGapLog(), channel.SnapshotEncoder(), _Server(-1, -1)
    pcbs = [ProgramControlBlock(program_id=i, session_id=f"s{i}", arrival_ns=rng.randrange(10**12)) for i in range(4)]
    t = 10**9
    views = []
    for step in range(300):
        pcb = rng.choice(pcbs)
        t += rng.randrange(1, 10**9)
        tool = rng.choice([None, "bash", "edit", "ünï"])
        if rng.random() < 0.5:
            pcb.apply_release(pcb.call_index + 1, t, rng.randrange(1, 10**5))
        else:
            pcb.apply_completion(t, rng.randrange(10**9), rng.randrange(10**5), tool, rng.randrange(3), False)
            log.add(tool, rng.randrange(10**10))
        view = pcb.view(t + 1, log.snapshot(), rng.choice([None, 0, 1]))
        views.append(view)
        if rng.random() < 0.1 and len(views) > 5:
            view = views[-5]                     # an older snapshot after newer ones
        msg = channel.request_unframe(enc.complete(view, step, t / 1e9, Signals(0, 0.5))[4:])
        got = server.view(msg[3], msg[5])
        for f in channel.VIEW_FIELDS:
            a, b = getattr(view, f), getattr(got, f)
            assert type(a) is type(b) and (a == b or a != a), f
        for tool_name in (None, "bash", "edit", "ünï", "nope"):
            for a, b in ((got.tool_gap_history(tool_name), view.tool_gap_history(tool_name)),
                         (got.own_tool_gap_history(tool_name), view.own_tool_gap_history(tool_name))):
                assert type(a) is type(b) and tuple(a) == tuple(b)
                assert all(type(x) is float for x in a)
        assert dict(got._gaps) == dict(view._gaps)


@pytest.mark.parametrize("raw", ["release", "evict", "none", "protect", "keep", ("protect", 1.5),
                                 ("protect", 2, None), ("protect", 1e300, -0.0), ["protect", 3.25],
                                 7, -2**70, True, None, 1.0, float("inf"), float("nan"), (1, (2, [3])),
                                 {"a": 1}, {1, 2}, ("protect",), ("protect", "x")])
def test_replies_decode_to_what_the_policy_returned(raw):
    from program_layer.search.candidate import _fast_reply
    data = _fast_reply(raw) or channel.frame(["r", channel.encode_value(raw)])
    kind, value = channel.decode_reply(data[4:])
    assert kind == "r"
    if isinstance(raw, (dict, set)):
        assert repr(value) == repr(raw) and type(value).__name__ == type(raw).__name__
    elif isinstance(raw, float) and raw != raw:
        assert value != value
    else:
        assert value == raw and type(value) is type(raw)


@pytest.mark.parametrize("data", [b"", b"[", b'["r"]', b'["r", 1, 2]', b'{"r": 1}', b'["z", 1]',
                                  b'["r", {"l": 1}]', b'["r", {"o": 1, "y": "x"}]', b'["x", 1, ""]',
                                  b'["r", 1] junk', b"\xff\xfe", b"[" * 100000])
def test_malformed_replies_are_protocol_errors(data):
    with pytest.raises(channel.ProtocolError):
        channel.decode_reply(data)


def test_static_check_still_names_the_known_escapes_early(tmp_path):
    for body in ("import typing\nx = typing.sys.modules\n", "o = open\n",
                 "def g():\n    yield g.gi_frame.f_back\n", "import dataclasses\nb = dataclasses.builtins\n"):
        f = tmp_path / "c.py"
        f.write_text(body)
        with pytest.raises(UnsafeCandidate, match="line"):
            check_policy_file(f)
