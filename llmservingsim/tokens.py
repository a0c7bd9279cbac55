"""Token identity for prefix caching, without materialising token ids.

vLLM hashes each full block of 16 token ids chained with its parent block's hash. A
workload may carry real ids (the validation run does); agent traces usually carry only
counts. A :class:`TokenStream` gives every block of a sequence an identity:

* explicit ids: the tuple of the block's ids (exactly vLLM's content hash);
* a program's context stream: ``(stream uid, block index)``; successive calls of one program
  use the same stream, so they share exactly their common prefix, while unrelated streams
  share nothing. A call whose prompt does not extend its predecessor's context forks a new
  stream that shares only ``reuse_prefix_toks`` leading tokens;
* hashed blocks (Mooncake ``hash_ids``, ``hash_block_tokens`` tokens each): tokens at offset
  ``o`` of hash block ``h`` have identity ``(h, o)``, so requests sharing leading hash ids
  share that prefix.

Invariant: ``block_hashes(n)[b]`` depends only on the tokens of blocks ``0..b`` (chained), so
equal prefixes give equal hash chains. Chains are computed once per stream and cached,
which keeps prefix lookups of 100k-token contexts cheap across a program's many calls.
Python's hash of int tuples is not randomised between runs, so chains are reproducible.
A hashed identity is that hash shifted right by one bit (``hash(...) >> 1``), so every
hashed identity lies in ``[-2**62, 2**62)`` and the range above it is left to pure streams.
``block_hashes`` always returns the same list, extended in place.

A *pure* stream (its every block a ``(stream uid, block index)`` block: no parent blocks, no
explicit ids or hash ids covering a whole block; an agent trace's program streams and every
count-only request; a stream forked before its identities were computed is not kept pure)
needs no hashing: its chain is a function of ``(uid, b)`` alone (nothing
before block 0), so block b's identity is the int ``STREAM_BASE + (uid << STREAM_SHIFT) + b``,
appended a range at a time in C. It stands for the chained hash exactly: two pure-stream
identities are equal iff their ``(uid, b)`` are (``uid < 2**UID_BITS`` and a chain is
at most ``2**STREAM_SHIFT`` blocks; a longer one raises), which is when the chained hashes
were equal; and every such identity lies in ``[2**62, 2**63)``, above every hashed identity,
so it equals none (explicit ids, hash ids, a forked stream's own blocks). Being below
``2**63``, a pure identity is a C long, so ``range`` makes a chain's ints, and the block pool
decodes them (``h - STREAM_BASE``, a shift, a mask), on CPython's fast paths for them (a
chain's int: 19 ns against 41 ns for the 65-bit ints of an earlier ``2**64`` base). Nothing
reads an identity but to compare it for equality or use it as a dict key (no output holds one,
no order depends on its value), so the results are those of the chained hashes.
"""
from __future__ import annotations

from typing import Optional, Sequence

BLOCK_TAG_STREAM = 1
BLOCK_TAG_HASHED = 2
# a pure stream's block identities: STREAM_BASE + (uid << STREAM_SHIFT) + b (module docstring)
STREAM_BASE = 1 << 62
STREAM_SHIFT = 30       # places: a chain of at most 2**30 blocks
UID_BITS = 32           # pure uids below 2**32: STREAM_BASE + (uid << 30) + b < 2**63
PLACE_MASK = (1 << STREAM_SHIFT) - 1     # an identity's place b within its stream
AHEAD = 16      # blocks a pure stream's chain is extended past the blocks asked for


def pure_base(uid: int) -> int:
    """The identity of block 0 of the pure stream ``uid`` (block b's is ``pure_base(uid) + b``)."""
    return STREAM_BASE + (uid << STREAM_SHIFT)


def pure_place(identity: int) -> tuple[int, int]:
    """``(uid, b)`` of a pure-stream identity (one at least ``STREAM_BASE``)."""
    return (identity - STREAM_BASE) >> STREAM_SHIFT, identity & PLACE_MASK


