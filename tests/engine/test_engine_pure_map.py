"""A pure stream's identities in its memo's map (``PrefixMemo.slots``) against the per-block
reference pool and the block-by-block paths.

The reference tests of ``test_engine_block_pool_reference`` run here with real token streams:
pure ones (uids drawn from a few, so two stream objects can share identities, and so a memo),
and forks of them (not pure; their chains start with a pure stream's identities: ``mixed``
memos), so every publication, lookup and drop of a pure identity goes through the map, and
a fork's through the map and the hashed identities' dict."""
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from llmservingsim import block_pool
from llmservingsim.block_pool import BlockPool
from llmservingsim.tokens import STREAM_BASE, STREAM_SHIFT, TokenStream

import test_engine_block_pool_reference as ref

BS = 16


class RealStream(TokenStream):
    """A token stream with its first ``n`` identities as ``hashes`` (what the reference
    scripts read)."""

    def __init__(self, uid: int, n: int, parent=None, shared: int = 0):
        super().__init__(uid, BS, parent=parent, shared_tokens=shared * BS)
        self.hashes = list(self.block_hashes(n)[:n])


spec = st.tuples(st.integers(1, 3), st.integers(1, 8), st.one_of(st.none(), st.integers(0, 3)),
                 st.integers(0, 4))
specs = st.lists(spec, min_size=1, max_size=4)
long_spec = st.tuples(st.integers(1, 3), st.integers(4, 14), st.one_of(st.none(), st.integers(0, 3)),
                      st.integers(0, 10))
long_specs = st.lists(long_spec, min_size=2, max_size=4)


class _Factory:
    """Stands in for the reference module's ``Stream(chain)``: the chains are specs (uid,
    blocks, parent, shared), ``parent`` an earlier spec's index (None or a later one: no
    parent) whose first ``shared`` blocks the stream shares; each comprehension over the
    specs (one per pool) builds its own streams, a fork on its own parent object."""

    def __init__(self, spec_list: list):
        self.spec_list = spec_list
        self.built: list = []

    def __call__(self, spec):
        if len(self.built) == len(self.spec_list):
            self.built = []
        uid, n, parent, shared = spec
        if parent is None or parent >= len(self.built):
            out = RealStream(uid, n)
        else:
            par = self.built[parent]
            out = RealStream(uid + 10, n, par, min(shared, len(par.hashes)))
        self.built.append(out)
        return out


def _patched(spec_list):
    return mock.patch.object(ref, "Stream", _Factory(spec_list))


@settings(max_examples=300, deadline=None)
@given(specs, ref.ops, st.sampled_from([block_pool.BULK, 0, 2]))
def test_pure_streams_match_per_block_reference(spec_list, script, bulk):
    """The reference script (admit with the cached prefix, publish, free, drop, retain,
    release) on pure and forked streams: the pool agrees with the per-block reference after
    every step (free order, counts, contents, primaries, copies: ``cached`` reads the maps
    too), and no pure identity is in the hashed identities' dict."""
    with mock.patch.object(block_pool, "BULK", bulk), _patched(spec_list):
        ref.run_against_reference(spec_list, script)


@settings(max_examples=300, deadline=None)
@given(st.one_of(specs, long_specs), ref.long_ops, st.integers(4, 16))
def test_pure_run_takes_leave_the_per_block_state(spec_list, script, n):
    """Block-by-block takes and run takes (``_take_runs``: a pure memo's run is one slice of
    its map, its cuts the places below ``valid``) leave the same state and stamps."""
    with _patched(spec_list):
        ref.test_run_takes_leave_the_per_block_state.hypothesis.inner_test(spec_list, script, n)


@settings(max_examples=200, deadline=None)
@given(specs, ref.ops)
def test_pure_cache_next_block_is_cache_blocks_of_one(spec_list, script):
    """A decode's one-block publication leaves the pool as ``cache_blocks`` of one block,
    on pure and forked streams."""
    with _patched(spec_list):
        ref.test_cache_next_block_is_cache_blocks_of_one.hypothesis.inner_test(spec_list, script)


