"""Engine-side request state (vLLM ``Request``) and the call spec the engine is given.

Ownership: ``status``, ``num_computed_tokens`` and ``num_known_tokens`` are written only by
the scheduler; ``num_tokens`` grows only in ``Scheduler.update_from_output`` (a sampled
token becomes known), ``Scheduler.advance_decodes`` and ``Scheduler.finish_decode``
(fast-forward); token timestamps are written there too, ``queued_ns`` and
``first_scheduled_ns`` by the instance that runs the request.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional

from .tokens import TokenStream


@dataclass(slots=True)
class CallSpec:
    """One LLM call as the workload describes it. ``output_tokens`` is the engine's
    max_tokens (generation is forced to that length, as in the paper's replay); it must not
    reach a policy before the call finishes."""
    owner: int
    call_index: int
    prompt_tokens: int
    output_tokens: int
    tool_duration_ns: int
    tool_name: Optional[str]
    tokens: TokenStream
    source: str = ""          # where the workload defines it ("file:line"), for error messages


class RequestStatus(enum.IntEnum):
    WAITING = 0
    RUNNING = 1
    PREEMPTED = 2
    FINISHED = 3
    WAITING_FOR_REMOTE_KVS = 4  # holds blocks while its KV arrives (llmservingsim/remote_kv.py)


class Request:
    __slots__ = (
        "request_id", "owner", "call_index", "prompt_len", "max_tokens", "stream",
        "arrival_ns", "queued_ns", "priority", "status", "num_computed_tokens", "num_tokens",
        "num_known_tokens", "num_cached_tokens", "num_preemptions", "instance",
        "first_scheduled_ns", "first_token_ns", "last_token_ns", "finished_ns",
        "spec", "pd", "max_len",
    )

    def __init__(self, request_id: int, spec: CallSpec, arrival_ns: int, instance: int = 0,
                 priority: int = 0):
        self.request_id = request_id
        self.spec = spec
        self.owner = spec.owner
        self.call_index = spec.call_index
        self.prompt_len = spec.prompt_tokens
        self.max_tokens = spec.output_tokens
        # prompt + max_tokens, fixed like both: the request finishes when num_tokens reaches
        # it (the scheduler's per-step finish tests compare with it, no subtraction)
        self.max_len = self.prompt_len + self.max_tokens
        self.stream = spec.tokens
        self.arrival_ns = arrival_ns
        # vLLM's queued_ts: when the engine loop ingests the request. The busy loop reads its
        # input queue only between steps, so a call released during a step is queued at that
        # step's end (the instance sets it; an idle engine ingests at once).
        self.queued_ns = arrival_ns
        self.priority = priority
        self.status = RequestStatus.WAITING
        self.num_computed_tokens = 0
        self.num_tokens = spec.prompt_tokens      # prompt + sampled output tokens known so far
        # num_tokens + the placeholders of tokens scheduled but not sampled yet (async
        # scheduling): the end a step's chunk may reach. Kept as one count so that a
        # sampled token (one more token, one placeholder less) leaves it unchanged.
        self.num_known_tokens = spec.prompt_tokens
        self.num_cached_tokens = -1               # prefix hit at first scheduling (-1: not yet)
        self.num_preemptions = 0
        self.instance = instance
        self.first_scheduled_ns: Optional[int] = None
        self.first_token_ns: Optional[int] = None
        self.last_token_ns: Optional[int] = None
        self.finished_ns: Optional[int] = None
        self.pd = None            # prefill/decode disaggregation: the call's PDCall (llmservingsim/disagg.py)

    @property
    def num_placeholders(self) -> int:
        """Tokens scheduled whose sample has not been applied yet (vLLM's
        ``num_output_placeholders``)."""
        return self.num_known_tokens - self.num_tokens

    @property
    def num_output_tokens(self) -> int:
        return self.num_tokens - self.prompt_len

    def __lt__(self, other: "Request") -> bool:     # vLLM Request.__lt__: (priority, arrival, id)
        return (self.priority, self.arrival_ns, self.request_id) < (
            other.priority, other.arrival_ns, other.request_id)

    def __repr__(self) -> str:
        return (f"Request({self.request_id}, owner={self.owner}, call={self.call_index}, "
                f"{self.status.name}, computed={self.num_computed_tokens}/{self.num_tokens})")
