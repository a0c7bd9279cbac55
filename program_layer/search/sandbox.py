"""Run one policy on one cell in its own process, with a wall-time and a memory limit.

The child is ``python -m program_layer.search.worker``; it never shares memory with the
caller, so a simulator run that crashes the interpreter, hangs, or allocates without bound
costs one run, never the search. The worker runs the simulator; a policy file runs in a
further process of its own, confined by the operating system (namespaces, an empty
read-only root, hard limits, seccomp; docs/security.md), and is called over a pipe with a
per-decision deadline. Every outcome becomes a :class:`RunOutcome` with status
``ok`` | ``error`` | ``timeout``; ``error`` carries a one-line reason, ``isolation`` says how
the candidate was confined ("namespaces", or "fallback" where the platform has none).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

DEFAULT_TIMEOUT_S = 600.0       # per run; a target-cell run takes seconds (Appendix F allowed 90 min)
DEFAULT_MEMORY_MB = 8192        # a target-cell run peaks near 60 MiB RSS
DEFAULT_DECISION_TIMEOUT_S = 1.0  # per policy decision (a decision takes microseconds)

# Single-threaded numeric libraries: each thread pool reserves address space, which the
# RLIMIT_AS cap would otherwise count against the candidate.
_CHILD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "PYTHONHASHSEED": "0", "MPLBACKEND": "Agg"}


@dataclass
class RunOutcome:
    """Result of one sandboxed run. ``summary`` is the simulator's summary dict when ok."""
    status: str
    summary: dict = field(default_factory=dict)
    error: Optional[str] = None
    traceback: Optional[str] = None
    axis: Optional[str] = None
    class_name: Optional[str] = None
    wall_s: float = 0.0
    isolation: Optional[str] = None       # "namespaces" | "fallback" | None (built-in policy)
    isolation_detail: str = ""
    channel: dict = field(default_factory=dict)   # decisions, seconds spent in the channel

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def mean_jct_s(self) -> Optional[float]:
        jct = self.summary.get("jct_s") or {}
        return as_number(jct.get("mean"))


def as_number(value) -> Optional[float]:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if out == out else None   # NaN -> None


def repo_root() -> str:
    """The checkout the simulator runs from (put on the worker's and candidate's path)."""
    return str(Path(__file__).resolve().parents[2])


def run_policy(policy: str, cell: str | Path, *, axis: Optional[str] = None,
               timeout_s: float = DEFAULT_TIMEOUT_S, memory_mb: Optional[int] = DEFAULT_MEMORY_MB,
               runner: Optional[str] = None, work_dir: Optional[str | Path] = None,
               keep_outputs: bool = False, prefer_class: Optional[str] = None,
               decision_timeout_s: float = DEFAULT_DECISION_TIMEOUT_S, isolation: str = "auto",
               static_check: bool = True, max_processes: int = 0) -> RunOutcome:
    """Run ``policy`` (NAME or /abs/file.py[:Class]) on ``cell`` in a child process.
    ``prefer_class`` picks among several policy classes in a file given without a class.

    ``isolation``: "auto" (namespaces where the platform allows them, else the fallback,
    with a warning), "namespaces" (refuse to run without them) or "fallback".
    ``static_check`` False skips the early AST check (safety.py), which is a friendly error,
    not the boundary. ``max_processes`` is the candidate's RLIMIT_NPROC inside its PID
    namespace (0: it cannot fork; the fallback always uses 0).

    A successful run whose summary lacks a positive finite mean JCT is reported as an error
    (fitness would be undefined). The run folder is deleted unless ``keep_outputs``.
    """
    rejected = _static_check(policy) if static_check else None
    if rejected is not None:
        return RunOutcome("error", error=rejected)
    work_root = Path(work_dir) if work_dir else Path(tempfile.gettempdir())
    work_root.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix="eval-", dir=work_root))
    try:
        request = {"cell": str(Path(cell).resolve()), "axis": axis, "policy": policy,
                   "out_dir": str(run_dir / "out"), "memory_mb": memory_mb, "runner": runner,
                   "prefer_class": prefer_class, "timeout_s": timeout_s,
                   "decision_timeout_s": decision_timeout_s, "isolation": isolation,
                   "max_processes": max_processes}
        outcome = _run_child(run_dir, request, timeout_s)
    finally:
        if not keep_outputs:
            shutil.rmtree(run_dir, ignore_errors=True)
    if outcome.ok:
        mean = outcome.mean_jct_s()
        if mean is None or mean <= 0:
            outcome.status, outcome.error = "error", f"run produced no positive mean JCT (jct_s={outcome.summary.get('jct_s')!r})"
    return outcome


