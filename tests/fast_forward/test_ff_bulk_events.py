"""Fast-forward applies a run's block allocations with one free-queue take per segment (the
steps up to a finish) and its publications inline (``fast_forward._events_through``); the
KV state after every application equals the per-event path's, which made each allocation
with ``KVCacheManager.append_new_block`` and each publication with
``KVCacheManager.cache_blocks`` in step order (kept here as the reference), and outputs
equal step mode's. Workloads: explicit token ids from a few templates (requests sharing
prefixes, identical requests decoding together: their decode blocks publish the same
hashes, so copies, and prefix hits), program workloads (a program's calls share a stream
and its memo), finishes inside runs, pools small enough that taken blocks drop content."""
from __future__ import annotations

import json
import random

from hypothesis import HealthCheck, given, settings, strategies as st

from llmservingsim import fast_forward as ff
from llmservingsim.errors import StuckError
from program_layer.run import build_simulation, run_config

from test_ff_equivalence import _workload
from test_ff_through_finishes import _trace_workload

OUTPUTS = ("calls.csv", "programs.csv", "timeseries.csv", "summary.json")


def _reference_events_through(kv, scheduled, allocs, pubs, fins, events, upto, fin_upto, finish):
    """The per-event path (before the bulk one): each step's allocations one block at a
    time, then its publications one call each, then its finishes."""
    a, p, f = events
    na, np_, nf = len(allocs), len(pubs), len(fins)
    while True:
        j = allocs[a][0] if a < na else upto + 1
        if p < np_ and pubs[p][0] < j:
            j = pubs[p][0]
        if f < nf and fins[f][0] < j and fins[f][0] <= fin_upto:
            j = fins[f][0]
        if j > upto:
            break
        while a < na and allocs[a][0] == j:
            kv.append_new_block(scheduled[allocs[a][1]].req)
            a += 1
        while p < np_ and pubs[p][0] == j:
            _, i, tokens = pubs[p]
            kv.cache_blocks(scheduled[i].req, tokens)
            p += 1
        if f < nf and fins[f][0] == j:
            if j > fin_upto:
                break
            group = []
            while f < nf and fins[f][0] == j:
                group.append(scheduled[fins[f][1]].req)
                f += 1
            finish(j, group)
    events[0], events[1], events[2] = a, p, f


def _snapshot(kv, scheduled, last_epoch: list) -> tuple:
    """Everything of the KV state the events touch: the free queue (order and bookkeeping),
    every created block's count, content, memo back-pointer, the prefix map and copies,
    every memo of the batch's streams or of a block (listed blocks, stale places included,
    valid prefix and cuts; memos named in the order they are met), the requests' blocks and published counts, and whether
    ``drop_epoch`` changed since the last snapshot (how much is not read anywhere)."""
    pool = kv.pool
    q = pool.free_queue
    names: dict = {}

    def name(memo):
        if memo is None:
            return None
        return names.setdefault(id(memo), len(names))
    blocks = pool._blocks
    per_block = [(b.ref_cnt, b.entry_refs, b.block_hash, name(b.memo), b.memo_pos) for b in blocks]
    memos = {}
    for m in [sr.req.stream.memos.get(pool) for sr in scheduled if sr.req.stream.memos] + [b.memo for b in blocks]:
        if m is not None and name(m) not in memos:
            memos[name(m)] = ([x.block_id for x in m.blocks], m.valid, m.cuts)
    epoch = pool.drop_epoch
    changed = epoch != last_epoch[0]
    last_epoch[0] = epoch
    return (q.block_ids(), q.num_free, q._places, per_block, memos,
            sorted((h, b.block_id) for h, b in pool.cached.items()),
            sorted((h, [b.block_id for b in bs]) for h, bs in pool.copies.items()),
            sorted((rid, [b.block_id for b in bs]) for rid, bs in kv.req_blocks.items()),
            sorted(kv.num_cached_blocks.items()), changed, pool.entry_only, pool.num_multi)


