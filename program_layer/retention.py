"""Retention Plane (paper §3.4): calls the retention policy with a PCB view and signals,
validates what it returns and converts it to an engine ``hooks.RetentionDecision``.

Policy decisions -> engine terms:
  ("protect", until[, value])  -> RetentionDecision("protect", deadline_ns=round(until*1e9),
                                  value) ; a deadline <= now is a release (d = c, §3.4).
                                  ``until`` is absolute simulated seconds: it must be a finite
                                  number >= 0 (a negative one is a TTL mistaken for a time)
  ("offload", until[, value])  -> RetentionDecision("offload", ...): with kv_tiers, keep the
                                  context in the first lower tier until ``until`` (the GPU
                                  blocks are released); without tiers a release. Same
                                  deadline rules as protect
  "release" / "evict"          -> RELEASE / EVICT
  "none"                       -> NONE on arrival (leave the entry as it is); at completion
                                  there is no entry yet, so it means the engine default,
                                  RELEASE (vLLM's own behaviour)
On arrival the engine acts only on RELEASE and EVICT (the entry is about to be reused by the
arriving call); a valid ("protect", ...) or ("offload", ...) there is therefore returned as NONE, so the PCB and
the engine agree that the existing entry keeps its deadline.
A policy that raises (any ``BaseException`` but a genuine interrupt: policies/checks.py) or
returns anything else raises ``PolicyError``.
"""
from __future__ import annotations

import math
from typing import Optional

from hooks import EVICT, KVEntryInfo, NONE, RELEASE, RETAINING_KINDS, RetentionDecision, default_eviction_key
from llmservingsim.frozen import maker

from .policies.checks import InvalidDecision, as_finite, policy_failure
from .gaps import ReadOnly
from .pcb import NS_PER_S, PCBView
from .policies.base import RetentionPolicy, Signals

__all__ = ["RetentionPlane", "EntryView"]

_SIMPLE = {"release": RELEASE, "evict": EVICT, "none": NONE}


class EntryView(ReadOnly):
    """A retained KV entry as a policy's ``eviction_key(entry, now)`` sees it (seconds)."""
    __slots__ = ("owner", "instance", "created_s", "deadline_s", "value", "num_blocks", "seq",
                 "protected", "program", "tier")

    def __init__(self, entry: KVEntryInfo, now_ns: int, program: Optional[PCBView]):
        put = object.__setattr__
        for name, value in zip(self.__slots__, _entry_fields(entry, now_ns, program)):
            put(self, name, value)


def _entry_fields(entry: KVEntryInfo, now_ns: int, program: Optional[PCBView]) -> tuple:
    """EntryView's values in ``__slots__`` order."""
    return (entry.owner, entry.instance, entry.created_ns / NS_PER_S, entry.deadline_ns / NS_PER_S,
            entry.value, entry.num_blocks, entry.seq, now_ns < entry.deadline_ns, program,
            entry.tier)         # tier: "gpu", or the kv_tiers tier holding it


#: positional constructors (llmservingsim/frozen.py): an EntryView per eviction-key call, a
#: RetentionDecision per retaining decision
_new_entry_view = maker(EntryView, EntryView.__slots__)
_make_decision = maker(RetentionDecision)


class RetentionPlane:
    """Owns the retention policy; stateless otherwise."""

    def __init__(self, policy: RetentionPolicy):
        self.policy = policy

    @property
    def has_eviction_key(self) -> bool:
        return callable(getattr(self.policy, "eviction_key", None))

    def on_complete(self, view: PCBView, request_id: int, signals: Signals,
                    now_ns: int) -> RetentionDecision:
        try:
            self.policy.signals = signals
            raw = self.policy.on_turn_complete(view, request_id, now_ns / NS_PER_S)
            decision = to_engine_decision(raw, now_ns)
        except BaseException as exc:
            raise policy_failure(exc, "retention", self.policy, view, now_ns, "on_turn_complete") from exc
        return RELEASE if decision is NONE else decision

    def on_arrival(self, view: PCBView, signals: Signals, now_ns: int) -> RetentionDecision:
        try:
            self.policy.signals = signals
            raw = self.policy.on_turn_arrival(view, now_ns / NS_PER_S)
            decision = to_engine_decision(raw, now_ns)
        except BaseException as exc:
            raise policy_failure(exc, "retention", self.policy, view, now_ns, "on_turn_arrival") from exc
        return NONE if decision.kind in RETAINING_KINDS else decision

    def eviction_key(self, entry: KVEntryInfo, program: Optional[PCBView],
                     now_ns: int) -> tuple:
        """The policy's key, made total by appending the entry's creation order."""
        if not self.has_eviction_key:
            return default_eviction_key(entry, now_ns)
        try:
            raw = self.policy.eviction_key(_new_entry_view(*_entry_fields(entry, now_ns, program)),
                                            now_ns / NS_PER_S)
            parts = raw if isinstance(raw, tuple) else (raw,)
            # the key is compared later, outside this try: only plain bools, ints and floats
            # go on (any other number as its float), so no policy code runs in that sort
            key = []
            for i, part in enumerate(parts):
                if isinstance(part, bool):          # eq. 5's indicator is a fine element
                    key.append(part)
                else:
                    v = as_finite(part, f"eviction_key element {i}")
                    key.append(part if type(part) is int else v)
        except BaseException as exc:
            where = program if program is not None else f"owner {entry.owner}"
            raise policy_failure(exc, "retention", self.policy, where, now_ns, "eviction_key") from exc
        return tuple(key) + (entry.seq,)


def to_engine_decision(raw, now_ns: int) -> RetentionDecision:
    """Validate a policy decision and convert it (see module docstring)."""
    if isinstance(raw, str):
        decision = _SIMPLE.get(raw)
        if decision is None:
            raise InvalidDecision(f"returned {raw!r}; expected ('protect', until[, value]), "
                                  f"('offload', until[, value]), 'release', 'evict' or 'none'")
        return decision
    if isinstance(raw, (tuple, list)) and len(raw) in (2, 3) and raw[0] in RETAINING_KINDS:
        kind = raw[0]
        until = as_finite(raw[1], f"{kind} deadline 'until'")
        if until < 0:
            raise InvalidDecision(f"{kind} deadline 'until' must be >= 0, got {until!r}: it is an "
                                  f"absolute simulated time in seconds (e.g. now + ttl), not a TTL")
        value = None
        if len(raw) == 3 and raw[2] is not None:
            value = as_finite(raw[2], f"{kind} value")
        if not math.isfinite(until * NS_PER_S):
            raise InvalidDecision(f"{kind} deadline 'until' {until!r} s is too large")
        deadline_ns = int(round(until * NS_PER_S))
        if deadline_ns <= now_ns:
            return RELEASE
        return _make_decision(kind, deadline_ns, value)
    raise InvalidDecision(f"returned {raw!r} ({type(raw).__name__}); expected "
                          f"('protect', until[, value]), ('offload', until[, value]), 'release', "
                          f"'evict' or 'none'")
