"""Program Orchestrator (paper §3.2): one PCB per live program; releases calls by eq. 2.

    r_{p,0} = a_p,    r_{p,k+1} = c_{p,k} + g_{p,k}

At a program's arrival the Orchestrator creates its PCB and releases call 0. Releasing call k:
update the PCB (position, release time, prompt context; the tool gap that just ended becomes
an observation), dispatch (routing, then priority: ``DispatchPlane.decide``), then
``cluster.submit(instance, call, request_id)`` with request ids 0, 1, 2, ... in release order
(deterministic because the event queue is). At completion (``cluster.on_request_finished``,
which the engine calls before it asks the retention hook) the PCB gets the call's service
(eq. 3: completion - first admission), its context (prompt + output) and tool state (the tool
entered, gap start = completion); a per-call record is kept; a successor is scheduled at
c + g with g the call's ``tool_duration_ns``.

The Orchestrator owns and is the only writer of the PCBs (``apply_*``), the tool-gap log,
the in-flight map and the records. Policies never see the Orchestrator or the workload.
"""
from __future__ import annotations

import functools
import itertools
from collections import namedtuple
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from hooks import CallInfo, RetentionDecision
from llmservingsim.errors import WorkloadError
from llmservingsim.frozen import maker

from .dispatch import DispatchPlane
from .pcb import PCBView, ProgramControlBlock, ToolGapLog
from .policies.base import InflightLoad, Signals
from .program_hooks import ProgramHooks
from .retention import RetentionPlane

__all__ = ["Orchestrator", "CallRecord", "ProgramResult"]


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One completed call (times in ns). ``queue_delay_ns`` is release -> first admission."""
    program_id: int
    session_id: str
    call_index: int
    request_id: int
    instance: int
    priority: int
    release_ns: int
    first_scheduled_ns: int
    completion_ns: int
    service_ns: int                 # C_{p,k} of eq. 3
    prompt_tokens: int
    output_tokens: int
    context_tokens: int
    tool_name: Optional[str]
    tool_duration_ns: int
    num_preemptions: int

    @property
    def queue_delay_ns(self) -> int:
        return self.first_scheduled_ns - self.release_ns


@dataclass(frozen=True, slots=True)
class ProgramResult:
    """One program's outcome; ``completion_ns`` is None while it is unfinished."""
    program_id: int
    session_id: str
    arrival_ns: int
    completion_ns: Optional[int]
    num_calls: int
    calls_completed: int
    num_preemptions: int
    attained_service_ns: int

    @property
    def jct_ns(self) -> Optional[int]:
        return None if self.completion_ns is None else self.completion_ns - self.arrival_ns


#: A released call not yet finished: its program, instance and the priority it ran with
#: (internal; a tuple because one is made per call)
_InFlight = namedtuple("_InFlight", ["program_id", "call_index", "instance", "priority", "release_ns"])

#: positional constructors (several per call; llmservingsim/frozen.py)
_make_record = maker(CallRecord)
_make_signals = maker(Signals)

#: InflightLoad's static tail when the cluster gives no facts (its defaults)
_NO_FACTS = tuple(InflightLoad._field_defaults[f] for f in InflightLoad._fields[6:])


