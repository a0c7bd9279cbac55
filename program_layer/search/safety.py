"""Static check of a candidate policy file before it is run: an early, friendly error.

This is NOT the security boundary. A candidate runs in its own process, confined by the
operating system (namespaces, an empty read-only root, no network, hard limits, seccomp;
program_layer/search/candidate.py, docs/security.md), apart from the simulator that scores
it; whatever it does there cannot change the score of another candidate or write a file.
Python offers too many ways around an AST allow-list (``typing.sys``, frames of
generators, ...) for one to be a boundary. What this check does is tell an LLM-written
policy early, with the offending line, that it uses something a policy does not need. A
policy reads the PCB view, the signals and the time, does arithmetic and keeps its own
state, so it may only:

- import from ``ALLOWED_MODULES`` (plain computation) and ``program_layer.policies``;
- use names and attributes that are not dunder (``__x``), except ``__init__``/``__name__``
  (so no ``().__class__.__base__.__subclasses__()``), and none of ``FORBIDDEN_ATTRIBUTES``
  (modules and frames reached through other objects: ``typing.sys``, ``g.gi_frame``);
- call or name none of ``FORBIDDEN_CALLS`` (reflection, dynamic code, I/O), also not through
  an alias (``o = open``) unless the module binds that name itself.
Anything else is rejected before running, with the offending line; the candidate scores 0.
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
FORBIDDEN_ATTRIBUTES = {"sys", "modules", "builtins", "importlib", "os", "system", "popen",
                        "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code",
                        "tb_frame", "tb_next", "f_back", "f_globals", "f_locals", "f_builtins",
                        "f_code", "_getframe", "get_objects", "get_referrers", "get_referents"}


class UnsafeCandidate(Exception):
    """The candidate file uses something a policy must not."""


def check_policy_file(path: str | Path) -> None:
    """Raise :class:`UnsafeCandidate` naming the first forbidden construct and its line."""
    path = Path(path)
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except SyntaxError as exc:
        raise UnsafeCandidate(f"syntax error at line {exc.lineno}: {exc.msg}") from None
    bound = set()                   # names the module binds itself (then not an alias)
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            bound.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(n.name)
        elif isinstance(n, ast.arg):
            bound.add(n.arg)
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
        elif isinstance(node, ast.Attribute) and (_dunder(node.attr) or node.attr in FORBIDDEN_ATTRIBUTES):
            raise UnsafeCandidate(f"line {line}: attribute '{node.attr}' is not allowed")
        elif isinstance(node, ast.Name) and _dunder(node.id):
            raise UnsafeCandidate(f"line {line}: name '{node.id}' is not allowed")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
            raise UnsafeCandidate(f"line {line}: call of '{node.func.id}' is not allowed")
        elif (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in FORBIDDEN_CALLS
              and node.id not in bound):
            raise UnsafeCandidate(f"line {line}: name '{node.id}' is not allowed (an alias of a forbidden call)")
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            raise UnsafeCandidate(f"line {line}: global/nonlocal statements are not allowed")


def _dunder(name: str) -> bool:
    return name.startswith("__") and name not in ALLOWED_DUNDERS
