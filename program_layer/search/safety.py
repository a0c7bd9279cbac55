"""Static check of a candidate policy file before it is run (LLM-written code is untrusted).

The child process that runs a candidate also runs the simulator and reports its result, so
anything the candidate could do in that process (reach the Orchestrator through stack frames
or the garbage collector, rewrite the simulator, forge the result file, fork, write files)
would defeat the evaluator. A policy needs none of that: it reads the PCB view, the signals
and the time, does arithmetic and keeps its own state. So a candidate may only:

- import from ``ALLOWED_MODULES`` (plain computation) and ``program_layer.policies``;
- use names and attributes that are not dunder (``__x``), except ``__init__``/``__name__``
  (so no ``().__class__.__base__.__subclasses__()`` and no frame objects);
- call none of ``FORBIDDEN_CALLS`` (reflection, dynamic code, I/O).
Anything else is rejected before running, with the offending line; the candidate scores 0.
The causal observation boundary for ordinary users is an API contract (the PCB view); this
check is what enforces it for the search.
"""
from __future__ import annotations

import ast
from pathlib import Path

ALLOWED_MODULES = {"math", "statistics", "collections", "heapq", "bisect", "functools", "itertools",
                   "typing", "dataclasses", "__future__", "program_layer.policies", "abc", "enum"}
FORBIDDEN_CALLS = {"open", "exec", "eval", "compile", "getattr", "setattr", "delattr", "globals",
                   "locals", "vars", "__import__", "breakpoint", "input", "memoryview", "dir", "help",
                   "exit", "quit"}
ALLOWED_DUNDERS = {"__init__", "__name__", "__future__"}


class UnsafeCandidate(Exception):
    """The candidate file uses something a policy must not."""


def check_policy_file(path: str | Path) -> None:
    """Raise :class:`UnsafeCandidate` naming the first forbidden construct and its line."""
    path = Path(path)
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except SyntaxError as exc:
        raise UnsafeCandidate(f"syntax error at line {exc.lineno}: {exc.msg}") from None
    for node in ast.walk(tree):
        line = getattr(node, "lineno", "?")
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name not in ALLOWED_MODULES:
                    raise UnsafeCandidate(f"line {line}: import of '{alias.name}' is not allowed "
                                          f"(allowed: {', '.join(sorted(ALLOWED_MODULES))})")
        elif isinstance(node, ast.ImportFrom):
            if node.level or node.module not in ALLOWED_MODULES:
                raise UnsafeCandidate(f"line {line}: import from '{node.module}' is not allowed")
        elif isinstance(node, ast.Attribute) and _dunder(node.attr):
            raise UnsafeCandidate(f"line {line}: attribute '{node.attr}' is not allowed")
        elif isinstance(node, ast.Name) and _dunder(node.id):
            raise UnsafeCandidate(f"line {line}: name '{node.id}' is not allowed")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
            raise UnsafeCandidate(f"line {line}: call of '{node.func.id}' is not allowed")
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            raise UnsafeCandidate(f"line {line}: global/nonlocal statements are not allowed")


def _dunder(name: str) -> bool:
    return name.startswith("__") and name not in ALLOWED_DUNDERS