class Orchestrator:
    """Owns: PCBs (by program id), the tool-gap log, in-flight calls, call records."""

    def __init__(self, cluster: Any, programs: Sequence[Any], dispatch: DispatchPlane,
                 retention: RetentionPlane, hooks: ProgramHooks):
        self.cluster = cluster
        self.dispatch = dispatch
        self.retention = retention
        self._programs = list(programs)
        self._specs = _validated(self._programs)
        self._pcbs: dict[int, ProgramControlBlock] = {}
        self._gaps = ToolGapLog()
        self._in_flight: dict[int, _InFlight] = {}
        self._records: list[CallRecord] = []
        # owner -> (now_ns, instance, gap snapshot, view): the last view made, handed out
        # again while the PCB, the time and the gap log are unchanged (see ``view``)
        self._views: dict[int, tuple] = {}
        self._facts_seen = None
        self._tails: Optional[list] = None
        self._next_request_id = 0
        self._num_done = 0
        self._started = False
        cluster.on_request_finished = self.on_request_finished
        cluster.finish_listener_quiet = self.finish_is_quiet
        hooks.bind(self, retention)

    # ----- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        """Schedule every program's arrival (list order breaks ties at equal times)."""
        if self._started:
            raise RuntimeError("Orchestrator.start() called twice")
        self._started = True
        for spec in self._programs:
            self.cluster.schedule(spec.arrival_ns, functools.partial(self._arrive, spec))

    def programs_done(self) -> bool:
        return self._num_done == len(self._programs)

    @property
    def num_programs_done(self) -> int:
        return self._num_done

    def program_results(self) -> list[ProgramResult]:
        """One result per program, in workload order."""
        out = []
        for spec in self._programs:
            pcb = self._pcbs.get(spec.program_id)
            out.append(ProgramResult(
                program_id=spec.program_id, session_id=spec.session_id,
                arrival_ns=spec.arrival_ns,
                completion_ns=None if pcb is None else pcb.completion_ns,
                num_calls=len(spec.calls),
                calls_completed=0 if pcb is None else pcb.calls_completed,
                num_preemptions=0 if pcb is None else pcb.num_preemptions,
                attained_service_ns=0 if pcb is None else pcb.attained_service_ns))
        return out

    def call_records(self) -> list[CallRecord]:
        """Completed calls in completion order."""
        return list(self._records)

    # ----- events -------------------------------------------------------------------------
    def _arrive(self, spec: Any) -> None:
        self._pcbs[spec.program_id] = ProgramControlBlock(
            program_id=spec.program_id, session_id=spec.session_id, arrival_ns=spec.arrival_ns)
        self._release(spec.program_id, 0)

    def _release(self, program_id: int, k: int) -> None:
        cluster = self.cluster
        now = cluster.now_ns
        call = self._specs[program_id].calls[k]
        pcb = self._pcbs[program_id]
        self._views.pop(program_id, None)
        gap = pcb.apply_release(k, now, call.prompt_tokens)
        if gap is not None:
            self._gaps.add(pcb.tool_name, gap)
        loads = [cluster.load(i) for i in range(cluster.num_instances)]
        make = InflightLoad._make
        inflight = tuple([make((load.num_running, load.num_waiting, load.kv_utilization,
                                load.kv_used_tokens, load.kv_pool_tokens, load.inflight_tokens)
                               + tail) for load, tail in zip(loads, self._fact_tails())])
        instance, q = self.dispatch.decide(
            functools.partial(self.view, program_id, now), inflight,
            lambda i: _signals(i, loads[i]), now)
        prefill = instance
        if type(instance) is tuple:     # roles: (prefill, decode); the call's KV ends on decode
            prefill, instance = instance
        if pcb.prior_instance != instance:     # the only field dispatch changes
            self._views.pop(program_id, None)
        pcb.apply_dispatch(instance)
        request_id = self._next_request_id
        self._next_request_id += 1
        self._in_flight[request_id] = _InFlight(program_id, k, instance, q, now)
        if prefill == instance:
            cluster.submit(instance, call, request_id)
        else:
            cluster.submit_pair(prefill, instance, call, request_id)

    def _fact_tails(self):
        """Per instance, InflightLoad's fields after the load: the dispatch plane's static
        facts padded with the defaults (all defaults without facts)."""
        facts = self.dispatch.facts
        if facts is None:
            return itertools.repeat(_NO_FACTS)
        if facts is not self._facts_seen:       # set once, while the run is built
            self._facts_seen = facts
            self._tails = [tuple(f) + _NO_FACTS[len(f):] for f in facts]
        return self._tails

    def on_request_finished(self, info: CallInfo) -> None:
        """Engine callback at a call's completion (before the retention hook runs)."""
        flight = self._in_flight.pop(info.request_id, None)
        if flight is None:
            raise RuntimeError(f"engine finished request {info.request_id}, which the "
                               f"Orchestrator never released")
        if info.first_scheduled_ns is None or info.completion_ns is None:
            raise RuntimeError(f"engine contract: request {info.request_id} finished without "
                               f"first_scheduled_ns/completion_ns")
        spec = self._specs[flight.program_id]
        call = spec.calls[flight.call_index]
        pcb = self._pcbs[flight.program_id]
        last = flight.call_index + 1 == len(spec.calls)
        service = info.completion_ns - info.first_scheduled_ns
        preemptions = int(getattr(info, "num_preemptions", 0) or 0)
        self._views.pop(flight.program_id, None)
        pcb.apply_completion(info.completion_ns, service, info.context_tokens, call.tool_name,
                             preemptions, last)
        self._records.append(_make_record(     # in field order (one per call)
            spec.program_id, spec.session_id, flight.call_index, info.request_id, info.instance,
            flight.priority, flight.release_ns, info.first_scheduled_ns, info.completion_ns,
            service, call.prompt_tokens, call.output_tokens, info.context_tokens,
            call.tool_name, call.tool_duration_ns, preemptions))
        if last:
            self._num_done += 1
        else:
            self.cluster.schedule(info.completion_ns + call.tool_duration_ns,
                                  functools.partial(self._release, spec.program_id,
                                                    flight.call_index + 1))

    def finish_is_quiet(self, request_id: int) -> bool:
        """Whether ``on_request_finished`` for this call only records it: the call is its
        program's last, so no successor is scheduled, and the callback reads nothing but its
        CallInfo (the PCB, the records and the done count are the Orchestrator's own)."""
        flight = self._in_flight.get(request_id)
        return flight is not None and flight.call_index + 1 == len(self._specs[flight.program_id].calls)

    # ----- used by ProgramHooks -----------------------------------------------------------
    def has_program(self, owner: int) -> bool:
        return owner in self._pcbs

    def view(self, owner: int, now_ns: int, instance: Optional[int] = None) -> PCBView:
        """``owner``'s PCB view at ``now_ns`` (``ProgramControlBlock.view``). Views are
        read-only, so the last one made is handed out again while nothing it shows can have
        changed: same time, same gap snapshot (the log's snapshot is one object until the
        next gap), no PCB change in between (every ``apply_*`` here drops it first), and KV
        fields that read the same on ``instance`` as placement-independently (the entry is
        there, or there is neither an entry nor resident KV anywhere)."""
        pcb = self._pcbs[owner]
        if instance is not None and (instance == pcb.kv_instance or not (
                pcb.kv_entry or pcb.kv_resident_tokens)):
            instance = None
        gaps = self._gaps.snapshot()
        last = self._views.get(owner)
        if last is not None and last[0] == now_ns and last[1] == instance and last[2] is gaps:
            return last[3]
        view = pcb.view(now_ns, gaps, instance)
        self._views[owner] = (now_ns, instance, gaps, view)
        return view

    def signals(self, instance: int, kv_utilization: Optional[float] = None) -> Signals:
        return _signals(instance, self.cluster.load(instance), kv_utilization)

    def priority_of(self, request_id: int) -> int:
        flight = self._in_flight.get(request_id)
        if flight is None:
            raise RuntimeError(f"priority asked for unknown request {request_id}")
        return flight.priority

    def on_retention_decision(self, owner: int, instance: int, decision: RetentionDecision,
                              at_completion: bool) -> None:
        self._views.pop(owner, None)
        self._pcbs[owner].apply_retention(decision.kind, instance, decision.deadline_ns,
                                          decision.value, at_completion)

    def on_residency_change(self, owner: int, instance: int, resident_tokens: int,
                            protected: bool) -> None:
        self._views.pop(owner, None)
        self._pcbs[owner].apply_residency(instance, resident_tokens, protected)


