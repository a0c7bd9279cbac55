"""Shared helpers for the config readers: load a JSON/YAML mapping and pull typed keys.

Every failure raises :class:`~astrasim.errors.ConfigError` naming the file and the key.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..errors import ConfigError, parse_yaml


def load_json(path) -> dict:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read file: {e.strerror}", file=str(p)) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"invalid JSON: {e.msg}", file=str(p), line=e.lineno) from None
    if not isinstance(data, dict):
        raise ConfigError("top level must be a JSON object", file=str(p))
    return data


def load_yaml(path) -> dict:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read file: {e.strerror}", file=str(p)) from None
    data = parse_yaml(text, file=str(p))
    if not isinstance(data, dict):
        raise ConfigError("top level must be a mapping", file=str(p))
    return data


def get_number(data: dict, key: str, where: str, *, default: Any = None, integer: bool = False,
               minimum: float | None = None, required: bool = False):
    """``data[key]`` as int/float (bools rejected), checked against ``minimum``."""
    if key not in data:
        if required:
            raise ConfigError("required key is missing", file=where, key=key)
        return default
    v = data[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
        raise ConfigError(f"must be a number, got {v!r}", file=where, key=key)
    if integer:
        if isinstance(v, float) and not v.is_integer():
            raise ConfigError(f"must be an integer, got {v!r}", file=where, key=key)
        v = int(v)
    if minimum is not None and v < minimum:
        raise ConfigError(f"must be >= {minimum}, got {v!r}", file=where, key=key)
    return v


def get_choice(data: dict, key: str, where: str, choices: tuple[str, ...], default: str) -> str:
    if key not in data:
        return default
    v = data[key]
    if v not in choices:
        raise ConfigError(f"must be one of {', '.join(choices)}; got {v!r}", file=where, key=key)
    return v
