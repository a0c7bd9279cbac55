"""The four hooks between the program layer and the request engine (paper §4; docs/policies.md
"The four hooks", docs/architecture.md).

The engine (``llmservingsim``) calls these; the program layer implements them. The engine
never imports the program layer and the program layer touches the engine only through
these interfaces plus the engine's public API (``add_request``, the event loop, outputs).

Each hook is a small class whose default methods are no-ops that reproduce vLLM's own
behaviour, so a request-level run pays nothing for them: the engine checks
``hooks.<name> is None`` before calling and ``Hooks()`` holds ``None`` everywhere.

Hooks
-----
priority          dispatch -> engine queue: the integer q of eq. 4 for a call entering the
                  waiting queue (smaller runs first; release time breaks ties).
retention         call completion -> what happens to the program's KV (eq. 5-6): release to
                  the LRU free queue, evict (drop cached content), protect as a KV entry
                  with deadline d and value v, or (with kv_tiers) offload: keep it in the
                  first lower tier until d; also consulted when a successor call arrives.
victim_protection the KV manager asks for each entry's eviction key when reclaiming memory
                  under pressure; entries are reclaimed in ascending key order. A tier asks
                  the same for its offloaded entries (``KVEntryInfo.tier`` names it).
residency         the engine reports residency changes of a program's KV entry back to the
                  program layer (protected or not, tokens still resident).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol

__all__ = [
    "CallInfo", "KVEntryInfo", "RetentionDecision", "RELEASE", "EVICT", "NONE", "RETAINING_KINDS",
    "PriorityHook", "RetentionHook", "VictimProtectionHook", "ResidencyHook", "Hooks",
    "default_eviction_key",
]


@dataclass(frozen=True, slots=True)
class CallInfo:
    """What the engine tells a hook about one LLM call (engine request). Read-only.

    ``output_tokens`` is deliberately absent: the engine knows the call's length but the
    program layer must not learn it before execution reveals it (causal boundary).
    """
    request_id: int
    owner: int              # program id (a request-level run uses one owner per request)
    instance: int
    arrival_ns: int         # release time r_{p,k}
    prompt_tokens: int
    context_tokens: int     # tokens of KV the call holds at completion (prompt + generated)
    first_scheduled_ns: Optional[int] = None
    completion_ns: Optional[int] = None
    num_preemptions: int = 0


@dataclass(frozen=True, slots=True)
class RetentionDecision:
    """What happens to a completed call's KV.

    kind: ``"release"`` (blocks go to the engine's LRU free queue, hashes kept: vLLM's own
    behaviour), ``"evict"`` (blocks freed and their cached content dropped), or
    ``"protect"`` (the blocks stay referenced by a KV entry owned by the program until
    reclaimed under pressure or released; ``deadline_ns`` is d, ``value`` is v), or
    ``"offload"`` (kv_tiers: the full blocks are kept in the first lower tier, pinned until
    d, and the GPU blocks are released as by ``"release"``; without tiers it is a release).
    A protect or offload decision with ``deadline_ns <= now`` is a release (paper §3.4: d = c).
    """
    kind: str
    deadline_ns: int = 0
    value: Optional[float] = None


RELEASE = RetentionDecision("release")
EVICT = RetentionDecision("evict")
NONE = RetentionDecision("none")       # on arrival: leave any entry as it is
#: the decision kinds that keep a program's KV until a deadline (GPU memory or a lower tier)
RETAINING_KINDS = frozenset(("protect", "offload"))


@dataclass(frozen=True, slots=True)
class KVEntryInfo:
    """A retained KV entry as the victim-protection hook sees it."""
    owner: int
    instance: int
    created_ns: int
    deadline_ns: int
    value: Optional[float]
    num_blocks: int
    seq: int                 # creation order, the final deterministic tie-break
    tier: str = "gpu"        # where the entry lives: "gpu", or a kv_tiers tier ("cpu", "cxl")


def default_eviction_key(entry: KVEntryInfo, now_ns: int) -> tuple:
    """Eq. 5: (still protected?, value) ascending; unset values tie at 0 and fall back to
    the deadline order (Appendix E), then creation order."""
    return (now_ns < entry.deadline_ns,
            0.0 if entry.value is None else entry.value,
            entry.deadline_ns, entry.seq)


class PriorityHook(Protocol):
    def priority(self, call: CallInfo, now_ns: int) -> int:
        """q for a call entering an engine's waiting queue; smaller runs first."""


class RetentionHook(Protocol):
    def on_complete(self, call: CallInfo, now_ns: int, kv_utilization: float) -> RetentionDecision:
        """Decision for the KV of a call that just finished (its blocks, prompt and output)."""

    def on_arrival(self, call: CallInfo, now_ns: int) -> RetentionDecision:
        """Decision for the owner's existing KV entry when its next call arrives at the
        engine: RELEASE (to the LRU queue), EVICT, or NONE (keep it as it is)."""


class VictimProtectionHook(Protocol):
    def eviction_key(self, entry: KVEntryInfo, now_ns: int) -> tuple:
        """Sort key; entries are reclaimed in ascending order."""


class ResidencyHook(Protocol):
    def on_residency(self, owner: int, instance: int, resident_tokens: int,
                     protected: bool, now_ns: int) -> None:
        """The owner's KV entry changed: created, reclaimed, released, evicted or (kv_tiers)
        offloaded: ``resident_tokens`` counts GPU-resident tokens only."""


@dataclass(slots=True)
class Hooks:
    """The hooks installed in an engine; ``None`` means vLLM's default behaviour."""
    priority: Optional[PriorityHook] = None
    retention: Optional[RetentionHook] = None
    victim_protection: Optional[VictimProtectionHook] = None
    residency: Optional[ResidencyHook] = None
