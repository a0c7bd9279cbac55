"""Token-id prompts for a replay, so that prefix reuse on the server is the simulator's.

Each program owns one deterministic pseudo-random id stream (``IdStream``: ids in
``[ID_LOW, ID_HIGH)``, seeded by ``(seed, program index)``), consumed in order: every id a
prompt needs that is not already fixed is the stream's next one, so fresh ids never repeat
earlier ones and no two programs share a block by construction. The rule (docs/replay.md):

- call 0: the stream's first ``input_toks`` ids;
- call k+1 with ``s = shared_prefix`` (``plan``): the first ``s`` ids of call k's context
  (call k's prompt + call k's *actual* output ids) followed by ``input_toks - s`` fresh ids.
  With the default sharing that is: the context extended by fresh ids when the prompt is at
  least as long as the context, and the context's first ``input_toks`` ids when the workload
  shrinks it (what the simulator assumes: the prompt is a prefix of the previous context);
- explicit ``input_tok_ids`` are sent verbatim; Mooncake ``hash_ids`` (request records) map
  each hash id to its own ``hash_block_tokens`` ids (seeded by ``(seed, hash id)``, shared by
  every request naming it), the rest of the prompt fresh.

When the server does not return the generated ids, call k's output positions are filled with
the stream's next ids (the record's meta.json then says ``"output_ids_from_server": false``;
prefix reuse past call k's prompt is then not real on the server).
"""
from __future__ import annotations

import random
from array import array
from dataclasses import dataclass
from typing import Optional

ID_LOW, ID_HIGH = 1000, 30000
_SPAN = ID_HIGH - ID_LOW


def _ids(rng: random.Random, n: int) -> list:
    """``n`` ids in [ID_LOW, ID_HIGH) from 32 random bits each (C-speed: a 100k-token prompt
    must not hold the interpreter while other threads stamp arriving tokens)."""
    if n <= 0:
        return []
    words = array("I")
    if words.itemsize != 4:                      # pragma: no cover - every CPython platform has 4
        return [rng.randrange(ID_LOW, ID_HIGH) for _ in range(n)]
    words.frombytes(rng.randbytes(4 * n))
    return [ID_LOW + w % _SPAN for w in words]


def _text(ids: list) -> str:
    return ",".join(map(str, ids))


def _join(a: str, b: str) -> str:
    return f"{a},{b}" if a and b else a or b


class IdStream:
    """A program's consumable id stream. Invariant: each ``take`` continues where the last
    ended (no position is handed out twice); same seed and index, same ids."""

    def __init__(self, seed: int, index: int):
        self._rng = random.Random(f"agentservesim-replay:{seed}:{index}")

    def take(self, n: int) -> list:
        return _ids(self._rng, n)


def hash_block(seed: int, hash_id: int, n: int) -> list:
    """The ids of Mooncake hash block ``hash_id`` (first ``n``): equal for every request."""
    return _ids(random.Random(f"agentservesim-replay-hash:{seed}:{hash_id}"), n)


@dataclass
class Prompt:
    """A prompt's ids and the same ids as JSON array text without brackets (``text`` is
    exactly ``",".join(map(str, ids))``; built incrementally from the context's text)."""
    ids: list
    text: str


class ProgramPrompts:
    """Builds one program's prompts call by call. Owns the program's context (the last
    call's prompt + output ids, and their text); ``observe`` must be called with each
    completed call before the next ``prompt``."""

    def __init__(self, seed: int, index: int):
        self.seed = seed
        self.stream = IdStream(seed, index)
        self.context: list = []
        self._context_text = ""
        self.output_ids_from_server = True

    def prompt(self, call) -> Prompt:
        if call.explicit_ids is not None:
            ids = list(call.explicit_ids)
            return Prompt(ids, _text(ids))
        if call.hash_ids:
            ids = []
            for h in call.hash_ids:
                if len(ids) >= call.input_toks:
                    break
                ids.extend(hash_block(self.seed, h, min(call.hash_block_tokens, call.input_toks - len(ids))))
            ids += self.stream.take(call.input_toks - len(ids))
            return Prompt(ids, _text(ids))
        shared = min(call.shared_prefix, len(self.context), call.input_toks)
        fresh = self.stream.take(call.input_toks - shared)
        head = self._context_text if shared == len(self.context) else _text(self.context[:shared])
        return Prompt(self.context[:shared] + fresh, _join(head, _text(fresh)))

    def observe(self, prompt: Prompt, output_ids: Optional[list], output_toks: int) -> None:
        """Record a completed call: its prompt and the server's output ids (``None``: the
        server returned none, the stream fills those positions)."""
        if output_ids is None:
            self.output_ids_from_server = False
            output_ids = self.stream.take(output_toks)
        self.context = prompt.ids + list(output_ids)
        self._context_text = _join(prompt.text, _text(output_ids))
