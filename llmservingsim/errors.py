"""One error type for everything a user can get wrong.

Bad input must stop the run with one clear message naming where the problem is (file, line,
key; or policy, program, call and simulated time), never a traceback from deep inside.
The CLI prints ``str(error)`` and exits with status 2.
"""
from __future__ import annotations

from typing import Optional


class SimError(Exception):
    """A user-facing error. ``where`` is a file path (optionally with line) or a config key."""

    def __init__(self, message: str, *, file: Optional[str] = None, line: Optional[int] = None,
                 key: Optional[str] = None):
        self.message = message
        self.file = file
        self.line = line
        self.key = key
        super().__init__(self.__str__())

    def __str__(self) -> str:
        where = []
        if self.file:
            where.append(f"{self.file}:{self.line}" if self.line else str(self.file))
        if self.key:
            where.append(f"key '{self.key}'")
        prefix = ", ".join(where)
        return f"{prefix}: {self.message}" if prefix else self.message


class ConfigError(SimError):
    """A configuration file or value is wrong."""


class WorkloadError(SimError):
    """A workload file is wrong."""


class ProfileError(SimError):
    """A profile bundle or hardware description is missing or malformed."""


class StuckError(SimError):
    """The simulation cannot make progress (e.g. a request that can never fit)."""


class PolicyError(SimError):
    """A user policy raised or returned an invalid decision."""


def parse_yaml(text: str, *, file: Optional[str], error: type = ConfigError, problem: str = "invalid YAML"):
    """``yaml.safe_load(text)``; a syntax error becomes one ``error`` naming the file and the
    line where the parser stopped (the one place YAML errors are turned into user errors)."""
    import yaml
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise error(f"{problem}: {getattr(exc, 'problem', exc)}", file=file,
                    line=(mark.line + 1) if mark else None) from None
