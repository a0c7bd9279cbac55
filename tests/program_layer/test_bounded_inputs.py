"""Sizes that used to exhaust memory or time (issue 12) either run in memory and time
proportional to events or are refused with one clear error: a tool gap or an arrival of
1e18 ns (timeseries.csv had one row per simulated second: 23 GB), many instances (every
instance built its whole KV pool), a 100k-call program (views rebuilt every gap history per
call: quadratic; the benchmark is benchmarks/bench_long_program.py)."""
from __future__ import annotations

import csv
import json
import time

import pytest

from llmservingsim.metrics import MAX_BINS_PER_INSTANCE, timeseries_interval_s
from program_layer import cli
from program_layer.gaps import GapHistory, ToolGapLog
from program_layer.config import MAX_INSTANCES
from program_layer.run import build_simulation

NS = 1_000_000_000
HUGE = 10 ** 18


def write_run(tmp_path, programs, **cfg):
    (tmp_path / "w.jsonl").write_text("".join(json.dumps(p) + "\n" for p in programs))
    config = {"model": "meta-llama/Llama-3.1-8B", "hardware": "RTXPRO6000",
              "workload": {"path": "w.jsonl"},
              "policies": {"retention": {"name": "ttl", "tau_s": 2.0}, "scheduling": "fcfs"}, **cfg}
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps(config))
    return path


def program(arrival_ns=0, gaps=(0,), name="p"):
    return {"session_id": name, "arrival_time_ns": arrival_ns, "sub_requests": [
        {"input_toks": 64 + 32 * k, "output_toks": 4, "tool_duration_ns": g} for k, g in enumerate(gaps)]}


def run_cli(path, out, capsys):
    capsys.readouterr()
    t0 = time.perf_counter()
    rc = cli.main(["run", str(path), "--out", str(out)])
    return rc, time.perf_counter() - t0, capsys.readouterr().err.strip()


