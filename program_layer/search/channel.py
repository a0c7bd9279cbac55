"""The narrow channel between the trusted simulator and an untrusted candidate policy process.

Wire format: each message is a 4-byte big-endian length followed by the payload. Requests
(trusted -> candidate) are ``marshal`` data: plain lists, numbers and strings, floats in
binary, 4-5x faster to build and read than JSON; only the candidate reads them, and it
trusts the simulator. Replies (candidate -> trusted) are compact JSON, parsed strictly and
size-limited: the trusted side never unmarshals anything the candidate wrote. Every number
crosses exactly (binary floats one way, ``repr`` the other). The trusted side sends only
plain data the causal boundary allows: a snapshot of exactly the fields ``PCBView``
exposes, the ``Signals`` / ``InflightLoad`` / ``EntryView`` fields a call receives, and
``now``. Tool-gap histories only grow, so they are sent as deltas
against what the candidate already holds (a view's ``_gaps`` / ``_own_gaps`` are rebuilt
there in the simulator's own ``ToolGapLog``, so they are the same kind of read-only mapping).

Requests (trusted -> candidate), marshalled lists:
    ["load", source, filename, class_name|null, axis|null, prefer|null]
    ["c", now, request_id, view, signals, gap_delta]       on_turn_complete
    ["a", now, view, signals, gap_delta]                    on_turn_arrival
    ["p", now, view, signals, gap_delta]                    priority
    ["s", now, view, inflight, gap_delta]                   select
    ["e", now, entry, view|null, gap_delta]                 eviction_key
    ["q"]                                                   quit
  view = [fields of VIEW_FIELDS..., own_gap_delta]; a delta is None (unchanged) or a list
  of [tool, keep, [new gaps]] (keep the first ``keep`` gaps of ``tool``, then append;
  keep = -1 drops the tool).

Replies (candidate -> trusted), JSON arrays decoded strictly by :func:`decode_reply`:
    ["r", value]             the method's return value (see :func:`encode_value`)
    ["x", detail, traceback] the method raised; detail is what the plane would have said
    ["i", info]              answer to "load": class_name, axis, engine_args, eviction_key
    ["f", detail, traceback] "load" failed (import error, syntax error, no policy class)
  and, before any of these, from the candidate's own start-up code (not the policy):
    ["w", pid] (the namespace's PID 1), ["ready", {isolation, detail}] or ["n", reason]
This module imports only the standard library: the candidate process loads it.
"""
from __future__ import annotations

import json
import marshal
import math
import numbers
import struct
from json.scanner import make_scanner
from operator import attrgetter
from typing import Optional

HEADER = struct.Struct(">I")
MAX_REPLY_BYTES = 1 << 20          # a decision is a few bytes; more is an attack
MAX_TEXT = 4000                    # error details and tracebacks are cut to this

VIEW_FIELDS = ("program_id", "session_id", "arrival_s", "call_index", "calls_completed",
               "attained_service_s", "prior_instance", "kv_protected", "kv_deadline_s",
               "kv_resident_tokens", "kv_instance", "kv_value", "tool_name", "gap_start_s",
               "_gap_end_s", "context_tokens", "release_s", "num_preemptions")
#: PCBView's constructor keywords for VIEW_FIELDS (the slot ``_gap_end_s`` is ``gap_end_s``)
VIEW_INIT_NAMES = tuple(f.lstrip("_") for f in VIEW_FIELDS)
SIGNAL_FIELDS = ("instance", "kv_utilization", "num_running", "num_waiting", "inflight_tokens",
                 "kv_used_tokens", "kv_pool_tokens", "running_context_tokens")
INFLIGHT_FIELDS = ("num_running", "num_waiting", "kv_utilization", "kv_used_tokens",
                   "kv_pool_tokens", "inflight_tokens", "role", "device", "gpus", "peak_tflops",
                   "memory_bandwidth_gbs", "decode_step_s", "prefill_step_s")
ENTRY_FIELDS = ("owner", "instance", "created_s", "deadline_s", "value", "num_blocks", "seq",
                "protected", "tier")

_view_values = attrgetter(*VIEW_FIELDS)
_signal_values = attrgetter(*SIGNAL_FIELDS)
_entry_values = attrgetter(*ENTRY_FIELDS)


def _plain_default(value):
    """Numbers from numpy (should the engine ever hand them over) become Python numbers."""
    item = getattr(value, "item", None)
    if callable(item):
        return item()
    raise TypeError(f"cannot send {type(value).__name__} to the candidate")


_encode = json.JSONEncoder(separators=(",", ":"), check_circular=False, allow_nan=True,
                           ensure_ascii=False, default=_plain_default).encode
_scan = make_scanner(json.JSONDecoder())
_pack = HEADER.pack


def frame(message) -> bytes:
    """A reply (candidate -> trusted): JSON."""
    data = _encode(message).encode("utf-8", "surrogatepass")
    return _pack(len(data)) + data