def test_a_pure_span_is_published_and_dropped_in_the_map():
    """A pure stream's span is published into its memo's map (not the hashed dict) and
    listed; a take of its tail empties those places as one run and cuts the memo once per
    listed place; a republished place is listed again only where the listing reaches it."""
    k = block_pool.BULK + 8
    fresh = 7
    pool = BlockPool(k + 5 + fresh)
    s = RealStream(5, k + 4)
    memo = pool.memo_of(s)
    blocks = pool.get_new_blocks(k + 4)
    pool.cache_blocks(blocks, s.hashes, memo, 0)
    assert pool._hashed == {} and memo.slots[:k + 4] == blocks and memo.slots[k + 4:] == [None]
    assert memo.valid == k + 4 and memo.blocks == blocks
    assert all(pool.get_cached_block(h) is b for h, b in zip(s.hashes, blocks))
    assert pool.get_cached_block(STREAM_BASE + (5 << STREAM_SHIFT) + k + 4) is None
    assert pool.get_cached_block(STREAM_BASE + (6 << STREAM_SHIFT)) is None
    pool.free_blocks(reversed(blocks))
    got = pool.get_new_blocks(k + 2)        # the never-used blocks first, then the tail
    kept = k + 4 - (k + 2 - fresh)          # places 0 .. kept - 1 survive
    assert got[fresh:] == blocks[:kept - 1:-1]
    assert memo.valid == kept and memo.cuts == k + 4 - kept
    assert memo.slots[:kept] == blocks[:kept] and set(memo.slots[kept:]) == {None}
    pool.cache_blocks(got[fresh:fresh + 1], s.hashes[kept:kept + 1], memo, kept)     # listed
    assert memo.valid == kept + 1 and pool.get_cached_block(s.hashes[kept]) is got[fresh]
    pool.cache_blocks(got[fresh + 1:fresh + 2], s.hashes[kept + 2:kept + 3], memo, kept + 2)
    assert memo.valid == kept + 1 and memo.slots[kept + 2] is got[fresh + 1]   # not listed
    pool.check_invariants()
    assert sorted(pool.cached) == s.hashes[:kept + 1] + s.hashes[kept + 2:kept + 3]
    assert pool._hashed == {}


def test_streams_of_one_uid_share_the_map():
    """Two stream objects of one uid (equal identities) get one memo per pool, so one map."""
    pool = BlockPool(8)
    a, b = RealStream(3, 4), RealStream(3, 4)
    assert pool.memo_of(a) is pool.memo_of(b)
    blocks = pool.get_new_blocks(4)
    pool.cache_blocks(blocks, a.hashes, pool.memo_of(a), 0)
    assert pool.look_up(pool.memo_of(b), b.hashes, 4) == []      # listed already (valid 4)
    assert pool.memo_of(b).blocks == blocks
    pool.check_invariants()


def test_a_fork_reads_its_parents_map_and_lists_nothing():
    """A fork of a pure stream shares its parent's first blocks (pure identities): its memo is
    ``mixed``, lists nothing, and its lookups find the parent's published blocks, then its
    own hashed ones."""
    pool = BlockPool(16)
    parent = RealStream(4, 6)
    fork = RealStream(20, 8, parent, 3)
    assert fork.hashes[:3] == parent.hashes[:3] and fork.hashes[3] < STREAM_BASE
    pm, fm = pool.memo_of(parent), pool.memo_of(fork)
    assert fm.mixed == 3 and pm.base is not None
    pb = pool.get_new_blocks(6)
    pool.cache_blocks(pb, parent.hashes, pm, 0)
    fb = pool.get_new_blocks(5)
    pool.cache_blocks(fb, fork.hashes[3:], fm, 3)
    assert set(pool._hashed) == set(fork.hashes[3:])
    assert pool.look_up(fm, fork.hashes, 8) == pb[:3] + fb and fm.valid == 0 and fm.blocks == []
    pool.check_invariants()
    pool.free_blocks(reversed(pb))
    pool.get_new_blocks(4 + 4)      # the 4 never used, then the parent's tail: places 5 .. 2
    assert pool.look_up(fm, fork.hashes, 8) == pb[:2]
    pool.check_invariants()