def rows(out):
    with open(out / "timeseries.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("case", ["tool-gap", "arrival"])
def test_1e18_ns_runs_in_seconds_with_bounded_rows(tmp_path, capsys, case):
    prog = program(gaps=(HUGE, 0)) if case == "tool-gap" else program(arrival_ns=HUGE)
    rc, wall, err = run_cli(write_run(tmp_path, [prog]), tmp_path / "out", capsys)
    assert rc == 0, err
    assert wall < 10, wall
    ts = rows(tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["timeseries_interval_s"] == 20_000          # 1e9 s / 20000 s = 50000 rows
    assert len(ts) == 50_001 <= MAX_BINS_PER_INSTANCE
    assert [int(r["time_s"]) for r in ts[:3]] == [0, 20_000, 40_000]
    last = ts[-1]
    assert int(last["time_s"]) == 10 ** 9 and float(last["busy_fraction"]) > 0
    # the gap itself is idle at every sample: nothing running, nothing waiting
    assert all(r["running"] == "0" and r["waiting"] == "0" for r in ts[1:-1])


def test_times_stay_exact_integers_at_1e18_ns(tmp_path):
    path = write_run(tmp_path, [program(arrival_ns=HUGE + 7, gaps=(HUGE, 0))])
    sim = build_simulation(json.loads(path.read_text()), base_dir=tmp_path)
    sim.run()
    done = sorted(f.info.completion_ns for f in sim.cluster.finished_calls)
    assert all(type(t) is int for t in done)
    first = sim.cluster.finished_calls[0]
    assert first.info.arrival_ns == HUGE + 7 and first.first_scheduled_ns == HUGE + 7
    second = [f for f in sim.cluster.finished_calls if f.call.call_index == 1][0]
    assert second.info.arrival_ns == done[0] + HUGE         # r = c + g, exactly


def test_interval_rule():
    assert timeseries_interval_s(0) == 1
    assert timeseries_interval_s(99_999 * NS + NS - 1) == 1    # 100000 rows at 1 s
    assert timeseries_interval_s(100_000 * NS) == 2            # 100001 rows at 1 s: too many
    assert timeseries_interval_s(199_999 * NS) == 2
    assert timeseries_interval_s(200_000 * NS) == 5
    assert timeseries_interval_s(HUGE) == 20_000
    assert timeseries_interval_s(999 * NS, num_instances=1000) == 1      # 1000 rows each
    assert timeseries_interval_s(1000 * NS, num_instances=1000) == 2     # budget shared
    for end in (0, 5 * NS, 123_456 * NS, 10 ** 15, HUGE, 10 ** 24):
        for n in (1, 7, 10_000):
            k = timeseries_interval_s(end, n)
            assert end // (k * NS) + 1 <= max(1, min(MAX_BINS_PER_INSTANCE, 1_000_000 // n))


def test_ordinary_run_keeps_one_row_per_second(tmp_path, capsys):
    rc, _, err = run_cli(write_run(tmp_path, [program(gaps=(3 * NS, 0))]), tmp_path / "out", capsys)
    assert rc == 0, err
    ts = rows(tmp_path / "out")
    assert [int(r["time_s"]) for r in ts] == list(range(len(ts))) and len(ts) == 4
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["timeseries_interval_s"] == 1


def test_too_many_instances_is_one_config_error(tmp_path, capsys):
    path = write_run(tmp_path, [program()], instances=100_000)
    rc, wall, err = run_cli(path, tmp_path / "out", capsys)
    assert rc == 2 and wall < 5
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    assert f"{path}:" in err and "key 'instances'" in err and f"at most {MAX_INSTANCES}" in err


def test_idle_instances_cost_almost_nothing(tmp_path, capsys):
    """KV blocks are created on first use: 2000 instances, two of them busy, in seconds."""
    path = write_run(tmp_path, [program(name="a"), program(name="b")], instances=2000)
    rc, wall, err = run_cli(path, tmp_path / "out", capsys)
    assert rc == 0 and wall < 10, (err, wall)
    calls = list(csv.DictReader(open(tmp_path / "out" / "calls.csv", newline="")))
    assert sorted(c["instance"] for c in calls) == ["0", "1"]


def test_gap_log_appends_and_snapshots_in_constant_time():
    """Views of a long history cost O(1): the snapshot is not a copy (a 100k-call program
    was quadratic), and an old snapshot still shows exactly what was observed then."""
    log = ToolGapLog()
    snaps = []
    for i in range(100_000):
        log.add("t" if i % 3 else None, i)
        if i % 10_000 == 0:
            snaps.append((i + 1, log.snapshot()))
    t0 = time.perf_counter()
    for _ in range(10_000):
        h = log.snapshot().get("t", ())
    assert time.perf_counter() - t0 < 0.5
    assert isinstance(h, GapHistory) and len(h) == 66_666 and h[-1] == 99_998 / NS
    for seen, snap in snaps:
        t, none = snap.get("t", ()), snap.get(None, ())
        assert len(t) + len(none) == seen
        assert tuple(none) == tuple(i / NS for i in range(0, seen, 3))
    assert log.snapshot() is log.snapshot()          # shared until the next gap


def test_gap_history_behaves_like_a_read_only_tuple():
    log = ToolGapLog()
    for g in (3, 1, 2):
        log.add("t", g * NS)
    h = log.snapshot()["t"]
    assert h[-2:] == (1.0, 2.0) and h[::-2] == (2.0, 3.0)       # before and after the tuple memo
    assert h == (3.0, 1.0, 2.0) and (3.0, 1.0, 2.0) == h and h != (3.0,)
    assert len(h) == 3 and h[0] == 3.0 and h[-1] == 2.0 and h[1:] == (1.0, 2.0)
    assert sorted(h) == [1.0, 2.0, 3.0] and list(reversed(h)) == [2.0, 1.0, 3.0]
    assert h + (4.0,) == (3.0, 1.0, 2.0, 4.0) and (0.0,) + h == (0.0, 3.0, 1.0, 2.0)
    assert 1.0 in h and h.index(2.0) == 2 and h.count(3.0) == 1 and hash(h) == hash((3.0, 1.0, 2.0))
    assert repr(h) == "(3.0, 1.0, 2.0)" and h < (4.0,)
    with pytest.raises(IndexError):
        h[3]
    with pytest.raises(AttributeError):
        h._n = 99
    log.add("t", 5 * NS)
    assert h == (3.0, 1.0, 2.0)                      # a snapshot: later gaps are not in it
    snap = log.snapshot()
    assert dict(snap) == {"t": (3.0, 1.0, 2.0, 5.0)} and "t" in snap and "u" not in snap
    with pytest.raises(TypeError):
        snap["t"] = ()


def test_fast_forward_still_applies_past_2_to_the_62_ns(tmp_path):
    """"No next event" is no limit at all, not a large int the clock can pass."""
    prog = {"session_id": "late", "arrival_time_ns": 5 * HUGE, "sub_requests": [
        {"input_toks": 64, "output_toks": 200, "tool_duration_ns": 0}]}
    path = write_run(tmp_path, [prog])
    sim = build_simulation(json.loads(path.read_text()), base_dir=tmp_path)
    sim.run()
    assert sim.cluster.instances[0].scheduler.num_ff_steps > 150