def _static_check(policy: str) -> Optional[str]:
    """Reason a policy file must not run (program_layer.search.safety), or None."""
    from .safety import UnsafeCandidate, check_policy_file
    head = policy.split(":", 1)[0] if ".py" in policy else None
    if head is None or not Path(head).is_file():
        return None             # a built-in name, or a missing file the child reports
    try:
        check_policy_file(head)
    except UnsafeCandidate as exc:
        return f"rejected before running: {exc}"
    return None


def _run_child(run_dir: Path, request: dict, timeout_s: float) -> RunOutcome:
    request_path, result_path = run_dir / "request.json", run_dir / "result.json"
    request_path.write_text(json.dumps(request))
    env = dict(os.environ, **_CHILD_ENV)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (repo_root(), env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", "program_layer.search.worker", str(request_path), str(result_path)]
    started = time.perf_counter()
    with open(run_dir / "stdout.txt", "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=str(run_dir), start_new_session=True)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return RunOutcome("timeout", error=f"timeout: run exceeded {timeout_s:g} s wall time",
                              wall_s=round(time.perf_counter() - started, 4))
        _kill_group(proc)       # nothing the child started outlives the evaluation
    wall_s = round(time.perf_counter() - started, 4)
    if not result_path.exists():
        return RunOutcome("error", error=_death_reason(proc.returncode, run_dir), wall_s=wall_s)
    try:
        data = json.loads(result_path.read_text())
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
    except (ValueError, OSError) as exc:
        return RunOutcome("error", error=f"unreadable result from the worker ({exc})", wall_s=wall_s)
    return RunOutcome(status=data.get("status", "error"), summary=data.get("summary") or {},
                      error=data.get("error"), traceback=data.get("traceback"),
                      axis=data.get("axis"), class_name=data.get("class_name"), wall_s=wall_s,
                      isolation=data.get("isolation"), isolation_detail=data.get("isolation_detail") or "",
                      channel=data.get("channel") or {})


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the child and anything it started (it leads its own session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _death_reason(returncode: int, run_dir: Path) -> str:
    """Why a child left no result: killed by a signal (often the OOM killer) or crashed."""
    tail = ""
    try:
        with open(run_dir / "stdout.txt", "rb") as f:      # only the end: output can be huge
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
            text = f.read().decode(errors="replace").strip().splitlines()
        tail = f": {text[-1][:300]}" if text else ""
    except OSError:
        pass
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        return f"crashed: killed by signal {name} (memory limit or crash){tail}"
    return f"crashed: worker exited with status {returncode} without a result{tail}"


def add_confinement_arguments(parser) -> None:
    """--decision-timeout, --isolation, --memory-mb: shared by `search` and `evaluate-policy`."""
    parser.add_argument("--decision-timeout", type=float, default=DEFAULT_DECISION_TIMEOUT_S,
                        help="wall-time limit per policy decision in seconds (default "
                             f"{DEFAULT_DECISION_TIMEOUT_S:g}); past it the policy scores 0")
    parser.add_argument("--isolation", choices=("auto", "namespaces", "fallback"), default="auto",
                        help="how the policy's process is confined: Linux namespaces where "
                             "available (auto, the default; else the weaker fallback with a warning), "
                             "always (namespaces: refuse without), or the fallback (docs/security.md)")
    parser.add_argument("--memory-mb", type=int, default=DEFAULT_MEMORY_MB,
                        help="address-space limit per simulator run, and per candidate policy process, in MiB")
