"""The scheduler's decode runs (``Scheduler.schedule``): a run of running decodes is
committed without a block lookup unless the token opens or completes a block; it stops at
the first request that is not such a decode, which the general path takes, and the next run
starts after it. Exact scenarios for each way out of a run and each block boundary:

- a decode at ``max_model_len`` (``computed == max_model_len - 1``) is not scheduled, and
  the decodes after it in ``running`` still are, with the batch tallies of those alone;
- block size 1: every decode opens a block and completes it (one block taken, one
  published at schedule time);
- a token that starts a block the request already holds (allocated past its computed
  tokens) takes no block; with block size 1 it publishes that block;
- a token that starts a block when none is free leaves the run: the general path preempts
  (FCFS: the tail), and the requests before it keep their entries.
"""
from __future__ import annotations

from engine_helpers import block_ids, create_scheduler, make_request, scheduled_ids, step
from llmservingsim.request import RequestStatus


def tallies(out):
    return (out.num_decodes, out.decode_kv_sum, out.decode_kv_max, out.decode_kv_min,
            out.prefill_tokens, out.num_sampled, out.num_tokens)


def test_decode_at_max_model_len_is_not_scheduled_and_the_run_goes_on():
    """max_model_len 20 (last position 19): A (prompt 16) decodes at 16, 17 and 18; at 19
    computed tokens it is never scheduled again (its num_new clamps to 0) and stays
    running. B, behind A in ``running``, decodes in every step, and once A has stopped
    the batches hold B alone (tallies included)."""
    sched = create_scheduler(max_model_len=20)
    a = make_request(0, num_tokens=16, max_tokens=10)
    b = make_request(1, num_tokens=3, max_tokens=10, arrival_ns=1)
    sched.add_request(a)
    sched.add_request(b)
    out, _ = step(sched, 0)
    assert scheduled_ids(out) == [0, 1] and tallies(out) == (0, 0, 0, 0, 19, 2, 19)
    for k, ctx_b in enumerate((3, 4, 5)):       # A at 16, 17, 18 computed tokens
        out, _ = step(sched, 1 + k)
        assert [(sr.req.request_id, sr.ctx_before) for sr in out.scheduled] == [(0, 16 + k), (1, ctx_b)]
        assert tallies(out) == (2, 17 + k + ctx_b + 1, 17 + k, ctx_b + 1, 0, 2, 2)
    assert a.num_computed_tokens == 19 and a.num_tokens == 20
    for k, ctx_b in enumerate((6, 7, 8)):       # A at max_model_len - 1: B alone
        out, done = step(sched, 4 + k)
        assert [(sr.req.request_id, sr.ctx_before) for sr in out.scheduled] == [(1, ctx_b)]
        assert tallies(out) == (1, ctx_b + 1, ctx_b + 1, ctx_b + 1, 0, 1, 1)
    assert a.num_computed_tokens == 19 and a.status == RequestStatus.RUNNING
    assert sched.running == [a, b] and not done
    assert a.num_placeholders == 0 and a.num_output_tokens == 4


def test_block_size_one_decode_opens_and_completes_its_block():
    """Block size 1, prompt 4: each decode takes one block and publishes it at schedule
    time (its token is known: the previous step sampled it)."""
    sched = create_scheduler(block_size=1, num_blocks=50)
    kv = sched.kv
    req = make_request(0, list(range(20)), num_tokens=4, max_tokens=6, block_size=1)
    sched.add_request(req)
    step(sched, 0)
    assert len(block_ids(kv, req)) == 4 and kv.num_cached_blocks[0] == 4
    for k in range(4):
        free = kv.num_free_blocks
        out = sched.schedule()
        assert [(sr.num_new, sr.ctx_before, sr.samples) for sr in out.scheduled] == [(1, 4 + k, True)]
        assert tallies(out) == (1, 5 + k, 5 + k, 5 + k, 0, 1, 1)
        assert kv.num_free_blocks == free - 1 and len(block_ids(kv, req)) == 5 + k
        assert kv.num_cached_blocks[0] == 5 + k
        assert kv.pool.cached.get(req.stream.block_hashes(5 + k)[4 + k]) is kv.get_blocks(0)[4 + k]
        sched.update_from_output(out, 1 + k)


def test_block_already_held_is_not_allocated_again():
    """Block size 16, prompt 16: the request is given a second block before its first
    decode (``append_new_block``: held past its computed tokens). The decode's token starts
    that block: no block is taken, nothing is published."""
    sched = create_scheduler(num_blocks=10)
    kv = sched.kv
    req = make_request(0, list(range(40)), num_tokens=16, max_tokens=5)
    sched.add_request(req)
    step(sched, 0)
    kv.append_new_block(req)
    free, held = kv.num_free_blocks, block_ids(kv, req)
    out, _ = step(sched, 1)
    assert [(sr.num_new, sr.ctx_before) for sr in out.scheduled] == [(1, 16)]
    assert tallies(out) == (1, 17, 17, 17, 0, 1, 1)
    assert kv.num_free_blocks == free and block_ids(kv, req) == held
    assert kv.num_cached_blocks[0] == 1


def test_block_size_one_block_already_held_is_published():
    """Block size 1, prompt 4, a fifth block given before the first decode: the decode
    takes no block and publishes the held one at schedule time."""
    sched = create_scheduler(block_size=1, num_blocks=50)
    kv = sched.kv
    req = make_request(0, list(range(20)), num_tokens=4, max_tokens=6, block_size=1)
    sched.add_request(req)
    step(sched, 0)
    kv.append_new_block(req)
    free = kv.num_free_blocks
    out = sched.schedule()
    assert [(sr.num_new, sr.ctx_before) for sr in out.scheduled] == [(1, 4)]
    assert kv.num_free_blocks == free and len(block_ids(kv, req)) == 5
    assert kv.num_cached_blocks[0] == 5


def test_block_start_without_a_free_block_leaves_the_run_and_preempts_the_tail():
    """Block size 4, 6 usable blocks, no prefix caching. A (prompt 7) and B (prompt 8)
    hold 2 blocks each, C (prompt 5) the other 2. A's decode at 7 completes its block
    (inside the run), B's at 8 starts a block: none is free, so the run stops and the
    general path preempts the tail (C) and gives B a block. A's entry is kept, C's token
    is gone from the batch."""
    sched = create_scheduler(block_size=4, num_blocks=7, enable_caching=False)
    kv = sched.kv
    a = make_request(0, num_tokens=7, max_tokens=5, block_size=4)
    b = make_request(1, num_tokens=8, max_tokens=5, arrival_ns=1, block_size=4)
    c = make_request(2, num_tokens=5, max_tokens=5, arrival_ns=2, block_size=4)
    for r in (a, b, c):
        sched.add_request(r)
    step(sched, 0)
    assert kv.num_free_blocks == 0 and [len(block_ids(kv, r)) for r in (a, b, c)] == [2, 2, 2]
    out = sched.schedule()
    assert out.preempted == [c] and c.status == RequestStatus.PREEMPTED
    assert [(sr.req.request_id, sr.ctx_before) for sr in out.scheduled] == [(0, 7), (1, 8)]
    assert tallies(out) == (2, 17, 9, 8, 0, 2, 2)
    assert [len(block_ids(kv, r)) for r in (a, b)] == [2, 3] and kv.num_free_blocks == 1
    assert sched.running == [a, b]