def test_a_stream_forked_before_use_keeps_chained_hashes_and_its_fork_lists_the_prefix():
    """A workload forks a stream when it is loaded, before any identity is computed: the
    parent then keeps chained hashes (``TokenStream``), so the fork's memo is an ordinary one
    and lists the shared prefix (a ``mixed`` one lists nothing and looks the whole chain up
    at every check: on a trace that forks every sixth call, +34 % event-loop instructions)."""
    pool = BlockPool(16)
    parent = TokenStream(4, BS)
    fork = TokenStream(20, BS, parent=parent, shared_tokens=3 * BS)
    assert parent._base is None and fork._base is None
    ph, fh = parent.block_hashes(6)[:6], fork.block_hashes(8)[:8]
    assert fh[:3] == ph[:3] and max(ph + fh) < STREAM_BASE
    pm, fm = pool.memo_of(parent), pool.memo_of(fork)
    assert pm.base is None and fm.base is None and fm.mixed == 0
    pb = pool.get_new_blocks(6)
    pool.cache_blocks(pb, ph, pm, 0)
    assert pool.look_up(fm, fh, 8) == pb[:3] and fm.valid == 3 and fm.blocks == pb[:3]
    assert pm.valid == 0 and pm.cuts == 1       # listed by the fork now: cut out of the parent's
    pool.check_invariants()
    used = TokenStream(5, BS)
    used.block_hashes(2)
    late = TokenStream(21, BS, parent=used, shared_tokens=BS)       # forked after use: stays pure
    assert used._base is not None and pool.memo_of(late).mixed == 1

def test_a_pure_lookup_stops_at_n_and_the_listing_at_its_span():
    """Places published out of order: a span after ``valid`` is not listed, a span at
    ``valid`` is listed to its end only; a lookup of n blocks returns and lists at most n
    places (the map's published run beyond them stays unlisted)."""
    pool = BlockPool(10)
    s = RealStream(2, 6)
    memo = pool.memo_of(s)
    blocks = pool.get_new_blocks(6)
    pool.cache_blocks(blocks[2:], s.hashes[2:], memo, 2)
    assert memo.valid == 0 and memo.blocks == [] and memo.slots[2:6] == blocks[2:]
    pool.cache_blocks(blocks[:2], s.hashes[:2], memo, 0)
    assert memo.valid == 2 and memo.blocks == blocks[:2]
    assert pool.look_up(memo, s.hashes, 3) == blocks[2:3]
    assert memo.valid == 3 and memo.blocks == blocks[:3]
    assert pool.look_up(memo, s.hashes, 6) == blocks[3:]
    assert memo.valid == 6
    pool.check_invariants()


def test_a_pure_span_meeting_a_block_with_content_lists_up_to_it():
    """A pure publication whose blocks hold, from some place, a block with content already:
    the places before it take their blocks in one slice and are listed; that block keeps
    its content, the blocks after it are published place by place, and the listing ends at
    it. A large take then meets a copy of a pure identity (its place holds the primary):
    dropped block by block, the primary keeps its place."""
    pool = BlockPool(12)
    s, t = RealStream(5, 6), RealStream(6, 6)
    memo, other = pool.memo_of(s), pool.memo_of(t)
    blocks = pool.get_new_blocks(5)
    pool.cache_blocks(blocks[2:3], t.hashes[:1], other, 0)      # blocks[2] holds t's place 0
    pool.cache_blocks(blocks, s.hashes[:5], memo, 0)
    assert memo.valid == 2 and memo.blocks == blocks[:2]
    assert memo.slots[:6] == blocks[:2] + [None] + blocks[3:5] + [None]
    assert blocks[2].block_hash == t.hashes[0] and other.slots[0] is blocks[2]
    pool.check_invariants()
    (c,) = pool.get_new_blocks(1)
    pool.cache_blocks([c], s.hashes[1:2], None)                 # a copy of s's place 1
    assert pool.copies == {s.hashes[1]: [c]}
    pool.free_blocks([c])
    pool.free_blocks(reversed(blocks))
    with mock.patch.object(block_pool, "BULK", 0):
        got = pool.get_new_blocks(6)     # the never-used blocks, then c (the copy), then 5, 4
    assert got[5:] == [c] and pool.copies == {} and c.block_hash is None
    assert memo.slots[1] is blocks[1] and memo.valid == 2
    pool.check_invariants()
    got += pool.get_new_blocks(3)        # s's places 4, 3 (not listed) and t's place 0
    assert memo.valid == 2 and memo.slots[:3] == blocks[:2] + [None] and other.slots[0] is None
    pool.check_invariants()
