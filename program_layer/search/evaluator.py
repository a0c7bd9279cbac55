"""Fitness of a candidate policy: the seed's mean JCT over the candidate's on the target cell.

    combined_score = seed mean JCT / candidate mean JCT        (1.0 = parity, > 1 better)

With a second cell (Appendix F scores scheduling candidates on the target cell and again at
0.02 JPS) the score is the arithmetic mean of the two per-cell ratios, so each cell counts
equally whatever its absolute JCT scale. A candidate that fails on any cell scores 0.

Failures never stop a search: a candidate that does not import, raises, returns an invalid
decision, reaches past the causal boundary (PolicyError / AttributeError from the simulator),
misses the per-decision deadline, runs past the wall-time limit or past the memory limit, or
tries what its confinement forbids scores 0 with ``status`` "error" or "timeout" and the
reason in ``error``. The candidate runs in its own confined process, apart from the
simulator that scores it (docs/security.md); ``isolation`` in the result says how it was
confined ("namespaces", or "fallback" with a warning where the platform has none).

The seed is run once per content key (cell configs and the files they name, e.g. the
workload; axis; seed policy source; simulator sources, data and version) and its result
cached as JSON under ``cache_dir``, which only this process writes and no candidate can
see. Each entry stores its key and a checksum and is verified on read (a mismatch is
recomputed); writes are atomic; a file lock makes concurrent evaluators share one seed run.
A candidate whose source equals the seed's is not re-run.
"""
from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import logging
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

import yaml

from llmservingsim.errors import SimError
from program_layer import package_version
from program_layer.digests import file_sha256
from program_layer.outputs import write_atomic
from program_layer.search import axes, sandbox

_FINGERPRINT_DIRS = ("llmservingsim", "program_layer", "hooks")
_DATA_DIRS = ("hardware", "profiles")          # device descriptions and profile bundles
_CACHE_FORMAT = 2
log = logging.getLogger("agentservesim.search")


@dataclass(frozen=True)
class EvalSettings:
    """Everything an evaluation needs; JSON-serializable so it can be baked into the
    generated OpenEvolve evaluator module. Paths are absolute."""
    cell: str
    axis: str
    seed_policy: str                  # NAME or /abs/file.py:Class
    second_cell: Optional[str] = None
    timeout_s: float = sandbox.DEFAULT_TIMEOUT_S
    memory_mb: Optional[int] = sandbox.DEFAULT_MEMORY_MB
    cache_dir: Optional[str] = None   # None: the seed is recomputed every time
    work_dir: Optional[str] = None    # where run folders are made (deleted after each run)
    log_path: Optional[str] = None    # JSON lines, one per evaluation
    runner: Optional[str] = None      # "module:function" replacing program_layer.run:run_config
    decision_timeout_s: float = sandbox.DEFAULT_DECISION_TIMEOUT_S   # per policy decision
    isolation: str = "auto"           # "auto" | "namespaces" | "fallback" (sandbox.run_policy)
    static_check: bool = True         # the early AST check (safety.py); not the boundary
    max_processes: int = 0            # the candidate's RLIMIT_NPROC in its PID namespace

    def cells(self) -> list[str]:
        return [self.cell] + ([self.second_cell] if self.second_cell else [])

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "EvalSettings":
        return cls(**data)


@functools.lru_cache(maxsize=1)
def simulator_fingerprint() -> str:
    """Hash of the simulator's Python sources (the search package excluded), its data
    (hardware descriptions, profile bundles) and the package version, so a cached seed JCT
    is never reused after the simulator, a built-in policy or a profile changed. Computed
    once per process: one process's evaluations all compare against the same seed run."""
    root = Path(__file__).resolve().parents[2]
    digest = hashlib.sha256()
    for top in _FINGERPRINT_DIRS:
        for path in sorted((root / top).rglob("*.py")):
            if "search" in path.relative_to(root).parts[:2]:
                continue
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    for top in _DATA_DIRS:
        for path in sorted(p for p in (root / top).rglob("*") if p.is_file()):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    digest.update(package_version().encode())
    return digest.hexdigest()


def _referenced_files(config, base: Path) -> dict:
    """Content hashes of the files a cell config names (workload, model, hardware,
    calibration, ...): any string value that is the path of an existing file, relative to
    the config's folder or absolute. A config that names a file by path is keyed by what is
    in the file, not only by its name."""
    out: dict = {}

    def visit(value):
        if isinstance(value, dict):
            for v in value.values():
                visit(v)
        elif isinstance(value, list):
            for v in value:
                visit(v)
        elif isinstance(value, str) and value and len(value) < 4096 and "\n" not in value:
            try:
                path = Path(value) if Path(value).is_absolute() else base / value
                if path.is_file():
                    out[value] = file_sha256(path)
            except (OSError, ValueError):
                pass
    visit(config)
    return out