def _signals(instance: int, load: Any, kv_utilization: Optional[float] = None) -> Signals:
    return _make_signals(     # in field order (several per call)
        instance, load.kv_utilization if kv_utilization is None else kv_utilization,
        load.num_running, load.num_waiting, load.inflight_tokens, load.kv_used_tokens,
        load.kv_pool_tokens, load.running_context_tokens)


def _validated(programs: Sequence[Any]) -> dict[int, Any]:
    """Program id -> spec, after the checks eq. 2 relies on (WorkloadError otherwise)."""
    specs: dict[int, Any] = {}
    for spec in programs:
        where = f"program {spec.session_id!r} (id {spec.program_id})"
        if spec.program_id in specs:
            raise WorkloadError(f"{where}: duplicate program id")
        if not spec.calls:
            raise WorkloadError(f"{where}: has no calls")
        if spec.arrival_ns < 0:
            raise WorkloadError(f"{where}: negative arrival time")
        for k, call in enumerate(spec.calls):
            if call.owner != spec.program_id or call.call_index != k:
                raise WorkloadError(f"{where}: call {k} has owner {call.owner} and index "
                                    f"{call.call_index}; expected {spec.program_id} and {k}")
            if call.tool_duration_ns < 0:
                raise WorkloadError(f"{where}: call {k} has a negative tool duration")
        specs[spec.program_id] = spec
    return specs
