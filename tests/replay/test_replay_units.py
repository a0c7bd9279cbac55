"""The replay's pieces on their own: the prompt rule, the plan's sharing (the simulator
loader's), priorities, the FIFO concurrency bound, SSE chunk counting."""
from __future__ import annotations

import io
import json
import threading
import time

import pytest

from conftest import program_workload
from llmservingsim.errors import WorkloadError
from program_layer.replay.plan import ReplayCall, load_plan
from program_layer.replay.priority import priority
from program_layer.replay.prompts import ID_HIGH, ID_LOW, ProgramPrompts
from program_layer.replay.slots import FifoSlots
from program_layer.replay.sse import DONE, StreamError, chunk_tokens, events


def test_prompt_rule_extend_shrink_fork_and_fill():
    pp = ProgramPrompts(seed=0, index=0)
    p0 = pp.prompt(ReplayCall(0, 100, 5, 0))
    assert len(p0.ids) == 100 and all(ID_LOW <= i < ID_HIGH for i in p0.ids)
    assert p0.text == ",".join(map(str, p0.ids))
    pp.observe(p0, [1, 2, 3, 4, 5], 5)
    # extend: the whole context (prompt + actual output) then fresh ids
    p1 = pp.prompt(ReplayCall(1, 130, 4, 0, shared_prefix=105))
    assert p1.ids[:105] == p0.ids + [1, 2, 3, 4, 5] and len(p1.ids) == 130
    assert p1.text == ",".join(map(str, p1.ids))
    pp.observe(p1, None, 4)                      # the server gave no ids: stream ids fill them
    assert pp.output_ids_from_server is False and len(pp.context) == 134
    assert all(ID_LOW <= i < ID_HIGH for i in pp.context[130:])
    ctx = list(pp.context)
    # shrink (default sharing = the prompt's length): a prefix of the previous context
    p2 = pp.prompt(ReplayCall(2, 60, 2, 0, shared_prefix=60))
    assert p2.ids == ctx[:60] and p2.text == ",".join(map(str, p2.ids))
    pp.observe(p2, [7, 8], 2)
    # reuse_prefix_toks smaller than both: a fork after the shared part, then fresh ids
    p3 = pp.prompt(ReplayCall(3, 80, 2, 0, shared_prefix=10))
    assert p3.ids[:10] == ctx[:10] and p3.ids[10:62] != (ctx[:60] + [7, 8])[10:62]
    # deterministic per (seed, program); programs and seeds differ
    assert ProgramPrompts(0, 0).prompt(ReplayCall(0, 100, 5, 0)).ids == p0.ids
    assert ProgramPrompts(0, 1).prompt(ReplayCall(0, 100, 5, 0)).ids != p0.ids
    assert ProgramPrompts(1, 0).prompt(ReplayCall(0, 100, 5, 0)).ids != p0.ids


def test_explicit_and_hashed_prompts():
    pp = ProgramPrompts(0, 0)
    assert pp.prompt(ReplayCall(0, 3, 1, 0, explicit_ids=[5, 6, 7])).ids == [5, 6, 7]
    a = ProgramPrompts(0, 0).prompt(ReplayCall(0, 20, 1, 0, hash_ids=[9, 4], hash_block_tokens=8))
    b = ProgramPrompts(0, 1).prompt(ReplayCall(0, 12, 1, 0, hash_ids=[9, 5], hash_block_tokens=8))
    assert len(a.ids) == 20 and len(b.ids) == 12
    assert a.ids[:8] == b.ids[:8] and a.ids[8:12] != b.ids[8:12]     # shared leading hash block


def test_plan_shares_as_the_simulator_loader_does(tmp_path):
    wl = tmp_path / "w.jsonl"
    wl.write_text(json.dumps({"session_id": "a", "arrival_time_ns": 1000, "sub_requests": [
        {"input_toks": 100, "output_toks": 10, "tool_duration_ns": 3_000_000},
        {"input_toks": 150, "output_toks": 10, "tool_duration_ns": 5},           # extends: 110
        {"input_toks": 90, "output_toks": 10, "tool_duration_ns": 0},            # shrinks: 90
        {"input_toks": 120, "output_toks": 10, "tool_duration_ns": 0, "reuse_prefix_toks": 40},
        {"input_toks": 2, "output_toks": 1, "tool_duration_ns": 0, "input_tok_ids": [3, 4]},
        {"input_toks": 50, "output_toks": 1, "tool_duration_ns": 0}]}) + "\n"   # after explicit: 0
        + json.dumps({"session_id": "b", "arrival_time_ns": 0, "sub_requests": [
            {"input_toks": 5, "output_toks": 1, "tool_duration_ns": 0}]}) + "\n")
    plan = load_plan(wl, time_scale=0.5)
    a, b = plan.programs
    assert [c.shared_prefix for c in a.calls] == [0, 110, 90, 40, 0, 0]
    assert a.calls[4].explicit_ids == [3, 4]
    assert (a.arrival_ns, a.calls[0].gap_ns, a.calls[1].gap_ns) == (500, 1_500_000, 2)   # round(t * scale)
    assert (a.order, b.order) == (1, 0) and plan.num_calls == 7
    assert plan.records[0]["arrival_time_ns"] == 500


def test_plan_refuses_duplicate_session_ids(tmp_path):
    wl = program_workload(tmp_path / "w.jsonl", [(0, [(5, 1, 0)])] * 2)
    text = wl.read_text().replace('"p1"', '"p0"')
    wl.write_text(text)
    with pytest.raises(WorkloadError, match="also on line 1") as e:
        load_plan(wl)
    assert ":2" in str(e.value)


def test_priorities():
    assert priority("plas", 7, 0.0123456) == 12 and priority("plas", 7, 0.0) == 0
    assert priority("program-fcfs", 7, 3.0) == 7 and priority("none", 7, 3.0) is None


def test_fifo_slots_bound_and_order():
    slots, stop, order, held, peak = FifoSlots(2), threading.Event(), [], [0], [0]
    lock = threading.Lock()

    def worker(i):
        assert slots.acquire(stop)
        with lock:
            order.append(i)
            held[0] += 1
            peak[0] = max(peak[0], held[0])
        time.sleep(0.01)
        with lock:
            held[0] -= 1
        slots.release()

    threads = []
    for i in range(6):
        threads.append(threading.Thread(target=worker, args=(i,)))
        threads[-1].start()
        time.sleep(0.002)                 # ask in order 0..5
    for t in threads:
        t.join()
    assert peak[0] == 2 and order == list(range(6))
    stop.set()
    full = FifoSlots(0)
    assert full.acquire(stop) is False


def test_sse_events_and_token_counting():
    stream = io.BytesIO(b": comment\n\ndata: {\"choices\": [{\"text\": \"a\", \"token_ids\": [5, 6]}]}\n\n"
                        b"event: x\ndata: [DONE]\n\ndata: {\"never\": 1}\n")
    got = [obj for _, obj in events(stream.readline)]
    assert got[-1] is DONE and len(got) == 2
    assert chunk_tokens(got[0], 0) == (2, [5, 6])
    assert chunk_tokens({"choices": [{"text": "x"}], "usage": {"completion_tokens": 4}}, 1) == (3, None)
    assert chunk_tokens({"choices": [{"text": "x"}]}, 0) == (1, None)
    assert chunk_tokens({"choices": [], "usage": {"completion_tokens": 9}}, 0) == (0, None)
    with pytest.raises(StreamError):
        list(events(io.BytesIO(b"data: {oops\n").readline))
