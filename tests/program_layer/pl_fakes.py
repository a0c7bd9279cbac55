"""A small deterministic cluster following the engine's public API, for program-layer tests.

Each instance runs up to ``slots`` calls at once; a call's service time is
``service_ns(call)``; waiting calls start in (q, release, request id) order. Hooks are called
as the engine does: on submit ``retention.on_arrival`` then ``priority.priority``; at
completion ``on_request_finished`` first, then ``retention.on_complete`` (and a residency
report for protected KV).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable, Optional

from hooks import CallInfo, Hooks
from llmservingsim.cluster import InstanceLoad
from llmservingsim.request import CallSpec
from program_layer.workload_io import ProgramSpec

S = 1_000_000_000
MS = 1_000_000


@dataclass
class _Req:
    request_id: int
    call: CallSpec
    instance: int
    arrival_ns: int
    q: int
    first_scheduled_ns: Optional[int] = None


@dataclass
class FakeCluster:
    num_instances: int
    hooks: Hooks
    service_ns: Callable[[CallSpec], int] = lambda call: S
    slots: int = 1
    kv_utilization: list = field(default_factory=list)
    now_ns: int = 0
    on_request_finished: Optional[Callable[[CallInfo], None]] = None

    def __post_init__(self):
        self._events: list = []
        self._seq = 0
        self._waiting = [[] for _ in range(self.num_instances)]
        self._running = [[] for _ in range(self.num_instances)]
        if not self.kv_utilization:
            self.kv_utilization = [0.0] * self.num_instances
        self.arrival_decisions: list = []     # (request_id, RetentionDecision)
        self.completion_decisions: list = []  # (request_id, now_ns, RetentionDecision)
        self.submitted: list = []             # (now_ns, instance, request_id, owner, call_index)

    # ----- engine public API --------------------------------------------------------------
    def schedule(self, time_ns: int, callback) -> None:
        assert time_ns >= self.now_ns, (time_ns, self.now_ns)
        heapq.heappush(self._events, (time_ns, self._seq, callback))
        self._seq += 1

    def submit(self, instance: int, call: CallSpec, request_id: int) -> None:
        self.submitted.append((self.now_ns, instance, request_id, call.owner, call.call_index))
        info = self._info(request_id, call, instance, self.now_ns)
        self.arrival_decisions.append((request_id, self.hooks.retention.on_arrival(
            info, self.now_ns)))
        q = self.hooks.priority.priority(info, self.now_ns)
        self._waiting[instance].append(_Req(request_id, call, instance, self.now_ns, q))
        self._try_start(instance)

    def load(self, instance: int) -> InstanceLoad:
        return InstanceLoad(len(self._running[instance]), len(self._waiting[instance]),
                            self.kv_utilization[instance], 0, 1000)

    # ----- driver -------------------------------------------------------------------------
    def run(self) -> None:
        while self._events:
            t, _, cb = heapq.heappop(self._events)
            self.now_ns = t
            cb()

    def _try_start(self, instance: int) -> None:
        waiting = self._waiting[instance]
        while waiting and len(self._running[instance]) < self.slots:
            waiting.sort(key=lambda r: (r.q, r.arrival_ns, r.request_id))
            req = waiting.pop(0)
            req.first_scheduled_ns = self.now_ns
            self._running[instance].append(req)
            self.schedule(self.now_ns + self.service_ns(req.call),
                          lambda req=req: self._finish(req))

    def _finish(self, req: _Req) -> None:
        self._running[req.instance].remove(req)
        call = req.call
        info = CallInfo(req.request_id, call.owner, req.instance, req.arrival_ns,
                        call.prompt_tokens, call.prompt_tokens + call.output_tokens,
                        req.first_scheduled_ns, self.now_ns)
        self.on_request_finished(info)
        decision = self.hooks.retention.on_complete(info, self.now_ns,
                                                    self.kv_utilization[req.instance])
        self.completion_decisions.append((req.request_id, self.now_ns, decision))
        if decision.kind == "protect":
            self.hooks.residency.on_residency(call.owner, req.instance, info.context_tokens,
                                              True, self.now_ns)
        self._try_start(req.instance)

    @staticmethod
    def _info(request_id, call, instance, now):
        return CallInfo(request_id, call.owner, instance, now, call.prompt_tokens,
                        call.prompt_tokens)


def make_program(pid: int, arrival_ns: int, calls: list[tuple], session: str | None = None):
    """calls: (prompt_tokens, output_tokens, tool_duration_ns, tool_name) per call."""
    specs = [CallSpec(owner=pid, call_index=k, prompt_tokens=p, output_tokens=o,
                      tool_duration_ns=g, tool_name=tool, tokens=object())
             for k, (p, o, g, tool) in enumerate(calls)]
    return ProgramSpec(program_id=pid, session_id=session or f"s{pid}", arrival_ns=arrival_ns,
                       calls=specs)


def build(programs, *, retention="cache-lru", scheduling="fcfs", routing="round-robin",
          num_instances=1, service_ns=lambda call: S, slots=1, kv_utilization=None,
          base_dir=None):
    """(cluster, orchestrator) wired like a run: policies by spec or instance."""
    from pathlib import Path

    from program_layer.dispatch import DispatchPlane
    from program_layer.orchestrator import Orchestrator
    from program_layer.policies import load_policy
    from program_layer.program_hooks import ProgramHooks
    from program_layer.retention import RetentionPlane

    base = Path(base_dir) if base_dir else Path(__file__).resolve().parents[2]

    def pol(axis, spec):
        return load_policy(axis, spec, base_dir=base) if isinstance(spec, (str, dict)) else spec

    hooks = ProgramHooks()
    cluster = FakeCluster(num_instances, hooks.as_hooks(), service_ns=service_ns, slots=slots,
                          kv_utilization=list(kv_utilization or []))
    dispatch = DispatchPlane(pol("routing", routing), pol("scheduling", scheduling),
                             num_instances)
    retention_plane = RetentionPlane(pol("retention", retention))
    orch = Orchestrator(cluster, programs, dispatch, retention_plane, hooks)
    return cluster, orch