class TokenStream:
    __slots__ = ("uid", "block_size", "_parent", "_shared_blocks", "_ids", "_hash_ids",
                 "_hash_block_tokens", "_prompt_len", "_hashes", "memos", "_base")

    def __init__(self, uid: int, block_size: int, *, parent: Optional["TokenStream"] = None,
                 shared_tokens: int = 0, ids: Optional[Sequence[int]] = None,
                 hash_ids: Optional[Sequence[int]] = None, hash_block_tokens: int = 512,
                 prompt_len: int = 0):
        self.uid = uid
        self.block_size = block_size
        self._parent = parent
        self._shared_blocks = shared_tokens // block_size if parent is not None else 0
        self._ids = ids
        self._hash_ids = hash_ids
        self._hash_block_tokens = hash_block_tokens
        self._prompt_len = prompt_len
        self._hashes: list[int] = []
        self.memos: Optional[dict] = None   # per KV pool, its block_pool.PrefixMemo (pools only)
        # a pure stream's identity of block 0 (module docstring), else None (chained hashes)
        pure = (not self._shared_blocks and (ids is None or len(ids) < block_size)
                and (hash_ids is None or not hash_ids or prompt_len < block_size))
        self._base = pure_base(uid) if pure and 0 <= uid < 1 << UID_BITS else None
        if self._shared_blocks and parent._base is not None and not parent._hashes:
            # a forked stream keeps chained hashes (none computed yet, so nothing changes but
            # the identities' values): its blocks are then the fork's shared prefix in the
            # prefix dict, which the fork's memo lists, instead of a pure map's places, which
            # it could not (block_pool.PrefixMemo: a fork of a pure stream lists nothing)
            parent._base = None
        if ids is not None and len(ids) >= block_size:
            # The chain over the explicit ids is hashed now, while they are in the cache: a
            # stream is made as its record is read (program_layer.workload_io), and hashing
            # the same ids at the request's admission, from memory gone cold in between,
            # cost the dev cell's event loop twice as much (docs/performance.md, 2026-12-04
            # fourth sitting). vLLM, too, hashes a request's blocks when the request is made.
            self.block_hashes(len(ids) // block_size)

    def block_hashes(self, n_blocks: int) -> list[int]:
        """The chained hashes of the first ``n_blocks`` full blocks (a cached list; callers
        must only read indices below ``n_blocks``).

        Block b's identity: its explicit ids while they cover it; else, inside the prompt
        and the hash ids, ``(BLOCK_TAG_HASHED, hash id, offset)``; else
        ``(BLOCK_TAG_STREAM, uid, b)``. Each condition holds for a prefix of the blocks, so
        the blocks fall in three consecutive runs, each hashed in its own loop. A pure
        stream's blocks are all of the last kind: its identities are ints in a range."""
        hashes = self._hashes
        if len(hashes) >= n_blocks:
            return hashes
        base = self._base
        if base is not None:        # a pure stream: (uid, b) as one int per block, in C
            if n_blocks + AHEAD > 1 << STREAM_SHIFT:
                raise ValueError(f"a stream of {n_blocks} blocks (at most {1 << STREAM_SHIFT})")
            # AHEAD more: a decode asks for one more block at a time (callers read below
            # n_blocks only, so a longer chain changes nothing they see)
            hashes.extend(range(base + len(hashes), base + n_blocks + AHEAD))
            return hashes
        if not hashes and self._shared_blocks:
            hashes.extend(self._parent.block_hashes(self._shared_blocks)[:self._shared_blocks])
        prev = hashes[-1] if hashes else 0
        b = len(hashes)
        bs = self.block_size
        append = hashes.append
        ids = self._ids
        if ids is not None:
            end = min(n_blocks, len(ids) // bs)
            while b < end:
                prev = hash((prev, tuple(ids[b * bs:(b + 1) * bs]))) >> 1
                append(prev)
                b += 1
        hash_ids = self._hash_ids
        if hash_ids is not None and b < n_blocks:
            hbt = self._hash_block_tokens
            # (b + 1) * bs <= prompt_len and (b * bs) // hbt < len(hash_ids)
            end = min(n_blocks, self._prompt_len // bs, -(-len(hash_ids) * hbt // bs))
            while b < end:
                o = b * bs
                prev = hash((prev, (BLOCK_TAG_HASHED, hash_ids[o // hbt], o % hbt))) >> 1
                append(prev)
                b += 1
        uid = self.uid
        while b < n_blocks:
            prev = hash((prev, (BLOCK_TAG_STREAM, uid, b))) >> 1
            append(prev)
            b += 1
        return hashes
