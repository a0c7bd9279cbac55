"""Program Control Block (paper §3.2) and the read-only view policies get.

``ProgramControlBlock`` is the program's persistent state across its calls. It is owned by the
Program Orchestrator and **only mutated by the Orchestrator** (``program_layer/orchestrator.py``),
through the ``apply_*`` methods below; nothing else calls them (a grep test enforces it).
All times inside are integer nanoseconds.

``PCBView`` is what a policy sees: a snapshot of the deployable part of the PCB at the time of
the policy call, holding only primitive values (seconds as floats) and read-only containers
that never change once the view is made (the gap histories: program_layer/gaps.py). Being
immutable, one view may be handed to several policy calls at the same simulated time while
nothing it shows changed (``Orchestrator.view``); its fields are always those a view made
for that call would have.
Causal observation boundary: the trace's future output lengths, future tool durations, the
number of remaining calls and the ``CallSpec`` objects are never stored in the PCB, so no
attribute, ``__dict__`` (there is none: ``__slots__``) or reference chain from a view can
reach them. Gaps become observations only when they are over (the successor's release).

``ToolGapLog`` (program_layer/gaps.py) is the run-wide record of observed tool gaps per tool
name (across all programs; what a deployed Continuum-style estimator sees); it is owned by the
Orchestrator too. Each PCB keeps its own one for ``own_tool_gap_history``. Both append in O(1)
and give views O(1) read-only snapshots, so building a view never costs O(calls).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

from llmservingsim.frozen import maker

from .gaps import NS_PER_S, ReadOnly, ToolGapLog

__all__ = ["ProgramControlBlock", "PCBView", "ToolGapLog", "NS_PER_S"]

_EMPTY: tuple = ()


def _s(ns: Optional[int]) -> Optional[float]:
    return None if ns is None else ns / NS_PER_S


@dataclass(slots=True)
class ProgramControlBlock:
    """Persistent state of one live program. Only mutated by the Orchestrator.

    Invariants: ``calls_completed <= call_index + 1``; ``attained_service_ns`` is the sum over
    completed calls of (completion - first admission), eq. 3; ``kv_deadline_ns`` is set only
    while the program owns a protected KV entry (``kv_entry``), on ``kv_instance``.
    """
    program_id: int
    session_id: str
    arrival_ns: int
    call_index: int = -1                    # the call released last (-1: none yet)
    calls_completed: int = 0
    release_ns: Optional[int] = None        # release time of call ``call_index``
    attained_service_ns: int = 0            # A_p, eq. 3
    prior_instance: Optional[int] = None    # instance of the most recently dispatched call
    context_tokens: int = 0                 # prompt at release; prompt + output at completion
    num_preemptions: int = 0
    # KV residency and protection (from retention decisions and the residency hook)
    kv_instance: Optional[int] = None
    kv_resident_tokens: int = 0
    kv_entry: bool = False                  # a protected entry exists (decision, then residency)
    kv_deadline_ns: Optional[int] = None
    kv_value: Optional[float] = None
    # tool state: the tool entered at the last completion, and its gap
    tool_name: Optional[str] = None
    gap_start_ns: Optional[int] = None
    gap_end_ns: Optional[int] = None        # set when the successor is released
    own_gaps: ToolGapLog = field(default_factory=ToolGapLog)   # this program's gaps only
    completion_ns: Optional[int] = None     # completion of the last call (program done)

    # ----- mutators: called only by the Orchestrator --------------------------------------
    def apply_release(self, call_index: int, now_ns: int, prompt_tokens: int) -> Optional[int]:
        """Call ``call_index`` is released at ``now_ns``; returns the gap that just ended
        (ns), or None for the first call."""
        self.call_index = call_index
        self.release_ns = now_ns
        self.context_tokens = prompt_tokens
        if self.gap_start_ns is None:
            return None
        gap = now_ns - self.gap_start_ns
        self.gap_end_ns = now_ns
        self.own_gaps.add(self.tool_name, gap)
        return gap

    def apply_dispatch(self, instance: int) -> None:
        self.prior_instance = instance

    def apply_completion(self, now_ns: int, service_ns: int, context_tokens: int,
                         tool_name: Optional[str], preemptions: int, last: bool) -> None:
        self.calls_completed += 1
        self.attained_service_ns += service_ns
        self.context_tokens = context_tokens
        self.num_preemptions += preemptions
        self.tool_name = tool_name
        self.gap_start_ns = now_ns
        self.gap_end_ns = None
        if last:
            self.completion_ns = now_ns

    def apply_retention(self, kind: str, instance: Optional[int], deadline_ns: int,
                        value: Optional[float], at_completion: bool) -> None:
        """A retention decision in engine terms (after the release-if-expired rule). At a
        completion the decision concerns the call's whole context on ``instance``; at an
        arrival it concerns the existing entry, wherever it is."""
        if at_completion and kind in ("protect", "release", "offload"):
            # released blocks go to the engine's LRU free queue: still cached until reused
            self.kv_instance = instance
            self.kv_resident_tokens = self.context_tokens
        if kind == "protect":
            self.kv_entry = True
            self.kv_deadline_ns = deadline_ns
            self.kv_value = value
        elif kind in ("release", "offload"):    # offload: the GPU blocks are released
            self._drop_entry()
        elif kind == "evict":
            self._drop_entry()
            self.kv_instance = None
            self.kv_resident_tokens = 0

    def apply_residency(self, instance: int, resident_tokens: int, protected: bool) -> None:
        if not protected and self.kv_instance is not None and instance != self.kv_instance:
            return      # a superseded entry on another instance went away; ours is untouched
        self.kv_instance = instance if resident_tokens > 0 or protected else None
        self.kv_resident_tokens = resident_tokens
        if not protected:
            self._drop_entry()
        else:
            self.kv_entry = True

    def _drop_entry(self) -> None:
        self.kv_entry = False
        self.kv_deadline_ns = None
        self.kv_value = None

    # ----- read-only snapshot ---------------------------------------------------------
    def view(self, now_ns: int, gaps: Mapping[Optional[str], tuple],
             instance: Optional[int] = None) -> "PCBView":
        """The policy-visible snapshot at ``now_ns``. With ``instance`` given, the KV fields
        describe residency on that instance only (a KV entry elsewhere is no help there)."""
        on_target = instance is None or instance == self.kv_instance
        entry = self.kv_entry and on_target
        deadline = self.kv_deadline_ns if entry else None
        return _new_view(       # PCBView.__slots__ order
            self.program_id, self.session_id, self.arrival_ns / NS_PER_S, self.call_index,
            self.calls_completed, self.attained_service_ns / NS_PER_S, self.prior_instance,
            bool(entry and deadline is not None and now_ns < deadline), _s(deadline),
            self.kv_resident_tokens if on_target else 0, self.kv_instance,
            self.kv_value if entry else None, self.tool_name, _s(self.gap_start_ns),
            _s(self.gap_end_ns), self.context_tokens, _s(self.release_ns), self.num_preemptions,
            gaps, self.own_gaps.snapshot())


class PCBView(ReadOnly):
    """Read-only, deployable view of a PCB for policies (times in seconds, floats).

    Attributes: program_id, session_id, arrival_s, call_index (the current call: released
    last), calls_completed, attained_service_s (A_p), prior_instance, kv_protected (an entry
    exists and now < deadline), kv_deadline_s, kv_resident_tokens, kv_instance, kv_value,
    tool_name (tool entered at the last completion), gap_start_s, context_tokens, release_s
    (current call's release time), num_preemptions.
    Methods: gap_elapsed_s(now), tool_gap_history(tool), own_tool_gap_history(tool).
    """
    __slots__ = ("program_id", "session_id", "arrival_s", "call_index", "calls_completed",
                 "attained_service_s", "prior_instance", "kv_protected", "kv_deadline_s",
                 "kv_resident_tokens", "kv_instance", "kv_value", "tool_name", "gap_start_s",
                 "_gap_end_s", "context_tokens", "release_s", "num_preemptions", "_gaps",
                 "_own_gaps")

    def __init__(self, *, program_id, session_id, arrival_s, call_index, calls_completed,
                 attained_service_s, prior_instance, kv_protected, kv_deadline_s,
                 kv_resident_tokens, kv_instance, kv_value, tool_name, gap_start_s,
                 gap_end_s, context_tokens, release_s, num_preemptions, gaps, own_gaps):
        _fill(self, (program_id, session_id, arrival_s, call_index, calls_completed,
                     attained_service_s, prior_instance, kv_protected, kv_deadline_s,
                     kv_resident_tokens, kv_instance, kv_value, tool_name, gap_start_s,
                     gap_end_s, context_tokens, release_s, num_preemptions, gaps, own_gaps))

    def gap_elapsed_s(self, now: float) -> Optional[float]:
        """Seconds since the program entered its current (or last) tool gap; frozen at the
        gap's length once the successor is released. None before the first completion."""
        if self.gap_start_s is None:
            return None
        end = self._gap_end_s if self._gap_end_s is not None else now
        return end - self.gap_start_s

    def tool_gap_history(self, tool: Optional[str]):
        """Observed gaps (s) of ``tool`` across all programs so far, oldest first: a read-only
        tuple-like sequence (``gaps.GapHistory``; ``()`` when there is none), O(1) to get."""
        return self._gaps.get(tool, _EMPTY)

    def own_tool_gap_history(self, tool: Optional[str]):
        """Observed gaps (s) of ``tool`` in this program so far, oldest first (as above)."""
        return self._own_gaps.get(tool, _EMPTY)

    def __repr__(self) -> str:
        return (f"PCBView(program_id={self.program_id}, session_id={self.session_id!r}, "
                f"call_index={self.call_index}, attained_service_s={self.attained_service_s})")


#: the slots' member descriptors in ``__slots__`` order: setting through them skips
#: ``ReadOnly.__setattr__`` and the lookup by name (a view is made for most policy calls)
_SETTERS = tuple(PCBView.__dict__[name].__set__ for name in PCBView.__slots__)


def _fill(view: PCBView, values: tuple) -> None:
    for put, value in zip(_SETTERS, values):
        put(view, value)


#: A PCBView of its values in ``__slots__`` order, positionally (what ``__init__`` takes by
#: name), without ``ReadOnly.__setattr__``: plain slot stores (llmservingsim/frozen.py; a
#: view is made for most policy calls)
_new_view = maker(PCBView, PCBView.__slots__)
