"""Factories and checks for driving the vLLM-V1 engine directly (no config, no event loop).

Mirrors vLLM's ``tests/v1/core/utils.py``: ``create_scheduler`` / ``create_requests`` with
explicit token ids (request ``i`` has prompt ``[i] * n`` unless ``same_prompt``), a
``run_steps`` driver that plays the role of the model runner (sync: schedule, update;
async: two steps in flight, as vLLM's ``AsyncScheduler`` tests do), and
``assert_engine_empty``, the leak check (no requests, every usable block free, every
``ref_cnt`` 0, no retained entries).

Finished requests keep their blocks until the caller releases them (the Instance applies a
retention decision); ``run_steps`` releases them with ``kv.free`` unless told otherwise.
"""
from __future__ import annotations

from collections import deque
from typing import Callable, Iterable, Optional, Sequence

from llmservingsim.kv_cache_manager import KVCacheManager
from llmservingsim.request import CallSpec, Request
from llmservingsim.scheduler import Scheduler, SchedulerConfig, SchedulerOutput
from llmservingsim.tokens import TokenStream

BLOCK = 16
STEP_NS = 1_000            # simulated duration of one step in the drivers below
UID_BASE = 1_000_000       # stream uids of requests, kept apart from anything else


# ---- factories ----------------------------------------------------------------------------
def create_kv(num_blocks: int = 10_000, block_size: int = BLOCK, enable_caching: bool = True,
              clock: Callable[[], int] = lambda: 0, hooks=None) -> KVCacheManager:
    return KVCacheManager(num_blocks=num_blocks, block_size=block_size,
                          enable_caching=enable_caching, clock=clock, hooks=hooks)


def create_scheduler(max_num_seqs: int = 16, max_num_batched_tokens: int = 8192,
                     num_blocks: int = 10_000, block_size: int = BLOCK,
                     enable_caching: bool = True, policy: str = "fcfs",
                     long_prefill_token_threshold: int = 0, enable_chunked_prefill: bool = True,
                     max_model_len: int = 131072, clock: Callable[[], int] = lambda: 0,
                     hooks=None) -> Scheduler:
    """vLLM's ``create_scheduler`` defaults: 16 seqs, 8192 tokens, 10000 blocks of 16."""
    kv = create_kv(num_blocks, block_size, enable_caching, clock, hooks)
    cfg = SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                          long_prefill_token_threshold=long_prefill_token_threshold,
                          enable_chunked_prefill=enable_chunked_prefill, policy=policy,
                          max_model_len=max_model_len)
    return Scheduler(cfg, kv)


def make_request(request_id: int, ids: Optional[Sequence[int]] = None, *, num_tokens: Optional[int] = None,
                 max_tokens: int = 16, priority: int = 0, arrival_ns: int = 0,
                 owner: Optional[int] = None, block_size: int = BLOCK,
                 stream: Optional[TokenStream] = None) -> Request:
    """One request. ``ids`` are explicit token ids (content hashing); they may run past the
    prompt (``num_tokens``) to give the future output tokens an identity too. Without ids
    the request's blocks are unique to it (a fresh stream uid)."""
    if num_tokens is None:
        if ids is None:
            raise ValueError("give ids or num_tokens")
        num_tokens = len(ids)
    if stream is None:
        stream = TokenStream(uid=UID_BASE + request_id, block_size=block_size,
                             ids=list(ids) if ids is not None else None)
    spec = CallSpec(owner=request_id if owner is None else owner, call_index=0,
                    prompt_tokens=num_tokens, output_tokens=max_tokens, tool_duration_ns=0,
                    tool_name=None, tokens=stream)
    return Request(request_id=request_id, spec=spec, arrival_ns=arrival_ns, priority=priority)


def create_requests(num_requests: int, num_tokens: int = 10, max_tokens: int = 16,
                    same_prompt: bool = False, starting_idx: int = 0,
                    priorities: Optional[Sequence[int]] = None,
                    arrival_ns: Optional[Sequence[int]] = None,
                    block_size: int = BLOCK) -> list[Request]:
    """vLLM's ``create_requests``: request i has prompt ``[i] * num_tokens`` (``[0] * n`` when
    ``same_prompt``); ids start at ``starting_idx``."""
    out = []
    for k in range(num_requests):
        rid = starting_idx + k
        ids = [0 if same_prompt else rid] * num_tokens
        out.append(make_request(rid, ids, max_tokens=max_tokens,
                                priority=0 if priorities is None else priorities[k],
                                arrival_ns=rid if arrival_ns is None else arrival_ns[k],
                                block_size=block_size))
    return out


# ---- reading a step -----------------------------------------------------------------------
def num_scheduled(out: SchedulerOutput) -> dict[int, int]:
    """request id -> tokens scheduled this step (vLLM's ``num_scheduled_tokens``)."""
    return {sr.req.request_id: sr.num_new for sr in out.scheduled}


