"""Run one policy on one cell in a fresh, resource-limited process.

    python -m program_layer.search.worker REQUEST.json RESULT.json

REQUEST.json (written by :mod:`program_layer.search.sandbox`)::

    {"cell": "/abs/cell.yaml", "axis": "retention" | null, "policy": "NAME" | "/abs/f.py[:Class]",
     "out_dir": "/abs/run", "memory_mb": 8192, "runner": "program_layer.run:run_config",
     "prefer_class": "EvolvedRetention" | null}

RESULT.json is always written unless the process is killed::

    {"status": "ok", "axis": ..., "class_name": ..., "summary": {...}}
    {"status": "error", "error": "PolicyError: ...", "traceback": "..."}

The memory limit is an address-space limit (RLIMIT_AS) set before any user code runs, so a
candidate that allocates without bound gets a MemoryError (reported as an error) instead of
taking the machine down. The parent enforces the wall-time limit by killing the process group.
"""
from __future__ import annotations

import json
import os
import resource
import sys
import time
import traceback
from pathlib import Path

DEFAULT_RUNNER = "program_layer.run:run_config"


MAX_FILE_BYTES = 512 << 20     # run outputs are a few MB; a printing candidate stops here


def limit_memory(memory_mb: int | None) -> None:
    """Cap this process's address space (and, always, the size of any file it writes).
    A soft limit below the hard limit is all we may set."""
    _, fhard = resource.getrlimit(resource.RLIMIT_FSIZE)
    fsize = MAX_FILE_BYTES if fhard == resource.RLIM_INFINITY else min(MAX_FILE_BYTES, fhard)
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fhard))
    if not memory_mb:
        return
    limit = int(memory_mb) * 1024 * 1024
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def resolve_policy(request: dict) -> tuple[str, str | None, str]:
    """Turn the request's policy into a config value, loading (executing) a policy file to
    find its class. Returns (config value, class name or None, axis)."""
    from program_layer.search import axes

    policy, axis = request["policy"], request.get("axis")
    spec = axes.parse_policy_spec(policy)
    if spec.is_builtin:
        return spec.builtin, None, axis or axes.builtin_axis(spec.builtin)
    if spec.path is not None:
        module = axes.load_module_from_file(spec.path, "_search_candidate")
    else:
        import importlib
        module = importlib.import_module(spec.module)
    cls = axes.find_policy_class(module, spec.class_name, axis, prefer=request.get("prefer_class"))
    axis = axis or axes.axis_of_class(cls)
    value = f"{spec.path}:{cls.__name__}" if spec.path is not None else f"{spec.module}:{cls.__name__}"
    return value, cls.__name__, axis


def run_request(request: dict) -> dict:
    """Load the cell, put the policy on its axis, run the simulator; return the result dict.
    Exceptions propagate (the caller turns them into an error result)."""
    from program_layer.search import axes

    value, class_name, axis = resolve_policy(request)
    cell_path = Path(request["cell"])
    runner_spec = request.get("runner") or DEFAULT_RUNNER
    config = _load_cell(cell_path, validate=runner_spec == DEFAULT_RUNNER)
    policies = dict(config.get("policies") or {})
    policies[axis] = value
    config["policies"] = policies
    runner = axes.import_object(runner_spec)
    summary = runner(config, request["out_dir"], base_dir=str(cell_path.parent), quiet=True)
    return {"status": "ok", "axis": axis, "class_name": class_name, "summary": _plain(summary)}


def _load_cell(path: Path, *, validate: bool) -> dict:
    """The cell config: through the project's loader for the real simulator (errors name the
    file and key), as plain YAML for an injected test runner."""
    if validate:
        from program_layer.config import load_config
        return dict(load_config(str(path)))
    import yaml
    with open(path) as f:
        return yaml.safe_load(f) or {}


def _plain(value):
    """JSON-safe copy of a summary (numpy scalars become Python numbers)."""
    return json.loads(json.dumps(value, default=lambda v: v.item() if hasattr(v, "item") else str(v)))


def describe_error(exc: BaseException) -> str:
    """One line naming the failure; MemoryError is spelled out because its message is empty."""
    if isinstance(exc, MemoryError):
        return "MemoryError: memory limit exceeded"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m program_layer.search.worker REQUEST.json RESULT.json", file=sys.stderr)
        return 2
    request_path, result_path = argv
    with open(request_path) as f:
        request = json.load(f)
    started = time.perf_counter()
    try:
        limit_memory(request.get("memory_mb"))
        result = run_request(request)
    except BaseException as exc:  # noqa: BLE001 - every failure of user code must be reported
        tb = traceback.format_exc(limit=-8)
        result = {"status": "error", "error": describe_error(exc), "traceback": tb[-4000:]}
    result["wall_s"] = round(time.perf_counter() - started, 4)
    tmp = result_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, result_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