def unframe(data: bytes):
    """Parse a JSON reply; the whole payload must be one value."""
    text = data.decode("utf-8", "surrogatepass")
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        raise ValueError("empty or invalid JSON") from None
    if end != len(text):
        raise ValueError("extra data after the JSON value")
    return value


def _plain(value):
    t = type(value)
    if t is list or t is tuple:
        return [_plain(v) for v in value]
    if value is None or t in (str, int, float, bool):
        return value
    return _plain_default(value)


def request_frame(message) -> bytes:
    """A request (trusted -> candidate): marshal."""
    try:
        data = marshal.dumps(message)
    except ValueError:                       # e.g. a numpy number: make it plain
        data = marshal.dumps(_plain(message))
    return _pack(len(data)) + data


def request_unframe(data: bytes):
    return marshal.loads(data)


class ProtocolError(Exception):
    """A message that does not follow this protocol."""


def printable(text: str, keep_newlines: bool = False) -> str:
    """Text from the candidate as it may appear in a message or a log: control characters
    (terminal escapes, ...) become '?'."""
    return "".join(ch if ch.isprintable() or (keep_newlines and ch == "\n") else "?" for ch in text)


# ----- trusted side: snapshots -----------------------------------------------------------

class _GapSync:
    """What the candidate holds of one gap mapping (tool -> tuple of seconds)."""
    __slots__ = ("last", "sent")

    def __init__(self) -> None:
        self.last = None           # the mapping object last sent (snapshots are cached)
        self.sent: dict = {}       # tool -> number of gaps the candidate holds

    def delta(self, gaps) -> Optional[list]:
        if gaps is self.last:
            return None
        out, sent = [], self.sent
        for tool, values in gaps.items():
            have, n = sent.get(tool), len(values)
            if have != n:
                keep = min(have or 0, n)       # an older snapshot (shorter) truncates
                out.append([tool, keep, list(values[keep:])])
                sent[tool] = n
        if len(sent) != len(gaps):             # an older snapshot lacks a tool
            for tool in [t for t in sent if t not in gaps]:
                out.append([tool, -1, []])
                del sent[tool]
        self.last = gaps
        return out or None


class SnapshotEncoder:
    """Builds request messages on the trusted side; remembers what the candidate holds."""

    def __init__(self) -> None:
        self._gaps = _GapSync()
        self._own: dict = {}       # program id -> _GapSync

    def view(self, view) -> list:
        out = list(_view_values(view))
        own = self._own.get(view.program_id)
        if own is None:
            own = self._own[view.program_id] = _GapSync()
        out.append(own.delta(view._own_gaps))
        return out

    def gaps(self, view) -> Optional[list]:
        return self._gaps.delta(view._gaps)

    def complete(self, pcb, request_id, now, signals) -> bytes:
        return request_frame(["c", now, request_id, self.view(pcb), _signal_values(signals),
                              self.gaps(pcb)])

    def arrival(self, pcb, now, signals) -> bytes:
        return request_frame(["a", now, self.view(pcb), _signal_values(signals), self.gaps(pcb)])

    def priority(self, pcb, now, signals) -> bytes:
        return request_frame(["p", now, self.view(pcb), _signal_values(signals), self.gaps(pcb)])

    def select(self, pcb, inflight, now) -> bytes:
        return request_frame(["s", now, self.view(pcb), [tuple(x) for x in inflight],
                              self.gaps(pcb)])

    def eviction_key(self, entry, now) -> bytes:
        program = entry.program
        view = self.view(program) if program is not None else None
        gaps = self.gaps(program) if program is not None else None
        return request_frame(["e", now, _entry_values(entry), view, gaps])


# ----- candidate side: rebuilding what a policy sees -------------------------------------

class GapReplica:
    """The candidate's copy of one gap mapping, kept in the simulator's own ``ToolGapLog``
    (program_layer/pcb.py), so ``snapshot`` is the same kind of read-only mapping of
    histories the simulator's views hold. Gaps arrive in seconds and are re-added in
    nanoseconds; that round trip is exact for any gap below 2**51 ns (26 days) and checked."""
    __slots__ = ("values", "log", "snapshot", "_log_type")

    def __init__(self, log_type=None) -> None:
        if log_type is None:
            from program_layer.pcb import ToolGapLog as log_type
        self._log_type = log_type
        self.values: dict = {}          # tool -> gaps (s) as sent
        self.log = log_type()
        self.snapshot = self.log.snapshot()

    def apply(self, delta) -> None:
        rebuild = False
        for tool, keep, values in delta:
            have = self.values.get(tool)
            if keep < 0:
                if have is not None:
                    del self.values[tool]
                    rebuild = True
                continue
            if have is None:
                have = self.values[tool] = []
            if keep < len(have):            # an older snapshot: rebuild (never in practice)
                del have[keep:]
                rebuild = True
            have.extend(values)
            if not rebuild:
                for v in values:
                    self.log.add(tool, _gap_ns(v))
        if rebuild:
            self.log = self._log_type()
            for tool, values in self.values.items():
                for v in values:
                    self.log.add(tool, _gap_ns(v))
        self.snapshot = self.log.snapshot()


