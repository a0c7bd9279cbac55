"""``Scheduler.schedule`` builds its output without the dataclass ``__init__`` (its slots
stored directly, the tallies once at the end) and ``update_from_output`` walks every entry
without a per-entry test when the tally says all of them sample. Checked here on runs that
meet decodes, chunked prefills (entries that do not sample), prefix hits, preemption and
the priority policy's re-tally: every field of every output is set and equals a recount from
its entries through ``SchedulerOutput(...)`` and ``tally``; an update applies the sampling
entries of a batch that also holds a chunk that does not sample, and only those."""
from __future__ import annotations

import dataclasses

import pytest

from engine_helpers import create_requests, create_scheduler, run_steps
from llmservingsim.scheduler import SchedulerOutput


def recount(out: SchedulerOutput) -> SchedulerOutput:
    ref = SchedulerOutput(scheduled=list(out.scheduled), preempted=list(out.preempted),
                          remote_kv=out.remote_kv, first_admitted=out.first_admitted,
                          general=list(out.general))
    ref.tally(ref.scheduled)
    ref.num_tokens = sum(sr.num_new for sr in out.scheduled)
    return ref


def fields(out: SchedulerOutput) -> dict:
    return {f.name: getattr(out, f.name) for f in dataclasses.fields(SchedulerOutput)}


CASES = [
    # (policy, blocks, budget, prompt, max_tokens, requests)
    ("fcfs", 10_000, 64, 100, 40, 12),      # chunked prefills beside decodes
    ("fcfs", 60, 2048, 90, 60, 10),         # preemption (a tight pool)
    ("priority", 60, 2048, 90, 60, 10),     # preemption by priority: the re-tally
    ("fcfs", 10_000, 2048, 48, 30, 8),      # same prompts: prefix hits
]


@pytest.mark.parametrize("policy,blocks,budget,prompt,max_tokens,n", CASES)
def test_every_output_field_is_set_and_recounts(policy, blocks, budget, prompt, max_tokens, n):
    seen = []

    def check(out):
        got = fields(out)           # an unset slot raises here
        assert got == fields(recount(out))
        seen.append((len(out.scheduled), out.num_sampled, bool(out.preempted)))

    sched = create_scheduler(policy=policy, num_blocks=blocks, max_num_batched_tokens=budget)
    reqs = create_requests(n, num_tokens=prompt, max_tokens=max_tokens, same_prompt=(prompt == 48),
                           priorities=[k % 3 for k in range(n)] if policy == "priority" else None)
    for r in reqs:
        sched.add_request(r)
    done = run_steps(sched, async_mode=True, on_schedule=check, recycle=True)
    assert len(done) == n
    if budget == 64:
        assert any(s < k for k, s, _ in seen)     # batches with entries that do not sample
    if blocks == 60:
        assert any(p for _, _, p in seen)       # the runs do preempt


def test_an_output_whose_entries_do_not_all_sample_applies_only_the_sampling_ones():
    """A chunked prefill (budget 64, prompt 100) schedules a chunk that does not sample;
    the step's update adds no token to it and one to each sampling decode."""
    sched = create_scheduler(max_num_batched_tokens=64)
    a, b = create_requests(2, num_tokens=100, max_tokens=5)
    sched.add_request(a)
    out = sched.schedule()
    assert out.num_sampled == 0 and len(out.scheduled) == 1
    sched.update_from_output(out, 1)
    assert a.num_tokens == 100 and a.first_token_ns is None
    out = sched.schedule()          # the rest of A's prompt (36 tokens): samples
    assert out.num_sampled == 1
    sched.update_from_output(out, 2)
    assert a.num_tokens == 101 and a.first_token_ns == 2
    sched.add_request(b)
    out = sched.schedule()          # A decodes (samples), B's first chunk of 63 does not
    assert [sr.samples for sr in out.scheduled] == [True, False] and out.num_sampled == 1
    sched.update_from_output(out, 3)
    assert (a.num_tokens, b.num_tokens, b.first_token_ns) == (102, 100, None)


def test_a_retallied_output_recounts():
    """Priority preemption of a request already scheduled in the pass (A, priority 5, runs
    first; three priority-0 requests arrive and outgrow a 16-block pool): its entry is taken
    back and the output is re-tallied from all its entries (``retally``)."""
    from engine_helpers import make_request


    retallied = []
    sched = create_scheduler(policy="priority", num_blocks=16, max_num_batched_tokens=2048)

    def check(out):
        assert fields(out) == fields(recount(out))
        if out.preempted and any(v.priority == 5 for v in out.preempted) and out.scheduled:
            retallied.append(out)

    a = make_request(0, num_tokens=20, max_tokens=80, priority=5)
    later = [make_request(k, num_tokens=20, max_tokens=80, priority=0, arrival_ns=k) for k in (1, 2, 3)]
    sched.add_request(a)
    done = run_steps(sched, async_mode=True, recycle=True, arrivals={2: later}, on_schedule=check)
    assert len(done) == 4 and retallied
