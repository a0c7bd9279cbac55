"""``ProgramHooks``: the four engine hooks (hooks/__init__.py) implemented by the program
layer on top of the Orchestrator's PCB registry and the two planes.

priority          returns the q the Dispatch Plane computed when the call was released (the
                  engine may ask again when a preempted call re-enters its queue: same q).
retention         on_complete / on_arrival: Retention Plane decision on a current PCB view; the
                  decision is recorded in the PCB (via the Orchestrator) before it is returned.
victim_protection ``hooks.default_eviction_key`` (eq. 5) unless the retention policy defines
                  ``eviction_key(entry_view, now)``; then that key plus the creation order.
residency         forwards the engine's residency report to the PCB (via the Orchestrator).

Construction order: ``hooks = ProgramHooks()``; build the cluster with ``hooks.as_hooks()``;
``Orchestrator(cluster, programs, dispatch, retention, hooks)`` binds itself and the
Retention Plane to ``hooks``. The hooks hold no program state of their own.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from hooks import CallInfo, Hooks, KVEntryInfo, RetentionDecision, default_eviction_key

if TYPE_CHECKING:
    from .orchestrator import Orchestrator
    from .retention import RetentionPlane

__all__ = ["ProgramHooks"]


class ProgramHooks:
    """Implements PriorityHook, RetentionHook, VictimProtectionHook and ResidencyHook."""

    def __init__(self) -> None:
        self._orch: Optional["Orchestrator"] = None
        self._retention: Optional["RetentionPlane"] = None

    def bind(self, orchestrator: "Orchestrator", retention: "RetentionPlane") -> None:
        if self._orch is not None and self._orch is not orchestrator:
            raise RuntimeError("ProgramHooks is already bound to another Orchestrator")
        self._orch = orchestrator
        self._retention = retention

    def as_hooks(self) -> Hooks:
        """The bundle the engine installs."""
        return Hooks(priority=self, retention=self, victim_protection=self, residency=self)

    def _bound(self) -> "Orchestrator":
        # the per-call hooks use ``self._orch or self._bound()``: no call when bound
        if self._orch is None:
            raise RuntimeError("ProgramHooks used before an Orchestrator was bound to it")
        return self._orch

    # PriorityHook
    def priority(self, call: CallInfo, now_ns: int) -> int:
        orch = self._orch or self._bound()
        return orch.priority_of(call.request_id)

    # RetentionHook
    def on_complete(self, call: CallInfo, now_ns: int,
                    kv_utilization: float) -> RetentionDecision:
        orch = self._orch or self._bound()
        view = orch.view(call.owner, now_ns)
        signals = orch.signals(call.instance, kv_utilization=kv_utilization)
        decision = self._retention.on_complete(view, call.request_id, signals, now_ns)
        orch.on_retention_decision(call.owner, call.instance, decision, at_completion=True)
        return decision

    def on_arrival(self, call: CallInfo, now_ns: int) -> RetentionDecision:
        orch = self._orch or self._bound()
        view = orch.view(call.owner, now_ns)
        decision = self._retention.on_arrival(view, orch.signals(call.instance), now_ns)
        orch.on_retention_decision(call.owner, call.instance, decision, at_completion=False)
        return decision

    # VictimProtectionHook
    def eviction_key(self, entry: KVEntryInfo, now_ns: int) -> tuple:
        if self._retention is None or not self._retention.has_eviction_key:
            return default_eviction_key(entry, now_ns)
        orch = self._bound()
        view = orch.view(entry.owner, now_ns) if orch.has_program(entry.owner) else None
        return self._retention.eviction_key(entry, view, now_ns)

    # ResidencyHook
    def on_residency(self, owner: int, instance: int, resident_tokens: int, protected: bool,
                     now_ns: int) -> None:
        orch = self._orch or self._bound()
        if orch.has_program(owner):
            orch.on_residency_change(owner, instance, resident_tokens, protected)
