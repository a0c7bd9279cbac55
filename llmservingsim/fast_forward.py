"""Exact fast-forward over runs of pure-decode steps (issue 5).

When an instance's next steps are pure decode of an unchanging batch and nothing can
intervene, the scheduler's and updater's per-request loops are predictable: every running
request computes and samples one token per step. ``fast_forward`` then applies many such
steps at once, with exactly the step times, block allocations, cache publications, token
timestamps and metrics the step-by-step loop would produce.

Conditions (checked at the end of step N, after its output is applied, async scheduling):
- step N+1 (already scheduled) is pure decode, contains every running request in list
  order and preempted nobody;
- no admission can happen: the waiting queue is empty, or its head is blocked in a way
  that provably lasts while only decodes run (``Scheduler.admission_blocked``: the batch is
  at ``max_num_seqs``, or the head does not fit and nothing in the horizon can make it fit
  but the publication of the block that extends its cached prefix, where the run stops);
- no request reaches its max_tokens inside the horizon (finishes are events);
- the block allocations of the horizon fit in the free blocks (no allocation can fail,
  so no reclamation or preemption);
- no other event is due before the last fast-forwarded step is launched (arrivals,
  releases, other instances' steps: anything a policy or the scheduler could observe).
Steps N+1 .. N+J-1 are applied in bulk; step N+J is launched by the normal code at its
start time through the event loop, so the clock owner stays the event loop.
"""
from __future__ import annotations

import math


MIN_STEPS = 3
# Planning a run costs O(batch) up front, so a run is only attempted when the time to the
# next event holds at least this many steps of the last step's length (a cheap estimate;
# declining never changes results, only speed).
MIN_GAP_STEPS = 4


def try_fast_forward(inst, nxt) -> bool:
    """Fast-forward ``inst`` whose pending step is ``nxt``; False if it does not apply."""
    sched = inst.scheduler
    if nxt.preempted or nxt.remote_kv is not None or sched.landed:  # transfers to start, landed KV to admit
        return False
    loop = inst.loop
    next_event = loop.peek()
    # no next event: no limit (not a large int: simulated times are unbounded ints, and a
    # clock past 2**62 ns must not look like "no room")
    limit = next_event if next_event is not None else math.inf
    if limit - loop.now < MIN_GAP_STEPS * inst.last_step_ns:   # cheap decline: no room for a run
        return False
    running = sched.running
    scheduled = nxt.scheduled
    n = len(scheduled)
    # every entry a decode that samples (the batch's tallies), of every running request in order
    if n == 0 or n != len(running) or nxt.num_decodes != n or nxt.num_sampled != n:
        return False
    horizon = 1 << 62
    for sr, req in zip(scheduled, running):
        if sr.req is not req:
            return False
        left = req.max_tokens - (req.num_tokens - req.prompt_len)
        if left < horizon:
            horizon = left
    kv_sum, kv_max, kv_min = nxt.decode_kv_sum, nxt.decode_kv_max, nxt.decode_kv_min
    if horizon < MIN_STEPS:
        return False
    unblock = sched.admission_blocked(n) if sched.waiting else (-1, None)
    if unblock is None:
        return False
    # Plan: bulk step j (j = 1..J-1) runs step N+j over [T_{j-1}, T_j) and schedules N+j+1;
    # nobody finishes in them (j < horizon), and every bulk step, and the launch of the step
    # after them, must precede the next event. The first step that is not bulk is launched
    # normally, with its timing (already computed here) handed on.
    stretch = inst.timer.decode_stretch(n, kv_sum, kv_max, kv_min)   # step N+j's timing, j = 1, 2, ...
    times = []
    t = loop.now
    for j in range(1, horizon + 1):
        timing = next(stretch)
        if j == horizon or t + timing.total_ns >= limit:
            break
        times.append((t, timing))
        t += timing.total_ns
    if len(times) < MIN_STEPS - 1:
        return False
    steps = len(times)          # bulk steps N+1 .. N+steps; step N+steps+1 launches normally
    # ... their block allocations must fit in the free blocks (none can fail) ...
    allocs, pubs = _block_events(inst, scheduled, steps)
    free = inst.kv.pool.num_free
    if len(allocs) > free:
        steps = allocs[free][0] - 1            # the (free+1)-th allocation happens in that step
    # ... and the waiting head must stay blocked
    if unblock[1] is not None:
        steps = _until_unblocked(scheduled, steps, inst.kv.block_size, *unblock)
    if steps < MIN_STEPS - 1:
        return False
    if steps < len(times):
        t, timing = times[steps]
        del times[steps:]
    _apply(inst, nxt, times, allocs, pubs)
    loop.schedule(t, lambda: inst._launch(nxt, t, timing))
    return True


