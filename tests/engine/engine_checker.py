"""An output validator for randomized engine runs (vLLM's ``_check_valid_scheduler_output``
plus KV conservation), kept apart from the engine: it mirrors each request's computed
tokens from the scheduler outputs alone and cross-checks the engine's state every step.

Checked after every ``schedule()``:
- tokens scheduled == ``out.num_tokens`` <= budget; each request at most once, > 0 tokens;
  ``len(running) <= max_num_seqs``; preempted and scheduled requests are disjoint;
- a request's chunk starts where the mirror says, except at admission, where it may start
  later by a whole-block prefix hit of at most ``num_tokens - 1`` tokens;
- a running request holds exactly ``cdiv(num_computed_tokens, block_size)`` blocks, distinct,
  and no negative placeholder count (``num_known_tokens >= num_tokens``);
  with prefix caching it has published every full block of tokens both known and computed
  (the scheduler's publication invariant; also checked after every update);
  a waiting or preempted request holds none and has nothing computed;
- KV: every block's ``ref_cnt`` equals its number of holders (requests + entries), a block
  is in the free queue iff unreferenced, free + held distinct blocks == usable;
- a block held by two requests is a published (hashed) block at the same index in both;
- content: a hashed block at index b of a request's list has the request's own chained
  hash for block b (prefix hits are never wrong);
After every ``update_from_output``: finished requests have exactly ``max_tokens`` outputs
and left the queues. At the end: every request finished once, every output token was
sampled exactly once (no wasted decode), and scheduled tokens + prefix hits == final
computed tokens + recomputed (lost to preemption) tokens per request.
"""
from __future__ import annotations

from llmservingsim.kv_cache_manager import cdiv
from llmservingsim.request import Request, RequestStatus
from llmservingsim.scheduler import Scheduler, SchedulerOutput

# BlockPool keeps every copy of a hash (primary + copies), so the random runs require
# kv.check_invariants() exactly; False would tolerate orphaned duplicate hashes.
STRICT_HASH_MAP = True


