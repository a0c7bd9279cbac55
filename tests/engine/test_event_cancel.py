"""Cancelled events (EventLoop.cancel) and the retention entries that cancel their expiry.

- A run with some events cancelled runs exactly the events of a loop where those were never
  scheduled: the same callbacks, in the same order, at the same clock readings, with the same
  watcher calls; ``peek`` and ``len`` see only the events that will run (hypothesis).
- A protected entry that leaves before its deadline (superseded by its program's next call,
  released at the next arrival) cancels its expiry event; one that reaches its deadline
  expires as before.
"""
from hypothesis import given, settings, strategies as st

from engine_helpers import create_scheduler
from hooks import Hooks, RetentionDecision
from llmservingsim.cluster import Cluster
from llmservingsim.events import EventLoop
from llmservingsim.instance import Instance
from llmservingsim.request import CallSpec
from llmservingsim.step_timer import StepTiming
from llmservingsim.tokens import TokenStream


def _drive(events, cancel, skip_scheduling, peeking):
    """Schedule ``events`` (time, label; label k may schedule a follow-up at +follow) on a
    loop with a watcher; cancel the ones in ``cancel`` (or, ``skip_scheduling``, never
    schedule them). Returns what ran, the peeks and lens seen, and the watcher's calls."""
    loop = EventLoop()
    log, watched = [], []

    def watcher(next_ns):
        watched.append((loop.now, next_ns))
        return next_ns + 7

    loop.watch(watcher, 0)
    handles = {}

    def make(label, follow):
        def cb():
            # peek drops cancelled events at the head: without it run() must skip them
            log.append((loop.now, label, loop.peek() if peeking else None, len(loop)))
            if follow:
                loop.schedule(loop.now + follow, make(label + 1000, 0))
        return cb

    for i, (t, follow) in enumerate(events):
        if skip_scheduling and i in cancel:
            loop._seq += 1          # the same sequence numbers as the loop that cancels
            continue
        handles[i] = loop.schedule(t, make(i, follow))
    if not skip_scheduling:
        for i in sorted(cancel):
            loop.cancel(handles[i])
    first = (loop.peek() if peeking else None, len(loop))
    loop.run()
    return first, log, watched, loop.now if log else None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.sampled_from([0, 0, 3, 20])), min_size=1, max_size=12),
       st.data())
def test_cancelled_events_are_as_if_never_scheduled(events, data):
    cancel = set(data.draw(st.lists(st.integers(0, len(events) - 1), max_size=len(events))))
    peeking = data.draw(st.booleans())
    assert _drive(events, cancel, False, peeking) == _drive(events, cancel, True, peeking)


def test_cancel_then_peek_len_and_step():
    loop = EventLoop()
    ran = []
    a = loop.schedule(10, lambda: ran.append("a"))
    loop.schedule(20, lambda: ran.append("b"))
    loop.cancel(a)
    assert len(loop) == 1 and loop.peek() == 20
    loop.step()
    assert ran == ["b"] and loop.now == 20 and len(loop) == 0 and loop.peek() is None


STEP = 1_000


class FixedTimer:
    def time(self, out):
        return StepTiming(total_ns=STEP, compute_ns=STEP, comm_ns=0, overhead_ns=0)


class ProtectFor:
    """Protect every call's KV for ``ttl`` ns; release the owner's entry at the next arrival
    when ``release_on_arrival``."""

    def __init__(self, ttl, release_on_arrival):
        self.ttl, self.release_on_arrival = ttl, release_on_arrival

    def on_complete(self, call, now, util):
        return RetentionDecision("protect", now + self.ttl, 1.0)

    def on_arrival(self, call, now):
        return RetentionDecision("release" if self.release_on_arrival else "none", 0, None)


def _run(ttl, release_on_arrival, gap):
    """Program 0's two calls (the second extends the first's context) ``gap`` ns apart."""
    loop = EventLoop()
    hooks = Hooks(retention=ProtectFor(ttl, release_on_arrival))
    cluster = Cluster(loop, hooks)
    inst = Instance(0, loop, create_scheduler(), FixedTimer(), cluster.hooks, True, cluster.finished)
    cluster.add_instance(inst)
    stream = TokenStream(uid=7, block_size=16)
    first = CallSpec(owner=0, call_index=0, prompt_tokens=64, output_tokens=4, tool_duration_ns=0,
                     tool_name=None, tokens=stream)
    second = CallSpec(owner=0, call_index=1, prompt_tokens=100, output_tokens=4, tool_duration_ns=0,
                      tool_name=None, tokens=stream)
    cluster.submit(0, first, 0)
    while 0 not in inst.kv.entries:     # up to the first call's completion
        loop.step()
    entry = inst.kv.entries[0]
    expiry = entry.expiry
    pending = len(loop)
    loop.run(until_ns=loop.now + 2 * STEP)     # its last step ends
    loop.schedule(loop.now + gap, lambda: cluster.submit(0, second, 1))
    loop.run(until_ns=loop.now + gap + 20 * STEP)       # the second call has finished
    return entry, expiry, pending, inst.kv, loop


def test_a_superseded_entry_cancels_its_expiry():
    entry, expiry, pending, kv, loop = _run(ttl=10**9, release_on_arrival=False, gap=STEP)
    assert expiry is not None and pending == 1          # the first call's expiry, pending
    assert entry.expiry is None                          # superseded: cancelled
    second = kv.entries[0]
    assert second.seq == entry.seq + 1 and second.expiry is not None and len(loop) == 1
    loop.run()          # the second entry reaches its deadline: it expires
    assert 0 not in kv.entries and len(loop) == 0 and loop._cancelled == set()


def test_an_entry_released_at_arrival_cancels_its_expiry():
    entry, expiry, pending, kv, loop = _run(ttl=10**9, release_on_arrival=True, gap=STEP)
    assert expiry is not None and entry.expiry is None
    assert kv.entries[0].seq == entry.seq + 1 and len(loop) == 1     # only the second's expiry
    loop.run()
    assert 0 not in kv.entries and len(loop) == 0 and loop._cancelled == set()


def test_an_entry_reaching_its_deadline_expires():
    # ttl shorter than the gap: the first entry expires before the second call arrives, and
    # the second's expires after it finished; nothing is cancelled
    entry, expiry, pending, kv, loop = _run(ttl=5 * STEP, release_on_arrival=False, gap=10**6)
    assert expiry is not None and entry.expiry is None
    assert 0 not in kv.entries and len(loop) == 0
    assert kv.pool.entry_only == 0 and kv.num_reclaimed_entries == 0 and loop._cancelled == set()
    kv.check_invariants()