def _until_unblocked(scheduled, steps: int, bs: int, k: int, h: int) -> int:
    """The bulk steps that may run before the waiting head could be admitted: a request
    whose sampled tokens complete its block ``k`` with hash ``h`` (the head's next block)
    extends the head's cached prefix at the end of that bulk step, so the schedule after
    it must run normally."""
    for sr in scheduled:
        req = sr.req
        j = (k + 1) * bs - req.num_tokens       # the bulk step whose token completes block k
        if 1 <= j <= steps and req.stream.block_hashes(k + 1)[k] == h:
            steps = j
    return steps


def _block_events(inst, scheduled, max_step: int) -> tuple[list, list]:
    """(bulk step, batch index) of every block allocation and of every block publication
    within ``max_step`` steps, each in the order the step-by-step loop makes them. In bulk
    step j the schedule of step N+j+1 takes a request from ``c + j`` to ``c + j + 1``
    computed tokens (c = its pending context); it needs a block when that exceeds the tokens
    its blocks hold. The end of step N+j samples its token ``n0 + j`` (n0 = its tokens now),
    which completes a block at a multiple of the block size."""
    bs = inst.kv.block_size
    blocks = inst.kv.req_blocks
    allocs = []
    pubs = []
    for i, sr in enumerate(scheduled):
        j = len(blocks[sr.req.request_id]) * bs - sr.ctx_before     # c + j == held * bs
        if j < 1:
            j = 1
        while j <= max_step:
            allocs.append((j, i))
            j += bs
        j = bs - sr.req.num_tokens % bs
        while j <= max_step:
            pubs.append((j, i))
            j += bs
    allocs.sort()
    pubs.sort()
    return allocs, pubs


def _apply(inst, nxt, times, allocs: list, pubs: list) -> None:
    """Apply bulk steps N+1..N+steps (one per ``times`` entry) in step-by-step order: launch
    of N+j (metrics), the schedule of N+j+1 (block allocations), the end of N+j (sampled
    token; a completed block is published). Per-request counters move once, by ``steps``.

    Metrics read the instance's state only where a step's start samples it (the first
    start past a whole second), and the KV events change nothing else they record, so
    the KV events are applied in their order, and the metrics of the steps up to each
    sampling start are recorded in one call made once the events before that start are
    applied (``MetricsCollector.on_decode_steps``)."""
    scheduled = nxt.scheduled
    on_decode = inst._on_decode_steps
    n = len(scheduled)
    steps = len(times)
    for sr in scheduled:        # a call admitted as a "decode" (all but its last token hit)
        if sr.req.first_scheduled_ns is None:
            sr.req.first_scheduled_ns = times[0][0]
    events = [0, 0]             # allocs and pubs applied so far
    # starts at or before ``due`` sample nothing (not known yet: the first one may)
    due = -1 if on_decode is not None else math.inf
    lo = 0                      # times[lo] is the first step not yet recorded
    while lo < steps:
        hi = lo                 # times[hi]: the next start that samples (or the end)
        while hi < steps and times[hi][0] <= due:
            hi += 1
        _events_through(inst.kv, scheduled, allocs, pubs, events, hi)   # those before times[hi]'s launch
        last = hi + 1 if hi < steps else steps
        busy = 0
        for k in range(lo, last):
            busy += times[k][1].total_ns
        inst.busy_ns += busy
        inst.num_steps += last - lo
        if on_decode is not None:
            due = on_decode(inst, times, lo, last, n)
        lo = last
    _events_through(inst.kv, scheduled, allocs, pubs, events, steps)
    inst.scheduler.advance_decodes(nxt, steps, times[0][0] + times[0][1].total_ns,
                                   times[-1][0] + times[-1][1].total_ns)


def _events_through(kv, scheduled, allocs: list, pubs: list, events: list, upto: int) -> None:
    """Apply the block allocations and publications of bulk steps up to ``upto`` (1-based)
    not applied yet (``events``: how many of each were), step by step, each step's
    allocations (its successor's schedule) before its publications (its end)."""
    a, p = events
    na, np_ = len(allocs), len(pubs)
    while True:
        j = allocs[a][0] if a < na else upto + 1
        if p < np_ and pubs[p][0] < j:
            j = pubs[p][0]
        if j > upto:
            break
        while a < na and allocs[a][0] == j:
            kv.append_new_block(scheduled[allocs[a][1]].req)
            a += 1
        while p < np_ and pubs[p][0] == j:
            req = scheduled[pubs[p][1]].req
            kv.cache_blocks(req, req.num_tokens + j)
            p += 1
    events[0], events[1] = a, p
