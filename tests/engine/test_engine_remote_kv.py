"""The one WAITING_FOR_REMOTE_KVS path (llmservingsim/remote_kv.py), driven through a minimal
source: match, allocate unpublished and park, land, re-admit first; the two re-entry rules
(``ahead_of_queue``) that the tier and P/D sources use."""
from __future__ import annotations

from engine_helpers import BLOCK, create_scheduler, make_request, num_scheduled, scheduled_ids
from llmservingsim.request import RequestStatus


class FixedSource:
    """Supplies ``tokens`` past the local hit for the requests in ``ids`` (once each)."""

    def __init__(self, ids, tokens: int, ahead_of_queue: bool):
        self.ids = set(ids)
        self.tokens = tokens
        self.ahead_of_queue = ahead_of_queue
        self.noted: list = []
        self.started: list = []

    def get_num_new_matched_tokens(self, req, hits, num_hit):
        return self.tokens if req.request_id in self.ids else None

    def update_state_after_alloc(self, req, hits, num_hit, num_external):
        self.ids.discard(req.request_id)
        self.noted.append((req.request_id, num_hit, num_external))

    def start(self, reqs, now_ns):
        self.started.append(([r.request_id for r in reqs], now_ns))


def _ids(rid: int, n: int = 64) -> list:
    return [rid] * n


def test_park_publish_readmit_first():
    """A (64 tokens) gets 32 from the source: 2 blocks of 16 allocated, nothing scheduled for
    it, parked; B (no match) is admitted in the same pass with all 64 tokens. Before landing
    a copy of A's prompt hits nothing (the blocks are unpublished); after landing it hits
    those 2 blocks = 32 tokens, and A is admitted ahead of C (queued earlier) computing only
    64 - 32 = 32 tokens."""
    sched = create_scheduler()
    src = FixedSource({0}, 2 * BLOCK, ahead_of_queue=True)
    sched.kv_sources = (src,)
    a, b = make_request(0, _ids(0)), make_request(1, _ids(1))
    sched.add_request(a)
    sched.add_request(b)
    out = sched.schedule()
    assert num_scheduled(out) == {1: 64}
    assert out.remote_kv == {src: [a]} and src.noted == [(0, 0, 32)]
    assert a.status == RequestStatus.WAITING_FOR_REMOTE_KVS and sched.num_receiving == 1
    assert a not in sched.running and a not in list(sched.waiting) and not sched.landed
    assert len(sched.kv.get_blocks(0)) == 2 and a.num_computed_tokens == 0
    assert sched.kv.get_computed_blocks(make_request(9, _ids(0)))[1] == 0

    c = make_request(2, _ids(2))
    sched.add_request(c)
    sched.finished_recving(a, 32, ahead_of_queue=True)
    assert a.status == RequestStatus.WAITING and sched.num_receiving == 0
    assert a.num_computed_tokens == 32
    assert sched.kv.get_computed_blocks(make_request(9, _ids(0)))[1] == 32
    out = sched.schedule()
    # B decodes its 1 token (phase 1), then A from the landed FIFO, then C
    assert scheduled_ids(out) == [1, 0, 2]
    assert num_scheduled(out) == {1: 1, 0: 32, 2: 64}
    assert out.remote_kv is None


def _priority_landing(ahead: bool) -> list:
    """Priority policy: A (priority 5) parks; C (priority 0, more urgent) arrives; A lands."""
    sched = create_scheduler(policy="priority")
    src = FixedSource({0}, 2 * BLOCK, ahead_of_queue=ahead)
    sched.kv_sources = (src,)
    a = make_request(0, _ids(0), priority=5)
    sched.add_request(a)
    assert num_scheduled(sched.schedule()) == {}
    sched.add_request(make_request(2, _ids(2), priority=0))
    sched.finished_recving(a, 32, ahead_of_queue=ahead)
    return scheduled_ids(sched.schedule())


def test_reentry_rules_differ_under_priority():
    """The tier rule (ahead of the queue) admits the landed A before the more urgent C; the
    P/D rule (prepended to the waiting heap) lets C's key win."""
    assert _priority_landing(True) == [0, 2]
    assert _priority_landing(False) == [2, 0]


def test_first_matching_source_wins_and_unfit_head_is_not_offered():
    """Two sources match A; only the first parks it (1 block for its 16 tokens). In a pool
    of 4 blocks A's whole sequence (64 prompt + 16 output tokens = 5 blocks) cannot fit, so
    admission stops at the head-of-line fit check before any source is asked."""
    sched = create_scheduler()
    first = FixedSource({0}, BLOCK, ahead_of_queue=True)
    second = FixedSource({0}, 2 * BLOCK, ahead_of_queue=False)
    sched.kv_sources = (first, second)
    a = make_request(0, _ids(0))
    sched.add_request(a)
    out = sched.schedule()
    assert out.remote_kv == {first: [a]} and second.noted == []
    assert len(sched.kv.get_blocks(0)) == 1

    small = create_scheduler(num_blocks=4)
    src = FixedSource({0}, BLOCK, ahead_of_queue=True)
    small.kv_sources = (src,)
    small.add_request(make_request(0, _ids(0)))
    out = small.schedule()
    assert out.remote_kv is None and src.noted == [] and small.num_receiving == 0