def _cell_identity(cell: str) -> dict:
    """Canonical content of a cell config, its folder (relative paths resolve there) and the
    content of the files it names (e.g. the workload)."""
    path = Path(cell)
    try:
        content = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SimError(f"cannot read cell config: {exc}", file=str(path)) from exc
    base = path.resolve().parent
    return {"dir": str(base), "config": content, "files": _referenced_files(content, base)}


def policy_source(spec_text: str) -> str:
    """The text that identifies a policy for caching: the file for FILE.py:Class, the name
    for a built-in (its code is covered by the simulator fingerprint)."""
    spec = axes.parse_policy_spec(spec_text)
    if spec.path is not None:
        return f"{spec.class_name}\n{spec.path.read_text()}"
    return spec.text


def seed_cache_key(settings: EvalSettings, *, full: bool = False) -> str:
    """The content key of the seed's result (the first 24 hex digits name the file; the
    entry stores all 64)."""
    payload = {
        "format": _CACHE_FORMAT,
        "cells": [_cell_identity(c) for c in settings.cells()],
        "axis": settings.axis,
        "seed": policy_source(settings.seed_policy),
        "runner": settings.runner,
        "simulator": simulator_fingerprint(),
    }
    blob = json.dumps(payload, sort_keys=True, default=str).encode()
    key = hashlib.sha256(blob).hexdigest()
    return key if full else key[:24]


def _checksum(key: str, cells) -> str:
    return hashlib.sha256((key + json.dumps(cells, sort_keys=True)).encode()).hexdigest()


def _verified_cells(path: Path, key: str, n_cells: int) -> Optional[list]:
    """The cached per-cell metrics if ``path`` holds a sound entry for ``key``, else None
    (missing, unreadable, another key, a bad checksum, or numbers no run can produce)."""
    try:
        entry = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        entry = None
    ok = (isinstance(entry, dict) and entry.get("key") == key and isinstance(entry.get("cells"), list)
          and len(entry["cells"]) == n_cells and entry.get("checksum") == _checksum(key, entry["cells"]))
    if ok:
        for cell in entry["cells"]:
            mean = cell.get("mean_jct_s") if isinstance(cell, dict) else None
            if not (isinstance(mean, (int, float)) and not isinstance(mean, bool)
                    and math.isfinite(mean) and mean > 0):
                ok = False
    if not ok:
        log.warning(f"warning: seed cache entry {path} failed verification; recomputing it")
        return None
    return entry["cells"]


def cell_metrics(outcome: sandbox.RunOutcome) -> dict:
    """The per-cell numbers we report from a successful run's summary."""
    jct = outcome.summary.get("jct_s") or {}
    thr = outcome.summary.get("throughput") or {}
    return {
        "mean_jct_s": sandbox.as_number(jct.get("mean")),
        "p99_jct_s": sandbox.as_number(jct.get("p99")),
        "throughput": sandbox.as_number(thr.get("output_tokens_per_s")),
        "wall_s": outcome.wall_s,
    }


