"""Shared by the Dispatch and Retention Planes: decision checks and PolicyError formatting."""
from __future__ import annotations

import math
import numbers

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


def describe_exception(exc: BaseException) -> str:
    if isinstance(exc, InvalidDecision):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def as_int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidDecision(f"{what} must be an int, got {value!r} "
                              f"({type(value).__name__})")
    return int(value)


def as_finite(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidDecision(f"{what} must be a number, got {value!r} "
                              f"({type(value).__name__})")
    v = float(value)
    if not math.isfinite(v):
        raise InvalidDecision(f"{what} must be finite, got {v!r}")
    return v
