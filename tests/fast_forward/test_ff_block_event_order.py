"""``fast_forward._block_events`` sorts its events by bulk step alone (a stable sort with an
int key): the events of one step come from distinct batch entries, made in batch order, so
the result is the tuples' lexicographic order. Checked against the events sorted as tuples,
on random batches (held blocks ahead of the context or not, tokens anywhere in a block,
finishes inside the run), block sizes 1-16 and runs past several block boundaries."""
from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, settings, strategies as st

from llmservingsim import fast_forward as ff


def _reference(bs, blocks, scheduled, max_step, lefts):
    allocs, pubs = [], []
    for i, sr in enumerate(scheduled):
        req = sr.req
        n0 = req.num_tokens
        last = max_step
        if lefts is not None and lefts[i] <= max_step:
            last = lefts[i] - 1
            if (n0 + lefts[i]) % bs == 0:
                pubs.append((lefts[i], i, n0 + lefts[i] - 1))
        j = max(len(blocks[req.request_id]) * bs - sr.ctx_before, 1)
        while j <= last:
            allocs.append((j, i))
            j += bs
        j = bs - n0 % bs
        while j <= last:
            pubs.append((j, i, n0 + j))
            j += bs
    return sorted(allocs), sorted(pubs)


@settings(max_examples=300, deadline=None)
@given(bs=st.integers(1, 16), max_step=st.integers(1, 60), through=st.booleans(), data=st.data())
def test_block_events_are_in_tuple_order(bs, max_step, through, data):
    n = data.draw(st.integers(1, 30))
    scheduled, blocks, lefts = [], {}, []
    for i in range(n):
        ctx = data.draw(st.integers(1, 200))           # ctx_before; num_tokens = ctx + 1
        held = -(-(ctx + 1) // bs) + data.draw(st.integers(0, 2))
        blocks[i] = [None] * held
        req = SimpleNamespace(request_id=i, num_tokens=ctx + 1)
        scheduled.append(SimpleNamespace(req=req, ctx_before=ctx))
        lefts.append(data.draw(st.integers(1, 80)))
    inst = SimpleNamespace(kv=SimpleNamespace(block_size=bs, req_blocks=blocks))
    lefts = lefts if through else None
    got = ff._block_events(inst, scheduled, max_step, lefts)
    assert got == _reference(bs, blocks, scheduled, max_step, lefts)