def _gap_ns(seconds: float) -> int:
    ns = round(seconds * 1_000_000_000)
    if ns / 1_000_000_000 != seconds:
        raise ValueError(f"a tool gap of {seconds!r} s cannot be carried exactly")
    return ns


# ----- candidate -> trusted: values ------------------------------------------------------

def encode_value(value, depth: int = 0):
    """A policy's return value as plain JSON data: str, int, float, bool, None as they are,
    a tuple as an array, a list as {"l": [...]}, any other number as int/float, anything
    else as {"o": repr, "y": type name} (the plane rejects it with the same message)."""
    t = type(value)
    if value is None or t is str or t is int or t is float or t is bool:
        return value
    if t is tuple and depth < 3:
        return [encode_value(v, depth + 1) for v in value]
    if t is list and depth < 3:
        return {"l": [encode_value(v, depth + 1) for v in value]}
    if isinstance(value, str):
        return str(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return {"o": repr(value)[:300], "y": t.__name__[:80]}


class _Opaque:
    """Stands in for a value the candidate returned that plain data cannot carry."""
    __slots__ = ()


_opaque_types: dict = {}


def _opaque(text: str, name: str):
    if not name.isidentifier():
        name = "object"
    cls = _opaque_types.get(name)
    if cls is None:
        if len(_opaque_types) > 256:
            _opaque_types.clear()
        cls = _opaque_types[name] = type(name, (_Opaque,), {"__slots__": ("_text",),
                                                             "__repr__": lambda self: self._text})
    obj = cls()
    object.__setattr__(obj, "_text", text)
    return obj


def decode_value(data, depth: int = 0):
    """Inverse of :func:`encode_value`, strict: anything else is a ProtocolError."""
    t = type(data)
    if data is None or t is str or t is int or t is float or t is bool:
        return data
    if depth >= 4:
        raise ProtocolError("value nested too deeply")
    if t is list:
        return tuple(decode_value(v, depth + 1) for v in data)
    if t is dict:
        if data.keys() == {"l"} and type(data["l"]) is list:
            return [decode_value(v, depth + 1) for v in data["l"]]
        if data.keys() == {"o", "y"} and type(data["o"]) is str and type(data["y"]) is str:
            return _opaque(printable(data["o"][:300]), data["y"][:80])
    raise ProtocolError(f"unexpected value of JSON type {t.__name__}")


def decode_reply(data: bytes):
    """(kind, payload...) from a candidate's reply, checked for shape; ProtocolError else."""
    try:
        msg = unframe(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ProtocolError(f"reply is not JSON ({type(exc).__name__})") from None
    if type(msg) is not list or not msg or type(msg[0]) is not str:
        raise ProtocolError("reply is not a tagged array")
    kind = msg[0]
    if kind == "r" and len(msg) == 2:
        return kind, decode_value(msg[1])
    if kind in ("x", "f") and len(msg) == 3 and type(msg[1]) is str and type(msg[2]) is str:
        return kind, printable(" ".join(msg[1].split())[:MAX_TEXT]), printable(msg[2][-MAX_TEXT:], True)
    if kind == "i" and len(msg) == 2 and type(msg[1]) is dict:
        return kind, msg[1]
    raise ProtocolError(f"unexpected reply {kind[:20]!r}")


def check_info(info: dict, axis: Optional[str]) -> dict:
    """The "load" answer, validated: class name an identifier, axis one of the three,
    engine_args a mapping of str to plain scalars, eviction_key a bool."""
    name, got = info.get("class_name"), info.get("axis")
    if type(name) is not str or not name.isidentifier() or len(name) > 200:
        raise ProtocolError("class name is not an identifier")
    if got not in ("retention", "scheduling", "routing") or (axis and got != axis):
        raise ProtocolError(f"unexpected axis {str(got)[:40]!r}")
    args = info.get("engine_args")
    if type(args) is not dict or len(args) > 64 or not all(
            type(k) is str and (v is None or type(v) in (str, int, float, bool)) and
            (type(v) is not float or math.isfinite(v)) for k, v in args.items()):
        raise ProtocolError("engine_args must map names to plain values")
    if type(info.get("eviction_key")) is not bool:
        raise ProtocolError("eviction_key flag is not a bool")
    return {"class_name": name, "axis": got, "engine_args": args,
            "eviction_key": info["eviction_key"]}


def describe_error(exc: BaseException) -> str:
    """One line naming the failure; MemoryError is spelled out because its message is empty."""
    if isinstance(exc, MemoryError):
        return "MemoryError: memory limit exceeded"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
