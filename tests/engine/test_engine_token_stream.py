"""``TokenStream.block_hashes`` (its blocks hashed in three runs: explicit ids, hash ids,
the stream's own) equals the chain of the per-block identities written out one block at a
time, however the chain is extended (one call, or many growing calls) and with a parent."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from llmservingsim.tokens import BLOCK_TAG_HASHED, BLOCK_TAG_STREAM, TokenStream


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


def _reference(s: TokenStream, n: int, parent_hashes: list) -> list:
    out = list(parent_hashes[:min(s._shared_blocks, n)]) if s._parent is not None else []
    prev = out[-1] if out else 0
    for b in range(len(out), n):
        prev = hash((prev, _key(s, b)))
        out.append(prev)
    return out


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
    s = TokenStream(3, bs, parent=parent, shared_tokens=shared, ids=ids, hash_ids=hash_ids,
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
