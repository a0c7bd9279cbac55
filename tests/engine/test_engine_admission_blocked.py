"""``Scheduler.admission_blocked``, the verdict fast-forward starts a run with while requests
wait (llmservingsim/fast_forward.py): None ("may admit") exactly when the next schedule
admits the waiting head (given the free blocks its decodes leave). It says so without a prefix lookup when the head fits with no
cache hit (issue 15); the lookup path decides the rest.
"""
from __future__ import annotations

import random

from hypothesis import assume, given, settings, strategies as st

from engine_helpers import create_scheduler, make_request, step


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 10_000), num_blocks=st.integers(4, 60), chunked=st.booleans(),
       budget=st.sampled_from([16, 40, 64, 200, 2048]), threshold=st.sampled_from([0, 0, 24]),
       decoding=st.booleans(), cached=st.integers(0, 3))
def test_admission_verdict_is_what_the_next_schedule_does(seed, num_blocks, chunked, budget, threshold,
                                                          decoding, cached):
    """``admission_blocked(n)`` is None exactly when the schedule after it (its phase 1 taking
    ``n`` decode tokens) admits the waiting head: with and without cached prefixes of the
    head (evictable blocks counted free), chunked prefill on or off, a long-prefill threshold."""
    rng = random.Random(seed)
    sched = create_scheduler(max_num_seqs=4, max_num_batched_tokens=budget, num_blocks=num_blocks,
                             enable_chunked_prefill=chunked, long_prefill_token_threshold=threshold)
    base = [rng.randint(0, 3) for _ in range(400)]      # a shared prefix of the head's prompt
    now = 0
    for k in range(cached):     # earlier requests with a prefix of the head's: cached, freed
        length = rng.randint(1, 120)
        sched.add_request(make_request(100 + k, base[:length], max_tokens=1))
        for _ in range(40):
            if not sched.has_work():
                break
            now += 1
            step(sched, now)
        assume(not sched.has_work())
    n = 0
    if decoding:                # a running request in its decodes (one token a step)
        holder = make_request(200, [9] * rng.randint(1, 60), max_tokens=500)
        sched.add_request(holder)
        for _ in range(40):
            now += 1
            step(sched, now)
            if holder.num_computed_tokens == holder.num_tokens and sched.running == [holder]:
                break
        assume(sched.running == [holder] and not sched.num_preemptions)
        n = 1
    head = make_request(300, base[:rng.randint(1, 400)] + [7] * rng.randint(0, 40), max_tokens=8)
    sched.add_request(head)
    verdict = sched.admission_blocked(n)
    held = len(sched.kv.get_blocks(200)) if decoding else 0
    out = sched.schedule()
    assume(not out.preempted)
    admitted = head in sched.running
    # sound: a blocked verdict is never followed by an admission (fast-forward's runs rely on it)
    assert verdict is None or not admitted, (verdict, len(head.stream.block_hashes(1)))
    # exact: "may admit" is followed by an admission unless this schedule's decode took a block
    # first (fast-forward asks after the pending step's allocations, so it sees that block gone)
    took = decoding and len(sched.kv.get_blocks(200)) > held
    assert verdict is not None or admitted or took, (verdict, len(head.stream.block_hashes(1)))
