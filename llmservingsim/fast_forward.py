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
- no request reaches its max_tokens inside the horizon, unless its finish is quiet (below);
- the block allocations of the horizon fit in the free blocks (no allocation can fail,
  so no reclamation or preemption);
- no other event is due before the last fast-forwarded step is launched (arrivals,
  releases, other instances' steps: anything a policy or the scheduler could observe).
Steps N+1 .. N+J-1 are applied in bulk; step N+J is launched by the normal code at its
start time through the event loop, so the clock owner stays the event loop.

Runs through finishes (issue 15). A request whose last token is sampled by bulk step L
leaves the run there, as the step-by-step loop has it leave: the schedule of step N+L+1
(at N+L's launch) skips it (its last token is in flight), the end of N+L applies its last
token (the no-op-or-not publication ``update_from_output`` makes included), takes it off
``running`` and calls ``Instance._finish`` with the end's time, after that end's
publications and before the next schedule's allocations; later steps are timed as the
smaller batch (a new ``decode_stretch`` from that batch's tallies). This is exact only
when nothing can observe that the finish runs before the clock reaches it:
- the waiting queue is empty (a finish frees blocks and a batch slot, which could let a
  waiting head in; with requests waiting the run stops before any finish, as before);
- ``Instance.finish_is_quiet``: no retention hook, no KV tiers, no P/D leg, and the
  cluster's listener schedules nothing and reads nothing but the call's CallInfo
  (the program layer: the call is its program's last);
- the finish is not in the run's last bulk step: the loop's metrics watcher samples the
  seconds before the launch that follows the run with the state as it is then, which
  must not include the finish at that launch's time yet;
- someone is left for the step after the run.

Runs that span events (issue 15). Without them a run ends before the next event, and the
step launched after it, which contains the event (on the Azure stream an arrival), runs
step by step. The run may instead take that step S too as its last bulk step, when its end
finishes nobody and ``Instance.may_span`` holds; the launch after the run is then S+1's at
S's end, whose schedule is the first to see what the events did (an arrival is admitted
there, as in step mode: S+1 was scheduled at S's launch, before the event). The bulk state
is the state after S's end; every event inside S (the next one, and any it or another
schedules before S's end) must see the state step mode has while S is in flight, through
everything it can read:
- ``inst.current`` (not None: a submit only queues, no step starts; ``Cluster.load``'s
  in-flight tokens are its ``num_tokens``): the pending output, of S's batch;
- ``inst.step_end_ns`` (a submit's ``queued_ns``): S's end;
- ``Cluster.load``'s running and waiting counts, pool usage and used blocks: S's end
  changes none of them (no finish; its publications allocate and free nothing); the
  running requests' tokens are one ahead each, ``inst.tokens_ahead`` is subtracted;
- the metrics watcher samples running, waiting and pool usage only (the same);
- the priority hook reads the new request's CallInfo and the time, or the orchestrator's
  signals (the load); ``Scheduler.add_request`` only queues the request;
- nothing else: no retention hook (``on_arrival`` releases entries; expiries are events
  that change the pool), no KV tiers or sources (landings change this instance), no P/D or
  data-parallel servers (``Cluster.events_are_public``); other instances' steps read their
  own state, and the workload reads the engine through the cluster's API only.
Event order is unchanged: events already queued at S's end run before the launch after the
run as before S's end (both were scheduled later: the launch at planning, S's end at S's
launch), and events scheduled inside S for S's end run after either. An event at exactly
S's start belongs to the step before (that step ends at or after it), so S starts before
it (or at its time, in the event now running: the first bulk step).
"""
from __future__ import annotations

import math
from bisect import bisect_left
from operator import itemgetter

_step_of = itemgetter(0)        # an event's bulk step


# A run applies at least MIN_STEPS - 1 bulk steps. One pays already: planning it walks the
# batch about once, where executing the step walks it twice (schedule, update_from_output)
# and times it (docs/performance.md, 2026-12-03 "short runs").
MIN_STEPS = 2
# Planning a run costs O(batch) up front, so a run is only attempted when the time to the
# next event holds at least this many steps of the last step's length (a cheap estimate;
# declining never changes results, only speed). The last step is often a prefill's, longer
# than the decodes after it, so one such step may still hold a decode step or two.
MIN_GAP_STEPS = 1


def try_fast_forward(inst, nxt) -> bool:
    """Fast-forward ``inst`` whose pending step is ``nxt``; False if it does not apply."""
    sched = inst.scheduler
    if nxt.preempted or nxt.remote_kv is not None or sched.landed:  # transfers to start, landed KV to admit
        return False
    running = sched.running
    scheduled = nxt.scheduled
    n = len(scheduled)
    # every entry a decode that samples (the batch's tallies), of every running request in
    # order (first: the usual decline, a step with a prefill chunk, costs no more than this)
    if n == 0 or n != len(running) or nxt.num_decodes != n or nxt.num_sampled != n:
        return False
    loop = inst.loop
    next_event = loop.peek()
    # no next event: no limit (not a large int: simulated times are unbounded ints, and a
    # clock past 2**62 ns must not look like "no room")
    limit = next_event if next_event is not None else math.inf
    # cheap decline: no room for a run (unless the run may span the event: then its first
    # bulk step may be the one the event falls inside)
    if limit - loop.now < MIN_GAP_STEPS * inst.last_step_ns and not inst.may_span():
        return False
    # the waiting head must stay blocked (checked before the walk below: a request that
    # arrived during the step just ended is usually admitted by the next schedule)
    unblock = sched.admission_blocked(n) if sched.waiting else (-1, None)
    if unblock is None:
        return False
    reqs = [sr.req for sr in scheduled]
    if reqs != running:         # Request has no __eq__: list equality is identity here
        return False
    lefts = [req.max_len - req.num_tokens for req in reqs]     # per entry: the bulk step sampling its last token
    horizon = min(lefts)
    kv_sum, kv_max, kv_min = nxt.decode_kv_sum, nxt.decode_kv_max, nxt.decode_kv_min
    # finishes inside the run (module docstring): only with nobody waiting to be admitted
    through = not sched.waiting and inst.quiet_finish is not None
    if horizon < MIN_STEPS and not through:
        return False
    # Plan: bulk step j (j = 1..J-1) runs step N+j over [T_{j-1}, T_j) and schedules N+j+1;
    # every bulk step, and the launch of the step after them, must precede the next event.
    # Without ``through`` nobody finishes in them (j < horizon); with it, a quiet finish in
    # step j shrinks the batch from step j+1 on. The first step that is not bulk is launched
    # normally, with its timing (already computed here) handed on.
    stretch = inst.timer.decode_stretch(n, kv_sum, kv_max, kv_min)   # step N+j's timing, j = 1, 2, ...
    times = []
    t = loop.now
    exit_at = horizon           # the next step that finishes a request
    order = None                # with ``through``: batch indices by their last step, once needed
    j = 1
    span = False                # the last planned step ends at or after the next event
    while True:
        timing = next(stretch)
        if t + timing.total_ns >= limit:
            # a run that spans events (module docstring): this step is bulk too, unless
            # its end finishes a request (no finish in the last bulk step)
            if j != exit_at and limit < math.inf and inst.may_span():
                times.append((t, timing))
                t += timing.total_ns
                timing = next(stretch)      # the step after it, launched at its end
                span = True
            break
        if j == exit_at:
            if not through:
                break
            if order is None:
                order = sorted(range(n), key=lefts.__getitem__)
                p = 0           # order[p:] are in the batch of step j
                base = kv_sum   # that batch's KV sum at step N+1
                lo_kv, hi_kv = kv_min, kv_max   # and its least and greatest KV length there
            q = p               # order[p:q]: the requests step j finishes
            while q < n and lefts[order[q]] == j:
                q += 1
            if q == n or not _quiet(inst, scheduled, order, p, q):   # nobody left after it
                break
            times.append((t, timing))
            t += timing.total_ns
            extreme = False     # a leaver had the least or greatest length: both looked up again
            for k in range(p, q):
                kv = scheduled[order[k]].ctx_before + 1
                base -= kv
                if kv == lo_kv or kv == hi_kv:
                    extreme = True
            p = q
            exit_at = lefts[order[q]]
            m = n - q           # step N+j+1's batch: tallies at step j+1 (each KV j tokens past N+1)
            if extreme:
                lo_kv, hi_kv = _kv_range(scheduled, order, q)
            stretch = inst.timer.decode_stretch(m, base + m * j, hi_kv + j, lo_kv + j)
        else:
            times.append((t, timing))
            t += timing.total_ns
        j += 1
    if len(times) < MIN_STEPS - 1:
        return False
    steps = len(times)          # bulk steps N+1 .. N+steps; step N+steps+1 launches normally
    # ... their block allocations must fit in the free blocks (none can fail; a finish only
    # adds free blocks) ...
    through = order is not None     # the plan reached a finish (it may have stopped there)
    allocs, pubs = _block_events(inst, scheduled, steps, lefts if through else None)
    free = inst.kv.pool.num_free
    if len(allocs) > free:
        steps = allocs[free][0] - 1            # the (free+1)-th allocation happens in that step
    # ... and the waiting head must stay blocked
    if unblock[1] is not None:
        steps = _until_unblocked(scheduled, steps, inst.kv.block_size, *unblock)
    fins = None
    if through:
        ends = set(lefts)
        while steps in ends:                    # no finish in the last bulk step
            steps -= 1
        if horizon < steps:
            # (last step, batch index) of the requests that finish inside the run, by step and
            # then batch order: ``order``'s prefix (batch indices sorted stably by their last
            # step), read only as far as it finishes
            fins = []
            for i in order:
                left = lefts[i]
                if left >= steps:
                    break
                fins.append((left, i))
    if steps < MIN_STEPS - 1:
        return False
    if steps < len(times):
        t, timing = times[steps]
        del times[steps:]
    _apply(inst, nxt, times, allocs, pubs, fins, lefts)
    if span and steps == len(times):    # the events inside the last bulk step see it in flight
        inst.current = nxt              # the same batch: its num_tokens is that step's
        inst.step_end_ns = t
        inst.tokens_ahead = len(nxt.scheduled)
        loop.schedule(t, lambda: _launch_after_span(inst, nxt, t, timing))
    else:
        loop.schedule(t, lambda: inst._launch(nxt, t, timing))
    return True


def _launch_after_span(inst, nxt, t: int, timing) -> None:
    """The launch after a run that spans events: the step in flight has ended."""
    inst.tokens_ahead = 0
    inst._launch(nxt, t, timing)


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


def _quiet(inst, scheduled, order, p: int, q: int) -> bool:
    """Whether the finishes of ``order[p:q]`` may be applied inside the run."""
    for k in range(p, q):
        if not inst.finish_is_quiet(scheduled[order[k]].req):
            return False
    return True


def _kv_range(scheduled, order, q: int) -> tuple[int, int]:
    """The least and greatest step-N+1 KV length of the entries ``order[q:]``."""
    ctx = [scheduled[i].ctx_before for i in order[q:]]
    return min(ctx) + 1, max(ctx) + 1


def _block_events(inst, scheduled, max_step: int, lefts=None) -> tuple[list, list]:
    """(bulk step, batch index) of every block allocation and (bulk step, batch index,
    tokens) of every block publication within ``max_step`` steps, each in the order the
    step-by-step loop makes them. In bulk step j the schedule of step N+j+1 takes a request
    from ``c + j`` to ``c + j + 1`` computed tokens (c = its pending context); it needs a
    block when that exceeds the tokens its blocks hold. The end of step N+j samples its
    token ``n0 + j`` (n0 = its tokens now), which completes a block at a multiple of the
    block size; ``update_from_output`` then publishes up to its computed tokens, ``n0 + j``.

    ``lefts`` (a run through finishes): entry i's last token is sampled by bulk step
    ``lefts[i]``; no schedule after that takes it, and at that step's end its computed
    tokens are one short of its tokens (that token was never computed)."""
    bs = inst.kv.block_size
    blocks = inst.kv.req_blocks
    allocs = []
    pubs = []
    for i, sr in enumerate(scheduled):
        req = sr.req
        n0 = req.num_tokens
        last = max_step
        if lefts is not None:
            left = lefts[i]
            if left <= max_step:
                last = left - 1
                if (n0 + left) % bs == 0:
                    pubs.append((left, i, n0 + left - 1))
        j = len(blocks[req.request_id]) * bs - sr.ctx_before     # c + j == held * bs
        if j < 1:
            j = 1
        while j <= last:
            allocs.append((j, i))
            j += bs
        j = bs - n0 % bs
        while j <= last:
            pubs.append((j, i, n0 + j))
            j += bs
    # sorted by step alone, stably: the events of one step come from distinct entries, made in
    # batch order, so this is the tuples' own order (a sort of ints, not of tuples)
    allocs.sort(key=_step_of)
    pubs.sort(key=_step_of)
    return allocs, pubs


def _apply(inst, nxt, times, allocs: list, pubs: list, fins, lefts: list) -> None:
    """Apply bulk steps N+1..N+steps (one per ``times`` entry) in step-by-step order: launch
    of N+j (metrics), the schedule of N+j+1 (block allocations), the end of N+j (sampled
    token; a completed block is published; ``fins``: (j, batch index) of the requests it
    finishes, in batch order). Per-request counters move once, by ``steps`` (a finished
    request's at its finish).

    Metrics read the instance's state only where a step's start samples it (the first
    start past a whole second), and publications change nothing they record, so the KV
    events are applied in their order, and the metrics of the steps up to each sampling
    start are recorded in calls made once the events before that start are applied
    (``MetricsCollector.on_decode_steps``, one call per batch size). A finish at a step's
    end changes the state (running requests, free blocks): it is applied after the sample
    of the start it coincides with (the sampled seconds precede that start)."""
    scheduled = nxt.scheduled
    on_decode = inst._on_decode_steps
    n = len(scheduled)
    steps = len(times)
    if inst.tiers is not None:      # each bulk step's end stores its new full blocks
        inst.tiers.after_decode_run(scheduled, times)
    for k in range(nxt.first_admitted, n):     # a call admitted as a "decode" (all but its last
        req = scheduled[k].req                  # token hit); SchedulerOutput.first_admitted
        if req.first_scheduled_ns is None:
            req.first_scheduled_ns = times[0][0]
    if fins:
        first_ns = times[0][0] + times[0][1].total_ns

        def finish(j: int, group: list) -> None:      # bulk step j ends at times[j]'s start
            _finish(inst, group, j, times[j][0], first_ns)
    else:
        fins = ()
        finish = None
    events = [0, 0, 0]          # allocs, pubs and finishes applied so far
    # starts at or before ``due`` sample nothing (not known yet: the first one may)
    due = -1 if on_decode is not None else math.inf
    lo = 0                      # times[lo] is the first step not yet recorded
    f = 0                       # fins[f:] are the finishes at or after step lo + 1 ends
    size = n                    # the batch of step lo + 1
    nf = len(fins)
    end_ns = times[-1][0] + times[-1][1].total_ns
    while lo < steps:
        # times[hi]: the next start that samples (or the end): the first start past due
        # ((due + 1,) sorts before (due + 1, timing) and after every earlier start)
        hi = bisect_left(times, (due + 1,), lo) if due < end_ns else steps
        # the events before times[hi]'s launch (not the finishes at that start)
        _events_through(inst.kv, scheduled, allocs, pubs, fins, events, hi, hi - 1, finish)
        last = hi + 1 if hi < steps else steps
        # the steps are back to back: their busy time is the span they cover
        inst.busy_ns += (times[last][0] if last < steps else end_ns) - times[lo][0]
        if on_decode is None:
            inst.num_steps += last - lo
        else:
            while lo < last:    # times[k] is step k+1: its batch lacks the finishes of steps <= k
                end = last
                if f < nf and fins[f][0] < last:
                    end = fins[f][0]
                    if end <= lo:           # step lo finishes them: times[lo] on lack them
                        while f < nf and fins[f][0] == end:
                            f += 1
                            size -= 1
                        continue
                inst.num_steps += end - lo
                due = on_decode(inst, times, lo, end, size)
                lo = end
        lo = last
    _events_through(inst.kv, scheduled, allocs, pubs, fins, events, steps, steps, finish)
    if fins:
        nxt.scheduled = [sr for sr, left in zip(scheduled, lefts) if left > steps]
        nxt.retally_decodes()
        nxt.first_admitted = len(nxt.scheduled)     # every entry was stamped above
    inst.scheduler.advance_decodes(nxt, steps, times[0][0] + times[0][1].total_ns,
                                   times[-1][0] + times[-1][1].total_ns)


def _finish(inst, group: list, j: int, end_ns: int, first_ns: int) -> None:
    """The end of bulk step ``j`` (at ``end_ns``) finishes the requests ``group`` (batch
    order): as ``update_from_output`` (their last token, off ``running``), then
    ``Instance._finish`` for each, in that order."""
    sched = inst.scheduler
    for req in group:
        sched.finish_decode(req, j, first_ns, end_ns)
    for req in group:
        inst._finish(req, end_ns)


def _events_through(kv, scheduled, allocs: list, pubs: list, fins, events: list, upto: int,
                    fin_upto: int, finish) -> None:
    """Apply the block allocations and publications of bulk steps up to ``upto`` (1-based)
    and the finishes of bulk steps up to ``fin_upto`` not applied yet (``events``: how many
    of each were), in step-by-step order: each step's allocations (its successor's
    schedule), then its publications and finishes (its end).

    The steps up to the next finish (a *segment*) are applied by one
    ``KVCacheManager.apply_decode_events``, whose allocations take their blocks from the
    free queue at once: nothing else in a segment reads or changes the free queue (a
    publication reads and writes only contents, the prefix map, copies and memos, and
    publishes a held block), and one take of m blocks is m one-block takes (the same
    blocks, in order, the same queue after). A finish frees blocks into the queue, so a
    take never crosses one."""
    a, p, f = events
    na, np_, nf = len(allocs), len(pubs), len(fins)
    while True:
        end = upto          # this segment's last step: the next finish to apply, or upto
        fin = f < nf and fins[f][0] <= fin_upto
        if fin and fins[f][0] < end:
            end = fins[f][0]
        a2 = bisect_left(allocs, (end + 1,), a) if a < na else a
        p2 = bisect_left(pubs, (end + 1,), p) if p < np_ else p
        if a < a2 or p < p2:
            kv.apply_decode_events(scheduled, allocs, a, a2, pubs, p, p2)
            a, p = a2, p2
        if not fin or fins[f][0] != end:
            break
        group = []
        while f < nf and fins[f][0] == end:
            group.append(scheduled[fins[f][1]].req)
            f += 1
        finish(end, group)
    events[0], events[1], events[2] = a, p, f
