"""Run one policy on one cell in a fresh, resource-limited process: the trusted side.

    python -m program_layer.search.worker REQUEST.json RESULT.json

REQUEST.json (written by :mod:`program_layer.search.sandbox`)::

    {"cell": "/abs/cell.yaml", "axis": "retention" | null, "policy": "NAME" | "/abs/f.py[:Class]",
     "out_dir": "/abs/run", "memory_mb": 8192, "runner": "program_layer.run:run_config",
     "prefer_class": "EvolvedRetention" | null, "timeout_s": 600, "decision_timeout_s": 1.0,
     "isolation": "auto" | "namespaces" | "fallback", "max_processes": 0}

RESULT.json is always written unless the process is killed::

    {"status": "ok", "axis": ..., "class_name": ..., "summary": {...}, "isolation": ..., "channel": {...}}
    {"status": "error" | "timeout", "error": "PolicyError: ...", "traceback": "...", ...}

This process runs the simulator and writes the result; it never executes the policy. A
policy file (untrusted: LLM-written) runs in its own confined process started here
(program_layer/search/proxy.py, candidate.py; docs/security.md); the simulator calls it
through a proxy policy over a pipe. Built-in policies are trusted code and run here.
The memory limit is an address-space limit (RLIMIT_AS) on this process; the candidate
process has its own hard limits. The parent enforces the wall-time limit by killing the
process group (the candidate process dies with this one).
"""
from __future__ import annotations

import json
import os
import resource
import sys
import time
import traceback
from pathlib import Path

from program_layer.search.channel import MAX_TEXT, describe_error

DEFAULT_RUNNER = "program_layer.run:run_config"


MAX_FILE_BYTES = 512 << 20     # run outputs are a few MB


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


def start_candidate(request: dict):
    """Start the confined candidate process for a policy file (None for a built-in): first
    thing, so that its start overlaps loading the simulator."""
    from program_layer.search import axes, proxy, sandbox
    spec = axes.parse_policy_spec(request["policy"])
    if spec.is_builtin:
        return spec, None
    timeout_s = float(request.get("timeout_s") or sandbox.DEFAULT_TIMEOUT_S)
    process = proxy.CandidateProcess(
        memory_mb=request.get("memory_mb"), cpu_s=timeout_s,
        decision_timeout_s=float(request.get("decision_timeout_s") or sandbox.DEFAULT_DECISION_TIMEOUT_S),
        isolation=request.get("isolation") or "auto", max_processes=int(request.get("max_processes") or 0))
    return spec, process.start()


def policy_source(spec) -> tuple[str, str]:
    """(source text, file name) of a policy file or of a module's file."""
    if spec.path is not None:
        return spec.path.read_text(), str(spec.path)
    import importlib.util
    found = importlib.util.find_spec(spec.module)
    if found is None or not found.origin or not found.origin.endswith(".py"):
        raise ImportError(f"cannot find the source of module {spec.module!r}")
    return Path(found.origin).read_text(), found.origin


def resolve_policy(request: dict, spec, process) -> tuple[str, str | None, str, dict | None]:
    """The request's policy as a config value. A policy file is executed in the candidate
    process, which finds its class. Returns (config value, class name or None, axis, class
    info or None)."""
    from program_layer.search import axes
    axis = request.get("axis")
    if spec.is_builtin:
        return spec.builtin, None, axis or axes.builtin_axis(spec.builtin), None
    source, filename = policy_source(spec)
    process.wait_ready()
    info = process.load(source, filename, spec.class_name, axis, request.get("prefer_class"))
    axis = axis or info["axis"]
    name = info["class_name"]
    value = f"{spec.path}:{name}" if spec.path is not None else f"{spec.module}:{name}"
    return value, name, axis, info


def _proxy_factory(process, info: dict, axis: str, value: str):
    from program_layer.policies.loader import construction_error
    from program_layer.search import proxy

    def factory():
        init = info.get("init_error")
        if init is not None:     # the loader's own wording
            raise construction_error(axis, value, *init, key=f"policies.{axis}")
        return proxy.make_proxy(process, info)
    return factory


def run_request(request: dict, spec, process) -> dict:
    """Load the cell, put the policy on its axis, run the simulator; return the result dict.
    Exceptions propagate (the caller turns them into an error result)."""
    from program_layer.policies.loader import substituted
    from program_layer.search import axes

    value, class_name, axis, info = resolve_policy(request, spec, process)
    cell_path = Path(request["cell"])
    runner_spec = request.get("runner") or DEFAULT_RUNNER
    config = _load_cell(cell_path, validate=runner_spec == DEFAULT_RUNNER)
    policies = dict(config.get("policies") or {})
    policies[axis] = value
    config["policies"] = policies
    runner = axes.import_object(runner_spec)
    if info is None:
        summary = runner(config, request["out_dir"], base_dir=str(cell_path.parent), quiet=True)
    else:
        with substituted(axis, value, _proxy_factory(process, info, axis, value)):
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


def _error_result(exc: BaseException, process) -> dict:
    from program_layer.search import proxy
    cause = exc.__cause__
    if isinstance(exc, proxy.CandidateLoadError):
        error, tb = exc.detail, exc.traceback
    elif isinstance(exc, proxy.CandidateStartError):
        error, tb = f"isolation: {exc}", ""
    else:
        error, tb = describe_error(exc), traceback.format_exc(limit=-8)
        if isinstance(cause, proxy.CandidateRaised) and process is not None and process.last_traceback:
            tb = process.last_traceback
    timed_out = isinstance(cause, proxy.DecisionTimeout) or error.startswith("timeout:")
    if timed_out and not error.startswith("timeout:"):
        error = f"timeout: {error}"
    return {"status": "timeout" if timed_out else "error", "error": error, "traceback": tb[-MAX_TEXT:]}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m program_layer.search.worker REQUEST.json RESULT.json", file=sys.stderr)
        return 2
    request_path, result_path = argv
    with open(request_path) as f:
        request = json.load(f)
    started = time.perf_counter()
    import signal
    from program_layer.search import lockdown
    lockdown.not_dumpable()        # a candidate without namespaces runs as this user
    try:                           # no orphaned simulator when the evaluator dies
        lockdown.parent_death_signal(signal.SIGKILL, os.getppid())
    except OSError:
        pass
    process = spec = None
    try:
        spec, process = start_candidate(request)
        limit_memory(request.get("memory_mb"))
        result = run_request(request, spec, process)
    except BaseException as exc:  # noqa: BLE001 - every failure of user code must be reported
        result = _error_result(exc, process)
    finally:
        if process is not None:
            process.close()
    if process is not None:
        result["isolation"] = process.isolation or "none (not started)"
        result["isolation_detail"] = process.detail
        result["channel"] = {"decisions": process.decisions, "seconds": round(process.channel_s, 6)}
    result["wall_s"] = round(time.perf_counter() - started, 4)
    tmp = result_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, result_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