def _states(monkeypatch, cfg, impl) -> list:
    """Run ``cfg`` with ``impl`` as fast-forward's event application: the KV state after
    every application."""
    states = []
    epochs: dict = {}

    def recorded(kv, scheduled, *args):
        impl(kv, scheduled, *args)
        states.append(_snapshot(kv, scheduled, epochs.setdefault(id(kv), [kv.pool.drop_epoch])))
    with monkeypatch.context() as m:
        m.setattr(ff, "_events_through", recorded)
        try:
            build_simulation(cfg).run()
        except StuckError:          # (at build: a call larger than the pool)
            states.append("stuck")
    return states


def _id_workload(tmp_path, seed: int, n: int, spread: int) -> str:
    """Requests with explicit ids: prompts and outputs cut from a few templates (shared
    prefixes, identical requests), arriving within ``spread`` ns of each other in bursts."""
    rng = random.Random(seed)
    templates = [[rng.randint(0, 3) for _ in range(700)] for _ in range(3)]
    lines = []
    t = 0
    for r in range(n):
        t += rng.choice([0, 0, rng.randint(0, spread)])
        ids = rng.choice(templates)
        n_in = rng.choice([16, 17, 33, 40, rng.randint(1, 200)])
        n_out = rng.choice([60, 64, rng.randint(1, 300)])
        rec = {"arrival_time_ns": t, "input_toks": n_in, "output_toks": n_out,
               "input_tok_ids": ids[:n_in]}
        if rng.random() < 0.8:      # else its decode blocks are stream-tagged
            rec["output_tok_ids"] = ids[n_in:n_in + n_out]
        lines.append(json.dumps(rec))
    path = tmp_path / f"ids{seed}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _cfg(path, pool_blocks, max_num_seqs, retention="cache-lru") -> dict:
    return {"model": "meta-llama/Llama-3.1-8B", "hardware": "RTXPRO6000",
            "engine": {"kv_pool_tokens": pool_blocks * 16, "max_num_seqs": max_num_seqs,
                       "max_model_len": pool_blocks * 16},
            "workload": {"path": path}, "policies": {"retention": retention}}


def _check(tmp_path, monkeypatch, cfg) -> list:
    bulk = _states(monkeypatch, cfg, ff._events_through)
    assert bulk == _states(monkeypatch, cfg, _reference_events_through)
    a, b = tmp_path / "ff", tmp_path / "step"
    errors = []
    for out, step_mode in ((a, False), (b, True)):
        try:
            run_config(cfg, out, step_mode=step_mode)
        except StuckError as exc:
            errors.append(exc.message.replace(str(out), "OUT"))
    if not errors:
        for name in OUTPUTS:
            assert (a / name).read_bytes() == (b / name).read_bytes(), name
    else:
        assert len(errors) == 2
    return bulk


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), n=st.integers(2, 24), pool_blocks=st.integers(40, 200),
       max_num_seqs=st.integers(2, 16), spread=st.sampled_from([0, 20_000_000, 500_000_000]))
def test_bulk_events_leave_the_per_event_state_with_explicit_ids(tmp_path, monkeypatch, seed, n,
                                                                 pool_blocks, max_num_seqs, spread):
    _check(tmp_path, monkeypatch, _cfg(_id_workload(tmp_path, seed, n, spread), pool_blocks, max_num_seqs))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), n_programs=st.integers(1, 12), pool_blocks=st.integers(60, 300),
       max_num_seqs=st.integers(2, 16), trace=st.booleans(),
       retention=st.sampled_from(["cache-lru", "evict-always", {"name": "ttl", "tau_s": 2.0}]))
def test_bulk_events_leave_the_per_event_state_with_programs(tmp_path, monkeypatch, seed, n_programs,
                                                             pool_blocks, max_num_seqs, trace, retention):
    path = (_trace_workload(tmp_path, seed, n_programs, 0.3) if trace
            else _workload(tmp_path, seed, n_programs))
    _check(tmp_path, monkeypatch, _cfg(path, pool_blocks, max_num_seqs, retention))


