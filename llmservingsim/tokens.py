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
``block_hashes`` always returns the same list, extended in place.
"""
from __future__ import annotations

from typing import Optional, Sequence

BLOCK_TAG_STREAM = 1
BLOCK_TAG_HASHED = 2


class TokenStream:
    __slots__ = ("uid", "block_size", "_parent", "_shared_blocks", "_ids", "_hash_ids",
                 "_hash_block_tokens", "_prompt_len", "_hashes", "memos")

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

    def block_hashes(self, n_blocks: int) -> list[int]:
        """The chained hashes of the first ``n_blocks`` full blocks (a cached list; callers
        must only read indices below ``n_blocks``).

        Block b's identity: its explicit ids while they cover it; else, inside the prompt
        and the hash ids, ``(BLOCK_TAG_HASHED, hash id, offset)``; else
        ``(BLOCK_TAG_STREAM, uid, b)``. Each condition holds for a prefix of the blocks, so
        the blocks fall in three consecutive runs, each hashed in its own loop."""
        hashes = self._hashes
        if len(hashes) >= n_blocks:
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
                prev = hash((prev, tuple(ids[b * bs:(b + 1) * bs])))
                append(prev)
                b += 1
        hash_ids = self._hash_ids
        if hash_ids is not None and b < n_blocks:
            hbt = self._hash_block_tokens
            # (b + 1) * bs <= prompt_len and (b * bs) // hbt < len(hash_ids)
            end = min(n_blocks, self._prompt_len // bs, -(-len(hash_ids) * hbt // bs))
            while b < end:
                o = b * bs
                prev = hash((prev, (BLOCK_TAG_HASHED, hash_ids[o // hbt], o % hbt)))
                append(prev)
                b += 1
        uid = self.uid
        while b < n_blocks:
            prev = hash((prev, (BLOCK_TAG_STREAM, uid, b)))
            append(prev)
            b += 1
        return hashes