def seed_baseline(settings: EvalSettings) -> tuple[list[dict], bool]:
    """Per-cell metrics of the seed policy, and whether they came from the cache.

    Raises SimError if the seed itself fails (no fitness can be defined then)."""
    if not settings.cache_dir:
        return _run_seed(settings), False
    cache_dir = Path(settings.cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = seed_cache_key(settings, full=True)
    path = cache_dir / f"seed-{key[:24]}.json"
    with open(cache_dir / ".seed.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)     # one seed run even with parallel evaluators
        cells = _verified_cells(path, key, len(settings.cells()))
        if cells is not None:
            return cells, True
        cells = _run_seed(settings)
        write_atomic(path, json.dumps({
            "format": _CACHE_FORMAT, "key": key, "checksum": _checksum(key, cells),
            "seed_policy": settings.seed_policy, "cells": cells, "cell_paths": settings.cells(),
            "simulator_version": package_version()}, indent=1), durable=True)
    return cells, False


def _run(settings: EvalSettings, policy: str, cell: str, **extra) -> sandbox.RunOutcome:
    outcome = sandbox.run_policy(policy, cell, axis=settings.axis, timeout_s=settings.timeout_s,
                                 memory_mb=settings.memory_mb, runner=settings.runner,
                                 work_dir=settings.work_dir,
                                 decision_timeout_s=settings.decision_timeout_s,
                                 isolation=settings.isolation, static_check=settings.static_check,
                                 max_processes=settings.max_processes, **extra)
    _note_isolation(outcome)
    return outcome


_warned: set = set()


def _note_isolation(outcome: sandbox.RunOutcome) -> None:
    """The fallback is a decision the user should see: one warning line per process."""
    if outcome.isolation == "fallback" and "fallback" not in _warned:
        _warned.add("fallback")
        log.warning("warning: candidate policies run WITHOUT Linux namespaces here "
                    f"({outcome.isolation_detail}); containment is weaker: hard limits, "
                    "seccomp and Landlock where available, no private file system, network "
                    "or PID namespace (docs/security.md)")


def _run_seed(settings: EvalSettings) -> list[dict]:
    out = []
    for cell in settings.cells():
        outcome = _run(settings, settings.seed_policy, cell)
        if not outcome.ok:
            raise SimError(f"seed policy {settings.seed_policy} failed on {cell}: {outcome.error}")
        out.append(cell_metrics(outcome))
    return out


def evaluate_policy(policy: str, settings: EvalSettings) -> dict:
    """Score ``policy`` (NAME or FILE.py[:Class]) against the seed. Never raises for a bad
    candidate; raises SimError only when the seed itself cannot be scored.

    Returns a flat dict: combined_score, status ("ok" | "error" | "timeout"), error (when not
    ok), mean_jct_s, p99_jct_s, throughput (output tokens/s), seed_mean_jct_s, jct_ratio,
    wall_s, seed_cached, isolation (how the candidate process was confined; absent when it
    did not run), and with a second cell the same numbers suffixed ``_2``.
    """
    started = time.perf_counter()
    seed_cells, cached = seed_baseline(settings)
    result: dict = {"policy": policy, "axis": settings.axis, "status": "ok", "combined_score": 0.0,
                    "seed_cached": cached}
    same_as_seed = _same_source(policy, settings.seed_policy)
    ratios = []
    for i, (cell, seed) in enumerate(zip(settings.cells(), seed_cells)):
        suffix = "" if i == 0 else f"_{i + 1}"
        result[f"seed_mean_jct_s{suffix}"] = seed["mean_jct_s"]
        if same_as_seed:
            metrics = dict(seed)
        else:
            outcome = _run(settings, policy, cell, prefer_class=_class_of(settings.seed_policy))
            if outcome.isolation:
                result["isolation"] = outcome.isolation
            if not outcome.ok:
                result.update(status=outcome.status, error=outcome.error,
                              traceback=outcome.traceback, failed_cell=cell)
                break
            metrics = cell_metrics(outcome)
        ratio = seed["mean_jct_s"] / metrics["mean_jct_s"]
        ratios.append(ratio)
        result[f"jct_ratio{suffix}"] = ratio
        for key in ("mean_jct_s", "p99_jct_s", "throughput"):
            result[f"{key}{suffix}"] = metrics[key]
    if result["status"] == "ok":
        result["combined_score"] = sum(ratios) / len(ratios)
    result["wall_s"] = round(time.perf_counter() - started, 4)
    _append_log(settings, policy, result)
    return result


def _class_of(spec_text: str) -> Optional[str]:
    """The class name a spec names (``FILE.py:Class``), else None."""
    head, sep, cls = spec_text.rpartition(":")
    return cls if sep and head.endswith(".py") else None


def _same_source(policy: str, seed_policy: str) -> bool:
    """True when the candidate is byte-identical to the seed (the search's initial program)."""
    try:
        a, b = axes.parse_policy_spec(policy), axes.parse_policy_spec(seed_policy)
    except SimError:
        return False
    if a.path is None or b.path is None:
        return a.text == b.text
    try:
        return a.path.read_bytes() == b.path.read_bytes() and a.class_name in (None, b.class_name)
    except OSError:
        return False


def _append_log(settings: EvalSettings, policy: str, result: dict) -> None:
    if not settings.log_path:
        return
    try:
        source = policy_source(policy)
    except (SimError, OSError):
        source = policy
    row = {"time": time.time(), "source_sha": hashlib.sha256(source.encode()).hexdigest()[:16],
           **{k: v for k, v in result.items() if k != "traceback"}}
    with open(settings.log_path, "a") as f:
        f.write(json.dumps(row) + "\n")


# Numbers OpenEvolve keeps as metrics (it averages numeric metrics; strings go to artifacts).
_METRIC_KEYS = ("combined_score", "mean_jct_s", "p99_jct_s", "throughput", "seed_mean_jct_s",
                "jct_ratio", "mean_jct_s_2", "p99_jct_s_2", "throughput_2", "seed_mean_jct_s_2",
                "jct_ratio_2", "wall_s")


def evaluate_for_openevolve(program_path: str, settings: dict):
    """OpenEvolve's ``evaluate(program_path)``: numeric metrics plus artifacts (status, error,
    traceback) that OpenEvolve shows the LLM in the next prompt. The candidate's class is the
    file's one class deriving from the axis base."""
    from openevolve.evaluation_result import EvaluationResult

    result = evaluate_policy(str(Path(program_path).resolve()), EvalSettings.from_dict(settings))
    metrics = {k: float(result[k]) for k in _METRIC_KEYS if isinstance(result.get(k), (int, float))}
    artifacts = {"status": result["status"]}
    if result.get("isolation"):
        artifacts["isolation"] = result["isolation"]
    if result.get("error"):
        artifacts["error"] = result["error"]
    if result.get("traceback"):
        artifacts["traceback"] = result["traceback"]
    return EvaluationResult(metrics=metrics, artifacts=artifacts)