def test_the_explicit_id_cells_meet_copies_drops_and_finishes(tmp_path, monkeypatch):
    """The properties above are meaningful: on these cells fast-forward's events take blocks
    with content (dropped at their place), publish blocks whose hash is cached already
    (copies) and apply finishes inside runs."""
    seen = {"drops": 0, "copies": 0, "finishes": 0}

    def counting(kv, scheduled, allocs, pubs, fins, events, upto, fin_upto, finish):
        before_cuts = kv.pool.drop_epoch
        before_copies = sum(map(len, kv.pool.copies.values()))
        f0 = events[2]
        ff_events(kv, scheduled, allocs, pubs, fins, events, upto, fin_upto, finish)
        seen["drops"] += kv.pool.drop_epoch != before_cuts
        seen["copies"] += sum(map(len, kv.pool.copies.values())) > before_copies
        seen["finishes"] += events[2] - f0
    ff_events = ff._events_through
    for seed in range(6):
        cfg = _cfg(_id_workload(tmp_path, seed, 20, 20_000_000), 60, 8)
        _check(tmp_path, monkeypatch, cfg)
        with monkeypatch.context() as m:
            m.setattr(ff, "_events_through", counting)
            try:
                build_simulation(cfg).run()
            except StuckError:
                pass
    assert seen["drops"] > 0 and seen["copies"] > 0 and seen["finishes"] > 0, seen


class _Req:
    __slots__ = ("request_id", "stream", "num_tokens", "num_computed_tokens", "owner")

    def __init__(self, rid: int, stream, num_tokens: int):
        self.request_id, self.stream, self.num_tokens = rid, stream, num_tokens
        self.num_computed_tokens, self.owner = 0, rid


class _Entry:
    __slots__ = ("req", "ctx_before")

    def __init__(self, req, ctx_before: int):
        self.req, self.ctx_before = req, ctx_before


class _Inst:
    def __init__(self, kv):
        self.kv = kv


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 2), min_size=12, max_size=12), st.lists(
    st.tuples(st.sampled_from(["admit", "admit", "free", "drop"]), st.integers(0, 5), st.integers(1, 30)),
    min_size=1, max_size=30), st.integers(8, 40), st.lists(st.integers(0, 40), max_size=4), st.data())
def test_a_segment_applies_its_events_in_step_order(alphabet, script, n_blocks, cuts, data):
    """On KV state built by random admissions (prefix hits; streams shared by requests, and
    streams with equal ids: equal hashes, so copies), frees and content drops, a decode run's
    events (``fast_forward._block_events``, finishes inside it, applied in the chunks
    ``_apply`` makes) leave the state the per-event path leaves, stale memo places included."""
    import copy
    from llmservingsim.kv_cache_manager import KVCacheManager
    from llmservingsim.tokens import TokenStream
    bs = 4
    kv = KVCacheManager(n_blocks, block_size=bs)
    ids = [alphabet[k % 12] for k in range(400)]
    streams = [TokenStream(k, bs, ids=ids if k % 3 else ids[:7] + ids[:393]) for k in range(6)]
    live, rid = [], 0
    for op, pick, size in script:
        if op == "admit":
            rid += 1
            req = _Req(rid, streams[pick], size + 1)
            hits, hit_tokens = kv.get_computed_blocks(req)
            if kv.allocate_slots(req, size + 1 - hit_tokens, hits, hit_tokens):
                live.append(req)
        elif live:
            kv.free(live.pop(pick % len(live)), drop_content=op == "drop")
    if not live:
        return
    batch = live[:data.draw(st.integers(1, len(live)))]
    scheduled = [_Entry(req, req.num_tokens - 1) for req in batch]
    lefts = [data.draw(st.integers(1, 60)) for _ in batch]
    steps = 60
    while True:
        allocs, pubs = ff._block_events(_Inst(kv), scheduled, steps, lefts)
        free = kv.pool.num_free
        if len(allocs) <= free:
            break
        steps = allocs[free][0] - 1
    if steps < 1:
        return
    fins = sorted((lefts[i], i) for i in range(len(batch)) if lefts[i] < steps)
    chunks = sorted({c for c in cuts if 1 <= c < steps}) + [steps]
    states = []
    for impl in (ff._events_through, _reference_events_through):
        w_kv, w_sched = copy.deepcopy((kv, scheduled))

        def finish(j, group):
            for req in group:
                w_kv.free(req)
        events = [0, 0, 0]
        epoch = [w_kv.pool.drop_epoch]
        got = []
        for hi in chunks:
            impl(w_kv, w_sched, allocs, pubs, fins, events, hi, hi - 1 if hi < steps else hi, finish)
            got.append(_snapshot(w_kv, w_sched, epoch))
        states.append(got)
        w_kv.check_invariants()
    assert states[0] == states[1]
