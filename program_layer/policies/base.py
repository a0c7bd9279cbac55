"""The three policy interfaces (paper Appendix E) and the deployable signals they read.

A policy sees only a ``PCBView`` (program_layer/pcb.py), the current simulated time ``now``
in seconds (float) and deployable signals. It returns a declarative decision; the planes
(program_layer/dispatch.py, program_layer/retention.py) validate it and turn it into engine
terms.

Retention: ``on_turn_complete(self, pcb, request_id, now)`` and
``on_turn_arrival(self, pcb, now)`` return ``("protect", until)`` (``until``: absolute
simulated seconds), ``("protect", until, value)`` (value v of eq. 5), ``"release"``,
``"evict"`` or ``"none"``. ``self.signals`` (a ``Signals``) is set by the plane before every
call and describes the instance the call ran on (completion) or arrives at (arrival).

Scheduling: ``priority(self, pcb, now) -> int``; smaller runs first; release time breaks ties
inside the engine. ``engine_args`` (class attribute) are engine arguments the policy needs,
e.g. ``{"scheduling_policy": "priority"}``; ``{}`` keeps the engine's defaults (vLLM fcfs).
``self.signals`` describes the instance chosen by routing.

Routing: ``select(self, pcb, inflight, now) -> int`` returns an instance index;
``inflight`` is a tuple with one ``InflightLoad`` per instance (index = instance id). In a
cluster with prefill/decode roles it may return a pair (prefill, decode) instead
(program_layer/roles.py).
"""
from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

__all__ = ["Signals", "InflightLoad", "RetentionPolicy", "SchedulingPolicy", "RoutingPolicy",
           "policy_label"]


@dataclass(frozen=True, slots=True)
class Signals:
    """Deployable per-instance signals at decision time (primitives only).

    kv_utilization: fraction of the instance's KV pool in use (0..1), None when unknown.
    inflight_tokens: tokens the running batch processes per step (the engine's value when it
    reports one, else ``num_running``: one decode token per running call).
    running_context_tokens: KV tokens held by the running batch (the engine's value when it
    reports one, else ``kv_used_tokens``).
    """
    instance: Optional[int] = None
    kv_utilization: Optional[float] = None
    num_running: int = 0
    num_waiting: int = 0
    inflight_tokens: int = 0
    kv_used_tokens: int = 0
    kv_pool_tokens: int = 0
    running_context_tokens: int = 0


#: One instance's load as a routing policy sees it (element of ``inflight``): its dynamic
#: instance roles (instances: a list; docs/serving-architectures.md) and which of them can
#: run each half of a call
ROLES = ("both", "prefill", "decode")
PREFILL_ROLES = ("prefill", "both")
DECODE_ROLES = ("decode", "both")

#: load, then static facts (docs/policies.md): role ("prefill" | "decode" | "both"), device
#: name, gpus (tp x pp), peak_tflops and memory_bandwidth_gbs (per GPU), decode_step_s and
#: prefill_step_s (the modelled step time of a 32-sequence decode at 1,024 tokens of context
#: and of one 2,048-token prefill: smaller is faster). The facts have defaults, so a
#: six-field construction still works.
InflightLoad = namedtuple("InflightLoad", ["num_running", "num_waiting", "kv_utilization",
                                           "kv_used_tokens", "kv_pool_tokens",
                                           "inflight_tokens", "role", "device", "gpus",
                                           "peak_tflops", "memory_bandwidth_gbs",
                                           "decode_step_s", "prefill_step_s"],
                          defaults=("both", "", 1, 0.0, 0.0, 0.0, 0.0))


class _Policy:
    #: set by ``load_policy`` to the spec the policy was loaded from (for error messages)
    spec_label: ClassVar[Optional[str]] = None
    #: built-in name ("ttl", ...); None for user classes
    name: ClassVar[Optional[str]] = None
    signals: Signals = Signals()


class RetentionPolicy(_Policy):
    """What happens to a program's KV across its tool gap (eq. 1, second line; eq. 6)."""

    def on_turn_complete(self, pcb, request_id: int, now: float) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement on_turn_complete")

    def on_turn_arrival(self, pcb, now: float) -> Any:
        return "none"


class SchedulingPolicy(_Policy):
    """The integer q of eq. 4 for a call entering an engine queue (smaller first)."""
    engine_args: ClassVar[dict] = {}

    def priority(self, pcb, now: float) -> int:
        raise NotImplementedError(f"{type(self).__name__} must implement priority")


class RoutingPolicy(_Policy):
    """The instance i of eq. 1 for a released call; evaluated before scheduling."""

    def select(self, pcb, inflight: tuple, now: float) -> int:
        raise NotImplementedError(f"{type(self).__name__} must implement select")


def policy_label(policy: object) -> str:
    """``ClassName`` or ``ClassName (spec)`` for messages."""
    cls = type(policy).__name__
    spec = getattr(policy, "spec_label", None)
    return f"{cls} ({spec})" if spec and spec != cls else cls
