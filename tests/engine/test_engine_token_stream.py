"""``TokenStream.block_hashes`` (its blocks hashed in three runs: explicit ids, hash ids,
the stream's own) equals the chain of the per-block identities written out one block at a
time, however the chain is extended (one call, or many growing calls) and with a parent; a
pure stream's ints stand for that chain exactly (the same equalities, none with a hash)."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

import pytest

from llmservingsim.tokens import (BLOCK_TAG_HASHED, BLOCK_TAG_STREAM, STREAM_BASE, STREAM_SHIFT,
                                  UID_BITS, TokenStream)


def _key(s: TokenStream, b: int):
    """Block b's identity, condition by condition (the module docstring's rules)."""
    bs = s.block_size
    if s._ids is not None and (b + 1) * bs <= len(s._ids):
        return tuple(s._ids[b * bs:(b + 1) * bs])
    if s._hash_ids is not None and (b + 1) * bs <= s._prompt_len:
        h = (b * bs) // s._hash_block_tokens
        if h < len(s._hash_ids):
            return (BLOCK_TAG_HASHED, s._hash_ids[h], (b * bs) % s._hash_block_tokens)
    return (BLOCK_TAG_STREAM, s.uid, b)


def _chain(s: TokenStream, n: int, parent_hashes: list) -> list:
    """The chained hashes of the per-block identities (every stream's rule before pure
    streams had ints)."""
    out = list(parent_hashes[:min(s._shared_blocks, n)]) if s._parent is not None else []
    prev = out[-1] if out else 0
    for b in range(len(out), n):
        prev = hash((prev, _key(s, b))) >> 1
        out.append(prev)
    return out


def _pure(s: TokenStream) -> bool:
    """Every block is a (uid, b) block: no parent blocks, and block 0's key is the stream's."""
    return not s._shared_blocks and _key(s, 0) == (BLOCK_TAG_STREAM, s.uid, 0)


def _reference(s: TokenStream, n: int, parent_hashes: list) -> list:
    if _pure(s):
        return [STREAM_BASE + (s.uid << STREAM_SHIFT) + b for b in range(n)]
    return _chain(s, n, parent_hashes)


@st.composite
def _streams(draw):
    bs = draw(st.sampled_from([1, 4, 16]))
    ids = draw(st.none() | st.lists(st.integers(0, 5), max_size=80))
    hash_ids = draw(st.none() | st.lists(st.integers(0, 9), min_size=1, max_size=6))
    hbt = draw(st.sampled_from([3, 4, 16, 24, 512]))
    prompt_len = draw(st.integers(0, 200))
    parent = None
    shared = 0
    if draw(st.booleans()):
        parent = TokenStream(7, bs, ids=draw(st.none() | st.lists(st.integers(0, 5), max_size=60)))
        shared = draw(st.integers(0, 100))
    uid = draw(st.sampled_from([3, 0, (1 << UID_BITS) - 1]))     # the pure ints' edge uids too
    s = TokenStream(uid, bs, parent=parent, shared_tokens=shared, ids=ids, hash_ids=hash_ids,
                    hash_block_tokens=hbt, prompt_len=prompt_len)
    return s, draw(st.lists(st.integers(0, 120), min_size=1, max_size=5))


@settings(max_examples=400, deadline=None)
@given(_streams())
def test_block_hashes_equal_the_per_block_chain(case):
    s, sizes = case
    for n in sizes:
        got = s.block_hashes(n)
        parent = s._parent.block_hashes(s._shared_blocks) if s._parent is not None else []
        assert len(got) >= n
        assert got == _reference(s, len(got), parent)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 40)), min_size=2, max_size=12),
       st.sampled_from([1, 16]), st.booleans())
def test_pure_stream_ints_have_the_chained_hashes_equalities(blocks, bs, with_ids):
    """Blocks (uid, b) of pure streams (some with ids shorter than a block): two ints are
    equal iff the chained hashes they stand for are, and none equals a hashed identity."""
    def stream(uid):
        return TokenStream(uid, bs, ids=[5] * (bs - 1) if with_ids else None)
    ints = [stream(u).block_hashes(b + 1)[b] for u, b in blocks]
    chained = [_chain(stream(u), b + 1, [])[b] for u, b in blocks]
    for i in range(len(blocks)):
        assert 1 << 63 > ints[i] >= STREAM_BASE > max(chained) and min(chained) >= -(1 << 62)
        for j in range(len(blocks)):
            assert (ints[i] == ints[j]) == (chained[i] == chained[j]) == (blocks[i] == blocks[j])
    forked = TokenStream(3, bs, parent=stream(3), shared_tokens=bs)     # not pure: chained
    assert forked._base is None and forked.block_hashes(3)[2] < STREAM_BASE


def test_pure_stream_bounds():
    """A uid past UID_BITS falls back to chained hashes; a chain past 2**STREAM_SHIFT blocks
    raises; the largest pure identity (the last uid's last place) is below 2**63, a C long."""
    assert TokenStream(1 << UID_BITS, 16)._base is None
    last = TokenStream((1 << UID_BITS) - 1, 16)
    assert last._base + (1 << STREAM_SHIFT) - 1 == (1 << 63) - 1
    assert TokenStream(-1, 16)._base is None
    s = TokenStream(5, 16)
    with pytest.raises(ValueError):
        s.block_hashes((1 << STREAM_SHIFT) + 1)


def test_explicit_ids_are_hashed_when_the_stream_is_made():
    """A stream's chain over its explicit ids exists from construction (hashed while the ids
    are fresh in memory, not at admission), equal to the per-block chain; fewer ids than a
    block hash nothing and leave the stream pure."""
    s = TokenStream(3, 4, ids=list(range(10)))          # two full blocks, two ids left over
    assert s._hashes == _chain(s, 2, []) and len(s._hashes) == 2
    assert s.block_hashes(3) == _chain(s, 3, [])        # extended past the ids as before
    short = TokenStream(3, 4, ids=[1, 2, 3])
    assert short._hashes == [] and short._base is not None
