"""Field checks and timestamp parsing shared by the trace importers.

Every check raises ``WorkloadError(message, file=path, line=n)`` naming the offending field, so a
bad trace line stops the import with one clear message instead of a traceback.
"""
from __future__ import annotations

import calendar
import math
import re
from typing import Any

from llmservingsim.errors import ConfigError, WorkloadError, finite_number

_TS = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
                 r"(Z|[+-]\d{2}:?\d{2})?$")


def parse_timestamp_ns(text: str) -> int:
    """ISO-8601-like timestamp -> integer ns since the Unix epoch (UTC; no offset = UTC).

    Exact: the fraction (up to 9 digits, e.g. Azure's 7) is read as an integer, never a float.
    Raises ValueError for anything else.
    """
    m = _TS.match(text.strip()) if isinstance(text, str) else None
    if m is None:
        raise ValueError(f"not a timestamp: {text!r}")
    year, month, day, hour, minute, sec = (int(g) for g in m.groups()[:6])
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and sec < 61):
        raise ValueError(f"not a timestamp: {text!r}")
    seconds = calendar.timegm((year, month, day, hour, minute, sec, 0, 0, 0))
    frac = m.group(7) or ""
    ns = int(frac.ljust(9, "0")) if frac else 0
    tz = m.group(8)
    if tz and tz != "Z":
        sign = 1 if tz[0] == "+" else -1
        digits = tz[1:].replace(":", "")
        seconds -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return seconds * 1_000_000_000 + ns


def need(obj: dict, field: str, path: str, line: int) -> Any:
    """``obj[field]``, or WorkloadError naming the missing field."""
    if not isinstance(obj, dict) or field not in obj:
        raise WorkloadError(f"missing field {field!r}", file=path, line=line)
    return obj[field]


def need_int(obj: dict, field: str, path: str, line: int, *, minimum: int = 0) -> int:
    """``obj[field]`` as a non-negative (or >= ``minimum``) integer; integral floats accepted."""
    value = need(obj, field, path, line)
    return as_int(value, field, path, line, minimum=minimum)


def as_int(value: Any, field: str, path: str, line: int, *, minimum: int = 0) -> int:
    """``value`` as an int >= ``minimum`` (``12.0`` -> 12; ``"12"``, ``12.5``, ``True`` rejected)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and (not math.isfinite(value) or value != int(value))):
        raise WorkloadError(f"field {field!r} must be an integer, got {value!r}",
                            file=path, line=line)
    value = int(value)
    if value < minimum:
        raise WorkloadError(f"field {field!r} must be >= {minimum}, got {value}",
                            file=path, line=line)
    return value


def need_timestamp(value: Any, field: str, path: str, line: int) -> int:
    """A timestamp string as ns since the epoch, or WorkloadError naming the field."""
    try:
        return parse_timestamp_ns(value)
    except ValueError:
        raise WorkloadError(f"field {field!r} is not a timestamp: {value!r}",
                            file=path, line=line) from None


def check_time_scale(time_scale: float) -> float:
    """``time_scale`` must be a positive finite number (key ``workload.time_scale``)."""
    if not finite_number(time_scale) or time_scale <= 0:
        raise ConfigError(f"must be a positive number, got {time_scale!r}",
                          key="workload.time_scale")
    return float(time_scale)


MAX_IDLE_S = 600.0     # default: an idle stretch longer than this is shortened to it


def check_max_idle_s(max_idle_s: float) -> float:
    """``max_idle_s`` must be a positive finite number of seconds (key ``workload.max_idle_s``)."""
    if not finite_number(max_idle_s) or max_idle_s <= 0:
        raise ConfigError(f"must be a number of seconds > 0, got {max_idle_s!r}", key="workload.max_idle_s")
    return float(max_idle_s)


def check_limit(limit: int | None) -> int | None:
    """``limit`` must be None or a positive integer (key ``workload.limit``)."""
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigError(f"must be a positive integer, got {limit!r}", key="workload.limit")
    return limit


def scaled_ns(delta_ns: int, time_scale: float) -> int:
    """``delta_ns * time_scale`` rounded to an integer (exact when ``time_scale == 1``)."""
    return delta_ns if time_scale == 1.0 else int(round(delta_ns * time_scale))
