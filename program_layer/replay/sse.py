"""Server-sent events of a streamed completion: ``data: {json}`` lines until ``data: [DONE]``.

``events(readline, clock)`` yields ``(t, obj)`` for every data line, ``t`` being ``clock()``
taken as soon as the line was read (the arrival time of that chunk on the client), ``obj``
the decoded JSON object, or ``DONE`` for ``[DONE]`` (then it stops). Blank lines, comments
(``:``) and other fields (``event:``, ``id:``) are skipped. It ends without ``DONE`` when the
stream ends early; a data line that is not a JSON object raises ``StreamError``.
``chunk_tokens`` is how many tokens one chunk carries.
"""
from __future__ import annotations

import json
import time

DONE = object()


class StreamError(Exception):
    """The stream broke the protocol (a reason for failing the call, not a user error)."""


def events(readline, clock=time.monotonic):
    while True:
        raw = readline()
        t = clock()
        if not raw:
            return
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            yield t, DONE
            return
        try:
            obj = json.loads(data)
        except json.JSONDecodeError as exc:
            raise StreamError(f"malformed event ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise StreamError("event is not a JSON object")
        yield t, obj


def chunk_tokens(obj: dict, counted: int):
    """(tokens in this chunk, their ids or None). Preference: the choice's ``token_ids``
    (``return_token_ids``); else the growth of ``usage.completion_tokens`` (continuous usage
    stats) over ``counted`` so far; else one token per choice chunk with text. Chunks
    without choices (the final usage chunk) carry none."""
    choices = obj.get("choices") or []
    if not choices:
        return 0, None
    choice = choices[0] if isinstance(choices[0], dict) else {}
    ids = choice.get("token_ids")
    if isinstance(ids, list):
        return len(ids), [int(x) for x in ids]
    usage = obj.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        return max(0, usage["completion_tokens"] - counted), None
    return (1 if choice.get("text") else 0), None
