"""Shared by the Dispatch and Retention Planes: decision checks and PolicyError formatting.

Policy code runs only inside the planes' ``try`` blocks (dispatch.py: ``select``, ``priority``;
retention.py: ``on_turn_complete``, ``on_turn_arrival``, ``eviction_key``; also the
``signals`` assignment, which a policy may intercept). Anything escaping them, any
``BaseException`` (``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit`` included), is the
policy's failure and becomes one ``PolicyError`` naming policy, program, call and time, except
a genuine interrupt of the run (``is_interrupt``): a Ctrl-C or SIGTERM that happened to arrive
while policy code ran must still stop the run as an interrupt.

Telling the two apart: Python raises the same KeyboardInterrupt for a Ctrl-C as for
``raise KeyboardInterrupt``. While a simulation runs (``signals_recorded``, entered by
``Simulation.run``) the process's own SIGINT/SIGTERM handlers are wrapped so that whatever
they raise is marked; an unmarked KeyboardInterrupt then comes from the policy itself.
Nothing else about signal handling changes, and the original handlers are back afterwards.
"""
from __future__ import annotations

import contextlib
import math
import numbers
import signal
import threading

from llmservingsim.errors import PolicyError

from ..pcb import NS_PER_S
from .base import policy_label


class InvalidDecision(Exception):
    """A policy returned something the plane cannot use (turned into a PolicyError)."""


def policy_error(axis: str, policy: object, view, now_ns: int, detail: str) -> PolicyError:
    """One line naming the policy, the program, the call and the simulated time. ``view`` is
    the PCB view the policy was given, or a string naming the program when there is none."""
    detail = " ".join(str(detail).split())
    where = view if isinstance(view, str) else (
        f"program {view.session_id!r} call {view.call_index}")
    return PolicyError(f"{axis} policy {policy_label(policy)} failed for {where} at "
                       f"t={now_ns / NS_PER_S:.9f} s: {detail}", key=f"policies.{axis}")


def policy_failure(exc: BaseException, axis: str, policy: object, view, now_ns: int,
                   method: str) -> PolicyError:
    """The PolicyError for ``exc`` escaping ``policy.<method>`` (``policy_error``); a real
    interrupt (``is_interrupt``) is re-raised as it is instead. Use: ``except BaseException
    as exc: raise policy_failure(exc, ...) from exc``."""
    if is_interrupt(exc):
        raise exc
    return policy_error(axis, policy, view, now_ns, f"{method}: {describe_exception(exc)}")


def describe_exception(exc: BaseException) -> str:
    if isinstance(exc, InvalidDecision):
        return str(exc)
    name = type(exc).__name__
    if not isinstance(exc, Exception):      # SystemExit, KeyboardInterrupt, GeneratorExit
        args = f"({exc})" if str(exc) else ""
        return f"raised {name}{args}; a policy must return a decision, not exit or interrupt the run"
    return f"{name}: {exc}" if str(exc) else name


_MARK = "_agentservesim_signal"     # set on exceptions raised by a watched signal handler
_WATCHED = ("SIGINT", "SIGTERM")
_watching = 0                        # signals_recorded() blocks now active (main thread)


def _marking(handler):
    def marked(signum, frame):
        try:
            handler(signum, frame)
        except BaseException as exc:
            setattr(exc, _MARK, signum)
            raise
    return marked


@contextlib.contextmanager
def signals_recorded():
    """While inside: exceptions raised by the SIGINT and SIGTERM handlers installed now
    (Python's ``default_int_handler``, the CLI's SIGTERM handler) are marked as coming from a
    signal, so ``is_interrupt`` can tell a real Ctrl-C from a policy's own KeyboardInterrupt.
    Handlers that are not Python callables (ignored, default action) are left alone, and the
    originals are restored on exit. Off the main thread (where no handler runs) a no-op."""
    global _watching
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = []
    for name in _WATCHED:
        sig = getattr(signal, name, None)
        handler = signal.getsignal(sig) if sig is not None else None
        if callable(handler):
            signal.signal(sig, _marking(handler))
            saved.append((sig, handler))
    _watching += 1
    try:
        yield
    finally:
        _watching -= 1
        for sig, handler in reversed(saved):
            signal.signal(sig, handler)


def is_interrupt(exc: BaseException) -> bool:
    """Whether ``exc``, escaping policy code, interrupts the whole run (re-raise it as it is)
    rather than being the policy's failure (a PolicyError). True for what a signal handler
    raised inside ``signals_recorded``. An unmarked KeyboardInterrupt is the policy's own,
    except on the main thread outside ``signals_recorded``: there a Ctrl-C cannot be told
    apart, so it is let through (a policy may escape blame, a user's Ctrl-C is never blamed
    on a policy). Off the main thread no signal handler runs: it is the policy's."""
    if getattr(exc, _MARK, None) is not None:
        return True
    if isinstance(exc, KeyboardInterrupt):
        return _watching == 0 and threading.current_thread() is threading.main_thread()
    return False


def as_int(value, what: str) -> int:
    if type(value) is int:      # the usual answer: skip the ABC check
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidDecision(f"{what} must be an int, got {value!r} "
                              f"({type(value).__name__})")
    return int(value)


def as_finite(value, what: str) -> float:
    t = type(value)
    if t is float:              # the usual answers: skip the ABC check
        v = value
    elif t is int:
        v = float(value)
    else:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise InvalidDecision(f"{what} must be a number, got {value!r} "
                                  f"({type(value).__name__})")
        v = float(value)
    if not math.isfinite(v):
        raise InvalidDecision(f"{what} must be finite, got {v!r}")
    return v