def scheduled_ids(out: SchedulerOutput) -> list[int]:
    return [sr.req.request_id for sr in out.scheduled]


def block_ids(kv: KVCacheManager, req: Request) -> list[int]:
    return [b.block_id for b in kv.get_blocks(req.request_id)]


def free_order(kv: KVCacheManager) -> list[int]:
    return kv.pool.free_queue.block_ids()


# ---- drivers ------------------------------------------------------------------------------
def release_all(kv: KVCacheManager, reqs: Iterable[Request], now_ns: int = 0) -> None:
    for r in reqs:
        kv.finish(r, None, now_ns)


def step(sched: Scheduler, now_ns: int, release: bool = True) -> tuple[SchedulerOutput, list[Request]]:
    """One synchronous step: schedule, apply, release the finished requests' blocks."""
    out = sched.schedule()
    done = sched.update_from_output(out, now_ns)
    if release:
        release_all(sched.kv, done, now_ns)
    return out, done


def run_steps(sched: Scheduler, *, async_mode: bool = False, max_steps: int = 100_000,
              release: bool = True, on_schedule: Optional[Callable[[SchedulerOutput], None]] = None,
              on_update: Optional[Callable[[SchedulerOutput, list], None]] = None,
              arrivals: Optional[dict[int, list[Request]]] = None,
              inflight: Sequence[SchedulerOutput] = (),
              finish: Optional[Callable[[Request, int], None]] = None,
              on_stall: Optional[Callable[[], bool]] = None, recycle: bool = False) -> list[Request]:
    """Drive the scheduler until it has no work; return requests in completion order.

    Sync: schedule, update, repeat. Async (vLLM's AsyncScheduler tests and the Instance):
    two steps are scheduled before the first is applied; afterwards each update of the
    oldest step is followed by one schedule. ``arrivals[k]`` are added just before the
    k-th schedule call (0-based). Empty steps are not kept in flight. ``inflight`` continues
    a run whose steps the test already scheduled (oldest first). ``finish(req, now)``
    replaces the default release of a finished request's blocks. When nothing can be
    scheduled but work remains, ``on_stall()`` may unblock the engine (return True) or the
    run fails as stuck. ``recycle``: hand each applied step's entries back to the scheduler
    (``Scheduler.recycle``, as the Instance does), so later passes reuse them.
    """
    arrivals = arrivals or {}
    finished: list[Request] = []
    inflight = deque(out for out in inflight if out)
    calls = 0
    now = 0

    def schedule_once() -> SchedulerOutput:
        nonlocal calls
        for r in arrivals.get(calls, ()):
            sched.add_request(r)
        calls += 1
        out = sched.schedule()
        if on_schedule is not None:
            on_schedule(out)
        if out:
            inflight.append(out)
        return out

    depth = 2 if async_mode else 1
    while calls < max_steps:
        while len(inflight) < depth and calls < max_steps:
            out = schedule_once()
            if not out and not out.preempted:
                break               # nothing schedulable now: apply what is in flight
            # A step that only preempted (the victim was the request itself) is an empty
            # batch; vLLM's busy loop simply schedules again.
        if not inflight:
            if any(k >= calls for k in arrivals):
                continue            # idle until the next arrival is added
            if sched.has_work() and on_stall is not None and on_stall():
                continue
            if sched.has_work():
                raise AssertionError(f"engine stuck after {calls} schedule calls: "
                                     f"{len(sched.running)} running, {len(sched.waiting)} waiting")
            break
        out = inflight.popleft()
        now += STEP_NS
        done = sched.update_from_output(out, now)
        if on_update is not None:
            on_update(out, done)
        finished.extend(done)
        if finish is not None:
            for r in done:
                finish(r, now)
        elif release:
            release_all(sched.kv, done, now)
        if recycle:
            sched.recycle(out)
    return finished


# ---- checks -------------------------------------------------------------------------------
def assert_engine_empty(sched: Scheduler, strict_hash_map: bool = True) -> None:
    """vLLM's ``assert_scheduler_empty``: no requests, all usable blocks free, no refs.
    ``strict_hash_map=False`` skips ``kv.check_invariants()``'s hash-map check, which
    orphaned duplicate blocks fail (a known BlockPool bug, see test_engine_block_pool.py)."""
    kv = sched.kv
    assert not sched.running, sched.running
    assert len(sched.waiting) == 0, list(sched.waiting)
    assert not kv.req_blocks, kv.req_blocks
    assert not kv.entries, kv.entries
    assert kv.num_free_blocks == kv.pool.num_usable
    assert all(b.ref_cnt == 0 for b in kv.pool.blocks[1:])
    assert kv.pool.blocks[0].ref_cnt == 1          # the null block is never freed
    if strict_hash_map:
        kv.check_invariants()
