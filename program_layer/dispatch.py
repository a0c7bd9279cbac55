"""Dispatch Plane (paper §3.3): routing, then scheduling, for a released call.

Routing is evaluated first because the chosen instance determines both the destination
queue and whether the program's prefix is resident there: the scheduling policy then sees
the chosen instance's signals (``self.signals``) and a PCB view whose KV fields describe
residency on that instance only.

``decide`` validates both results (instance: an int in [0, num_instances); q: an int) and
raises ``PolicyError`` naming the policy, program, call and time on anything else, including
any ``BaseException`` the policy raises but a genuine interrupt (policies/checks.py).
"""
from __future__ import annotations

from typing import Callable, Optional

from llmservingsim.errors import ConfigError

from .policies.checks import InvalidDecision, as_int, describe_exception, is_interrupt, policy_failure
from .pcb import NS_PER_S, PCBView
from .policies.base import RoutingPolicy, SchedulingPolicy, Signals, policy_label

__all__ = ["DispatchPlane"]


class DispatchPlane:
    """Owns the routing and scheduling policies; stateless otherwise."""

    def __init__(self, routing: RoutingPolicy, scheduling: SchedulingPolicy,
                 num_instances: int):
        if num_instances < 1:
            raise ValueError("num_instances must be >= 1")
        self.routing = routing
        self.scheduling = scheduling
        self.num_instances = num_instances
        self.facts = None       # per instance: the static InflightLoad fields (instances.cluster_setup)
        self.pairing = None     # with prefill/decode roles: program_layer/roles.RolePairing

    @property
    def engine_args(self) -> dict:
        """The scheduling policy's engine arguments (read while building: a ConfigError)."""
        try:
            return dict(getattr(self.scheduling, "engine_args", {}) or {})
        except BaseException as exc:
            if is_interrupt(exc):
                raise
            raise ConfigError(f"scheduling policy {policy_label(self.scheduling)}: engine_args must be "
                              f"a mapping of engine arguments: {describe_exception(exc)}",
                              key="policies.scheduling") from None

    def route(self, view: PCBView, inflight: tuple, now_ns: int):
        """An instance index; with roles a (prefill, decode) pair (program_layer/roles.py)."""
        try:
            raw = self.routing.select(view, inflight, now_ns / NS_PER_S)
            if self.pairing is not None:
                return self.pairing.resolve(raw, inflight)
            choice = as_int(raw, "selected instance")
            if not 0 <= choice < self.num_instances:
                raise InvalidDecision(f"selected instance {choice} out of range "
                                      f"[0, {self.num_instances})")
        except BaseException as exc:
            raise policy_failure(exc, "routing", self.routing, view, now_ns, "select") from exc
        return choice

    def priority(self, view: PCBView, signals: Signals, now_ns: int) -> int:
        try:
            self.scheduling.signals = signals
            return as_int(self.scheduling.priority(view, now_ns / NS_PER_S), "priority")
        except BaseException as exc:
            raise policy_failure(exc, "scheduling", self.scheduling, view, now_ns, "priority") from exc

    def decide(self, view_on: Callable[[Optional[int]], PCBView], inflight: tuple,
               signals_of: Callable[[int], Signals], now_ns: int) -> tuple:
        """(instance, q) for the program whose views ``view_on(instance)`` builds;
        ``view_on(None)`` is the placement-independent view routing sees. With roles the
        instance is a (prefill, decode) pair and q is decided on the prefill instance,
        where the call queues first."""
        instance = self.route(view_on(None), inflight, now_ns)
        first = instance[0] if type(instance) is tuple else instance
        q = self.priority(view_on(first), signals_of(first), now_ns)
        return instance, q
