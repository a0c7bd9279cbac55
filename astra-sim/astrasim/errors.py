"""astrasim's own error types: every bad input (config file, workload file, unmatched
collective) raises one of these with a message naming the file and key (or rank and node id),
never a deep traceback. astrasim depends on nothing of the serving engine, so these are its
own; a program embedding astrasim catches :class:`AstraSimError` (the engine maps each one
to its own error of the same name, ``llmservingsim.errors.from_astrasim``).

Invariant: ``str(error)`` is ``"<file>[:<line>], key '<key>': <message>"`` with the parts
that are known, the format the engine's errors use, so both read the same to a user.
"""
from __future__ import annotations

from typing import Optional

import yaml


class AstraSimError(Exception):
    """A user-facing error of the system simulator; ``file``/``line``/``key`` say where."""

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


class ConfigError(AstraSimError):
    """A configuration file or value (network, system, memory, comm groups) is wrong."""


class WorkloadError(AstraSimError):
    """A workload (Chakra graph) is wrong: a bad node, an unmatched collective or send."""


class StuckError(AstraSimError):
    """The simulation cannot make progress (a dependency cycle, a receive never sent)."""


def parse_yaml(text: str, *, file: Optional[str], error: type = ConfigError, problem: str = "invalid YAML",
               aliases: bool = False):
    """``yaml.safe_load(text)``; a syntax error becomes one ``error`` naming the file and the
    line where the parser stopped, as do a value its constructors refuse and nesting too deep
    for the recursive parser. Unless ``aliases``, aliases (``*name``) are refused: no ASTRA-Sim
    config needs them and a few aliased lines can expand to billions of values (a caller that
    allows them must bound their expansion itself, as the engine's reader does)."""
    try:
        return yaml.load(text, Loader=yaml.SafeLoader if aliases else _NoAliases)
    except _AliasFound as exc:
        raise error(f"{problem}: aliases are not supported", file=file, line=exc.line) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise error(f"{problem}: {getattr(exc, 'problem', exc)}", file=file,
                    line=(mark.line + 1) if mark else None) from None
    except ValueError as exc:   # a constructor's: "2024-02-30" as a date, an int of 5000 digits
        raise error(f"{problem}: {exc}", file=file) from None
    except RecursionError:      # the parser recurses once per nesting level: "[[[[..." of any depth
        raise error(f"{problem}: nested too deeply", file=file) from None


class _AliasFound(Exception):
    def __init__(self, line: int):
        self.line = line


class _NoAliases(yaml.SafeLoader):
    """The safe loader, stopping at the first alias (its 1-based line in ``_AliasFound``)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise _AliasFound(self.peek_event().start_mark.line + 1)
        return super().compose_node(parent, index)