class EngineChecker:
    def __init__(self, sched: Scheduler):
        self.sched = sched
        self.kv = sched.kv
        self.requests: dict[int, Request] = {}
        self.computed: dict[int, int] = {}      # mirror of num_computed_tokens
        self.scheduled: dict[int, int] = {}     # tokens scheduled, summed over steps
        self.hits: dict[int, int] = {}          # prefix-hit tokens over admissions
        self.lost: dict[int, int] = {}          # computed tokens dropped by preemption
        self.samples: dict[int, int] = {}
        self.finished: dict[int, int] = {}      # request id -> times reported finished
        self.steps = 0
        self.preemptions = 0

    def register(self, req: Request) -> None:
        """Expect ``req`` (the driver adds it to the scheduler when it arrives)."""
        assert req.request_id not in self.requests
        self.requests[req.request_id] = req
        for d in (self.computed, self.scheduled, self.hits, self.lost, self.samples):
            d[req.request_id] = 0

    # ---- per step ---------------------------------------------------------------------
    def on_schedule(self, out: SchedulerOutput) -> None:
        cfg = self.sched.config
        self.steps += 1
        ids = [sr.req.request_id for sr in out.scheduled]
        assert len(ids) == len(set(ids)), ids
        assert out.num_tokens == sum(sr.num_new for sr in out.scheduled) <= cfg.max_num_batched_tokens
        assert len(self.sched.running) <= cfg.max_num_seqs
        pre = {r.request_id for r in out.preempted}
        assert not pre & set(ids), (pre, ids)
        bs = self.kv.block_size
        for sr in out.scheduled:
            rid, req = sr.req.request_id, sr.req
            assert sr.num_new > 0 and req.status == RequestStatus.RUNNING
            mirror = self.computed[rid]
            if sr.ctx_before != mirror:                  # admission with a prefix hit
                hit = sr.ctx_before - mirror
                assert mirror == 0 and hit > 0 and hit % bs == 0, (rid, mirror, sr.ctx_before)
                assert sr.ctx_before <= req.num_tokens - 1
                self.hits[rid] += hit
            self.computed[rid] = sr.ctx_before + sr.num_new
            self.scheduled[rid] += sr.num_new
            self.samples[rid] += sr.samples
            assert self.computed[rid] == req.num_computed_tokens
            assert req.num_computed_tokens <= req.num_tokens + req.num_placeholders
        # the batch's tallies (SchedulerOutput; timing and metrics read them) are its entries'
        decodes = [sr.ctx_before + 1 for sr in out.scheduled if sr.num_new == 1 and sr.ctx_before > 0]
        chunks = [sr for sr in out.scheduled if not (sr.num_new == 1 and sr.ctx_before > 0)]
        assert (out.num_decodes, out.decode_kv_sum, out.decode_kv_max, out.decode_kv_min) == (
            len(decodes), sum(decodes), max(decodes, default=0), min(decodes, default=0))
        assert out.prefill_tokens == sum(sr.num_new for sr in chunks)
        assert out.prefill_ctx_sum == sum(sr.num_new * sr.ctx_before for sr in chunks)
        assert out.num_sampled == sum(sr.samples for sr in out.scheduled)
        for r in out.preempted:
            self.preemptions += 1
            assert r.status == RequestStatus.PREEMPTED and r.num_computed_tokens == 0
            assert self.kv.get_blocks(r.request_id) == []
            self.lost[r.request_id] += self.computed[r.request_id]
            self.computed[r.request_id] = 0
        self.check_state()

    def on_update(self, out: SchedulerOutput, done: list[Request]) -> None:
        for req in done:
            rid = req.request_id
            self.finished[rid] = self.finished.get(rid, 0) + 1
            assert req.status == RequestStatus.FINISHED
            assert req.num_output_tokens == req.max_tokens, req
            assert req not in self.sched.running and req not in list(self.sched.waiting)
        for req in self.sched.running:
            assert req.num_output_tokens < req.max_tokens
        self.check_published()

    # ---- state ------------------------------------------------------------------------
    def check_state(self) -> None:
        kv, sched = self.kv, self.sched
        bs = kv.block_size
        running = sched.running
        assert len({r.request_id for r in running}) == len(running)
        for req in running:
            blocks = kv.get_blocks(req.request_id)
            assert len(blocks) == cdiv(req.num_computed_tokens, bs), (req, len(blocks))
            assert len({b.block_id for b in blocks}) == len(blocks)
            assert req.num_placeholders >= 0, req
        self.check_published()
        for req in sched.waiting:
            assert req.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED)
            assert req.num_computed_tokens == 0 and kv.get_blocks(req.request_id) == []
        check_kv(kv, self.requests)

    def check_published(self) -> None:
        """The scheduler's publication invariant (llmservingsim/scheduler.py, "Publication"):
        a running request's full blocks of known, computed tokens are all published."""
        kv = self.kv
        if not kv.enable_caching:
            return
        for req in self.sched.running:
            floor = min(req.num_computed_tokens, req.num_tokens) // kv.block_size
            assert kv.num_cached_blocks.get(req.request_id, 0) >= floor, (req, floor)

    def check_end(self) -> None:
        assert set(self.finished) == set(self.requests), set(self.requests) - set(self.finished)
        assert all(n == 1 for n in self.finished.values())
        for rid, req in self.requests.items():
            assert self.samples[rid] == req.max_tokens, (req, self.samples[rid])
            final = self.computed[rid]
            assert final in (0, req.prompt_len + req.max_tokens - 1), (req, final)
            assert self.scheduled[rid] + self.hits[rid] == final + self.lost[rid]
            assert final + self.lost[rid] >= req.prompt_len + req.max_tokens - 1


def check_kv(kv, requests: dict[int, Request]) -> None:
    """kv.check_invariants() plus sharing and content checks (see module docstring)."""
    pool = kv.pool
    queue = pool.free_queue.block_ids()
    in_queue = set(queue)
    assert len(in_queue) == len(queue) == pool.num_free
    holders: dict[int, int] = {}
    position: dict[int, int] = {}
    for rid, blocks in kv.req_blocks.items():
        req = requests.get(rid)
        for idx, b in enumerate(blocks):
            holders[b.block_id] = holders.get(b.block_id, 0) + 1
            if holders[b.block_id] > 1:
                assert b.block_hash is not None and position[b.block_id] == idx, (b, rid)
            position[b.block_id] = idx
            if b.block_hash is not None and req is not None:
                assert b.block_hash == req.stream.block_hashes(idx + 1)[idx], (rid, idx, b)
    for e in kv.entries.values():
        for b in e.blocks:
            holders[b.block_id] = holders.get(b.block_id, 0) + 1
    for b in pool.blocks[1:]:
        assert b.ref_cnt == holders.get(b.block_id, 0), (b, holders.get(b.block_id, 0))
        assert (b.ref_cnt == 0) == (b.block_id in in_queue), b
    assert pool.num_free + len(holders) == pool.num_usable
    assert pool.blocks[0].ref_cnt == 1 and 0 not in holders
    for h, b in pool.cached.items():
        assert b.block_hash == h
    if STRICT_HASH_MAP:
        kv.check_invariants()


def count_orphans(kv) -> int:
    """Blocks whose hash is set but not served by the map (orphaned duplicates)."""
    cached = kv.pool.cached
    return sum(1 for b in kv.pool.blocks[1:] if b.block_hash is not None and b.block_hash not in cached)
