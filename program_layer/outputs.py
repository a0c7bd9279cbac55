"""Run outputs: calls.csv, programs.csv, timeseries.csv, summary.json (docs/outputs.md).

Everything is computed from the records, formatted with fixed precision so that the same
run gives byte-identical files. Times are seconds in columns ending ``_s``.
"""
from __future__ import annotations

import csv
import json
import math
import os
import shutil
import tempfile
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from llmservingsim.errors import ConfigError, SimError

NS = 1e9

CALL_COLUMNS = ["program_id", "session_id", "call_index", "request_id", "instance", "release_s",
                "queued_s", "scheduled_s", "first_token_s", "last_token_s", "completion_s", "input_tokens",
                "output_tokens", "cached_tokens", "ttft_s", "tpot_s", "queueing_s", "e2e_s",
                "service_s", "preemptions", "tool_name", "tool_duration_s"]
PROGRAM_COLUMNS = ["program_id", "session_id", "arrival_s", "completion_s", "jct_s", "calls",
                   "preemptions", "attained_service_s"]


def fmt(x: float) -> str:
    return f"{x:.9f}".rstrip("0").rstrip(".") if isinstance(x, float) else str(x)


def percentiles(values: Sequence[float]) -> dict:
    """mean / p50 / p90 / p99 (linear interpolation between order statistics, numpy's default)."""
    if not values:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    v = sorted(values)
    n = len(v)

    def q(p):
        pos = (n - 1) * p
        lo = math.floor(pos)
        hi = min(lo + 1, n - 1)
        return v[lo] + (v[hi] - v[lo]) * (pos - lo)
    return {"mean": round(sum(v) / n, 9), "p50": round(q(0.5), 9), "p90": round(q(0.9), 9),
            "p99": round(q(0.99), 9)}


def call_rows(finished, programs) -> list[dict]:
    """One row per call in workload order (program, then call index)."""
    sessions = {p.program_id: p.session_id for p in programs}
    rows = []
    for f in finished:
        info, call = f.info, f.call
        ttft = (f.first_token_ns - info.arrival_ns) / NS
        n_out = call.output_tokens
        tpot = (f.last_token_ns - f.first_token_ns) / NS / (n_out - 1) if n_out > 1 else 0.0
        rows.append({
            "program_id": info.owner, "session_id": sessions.get(info.owner, ""),
            "call_index": call.call_index, "request_id": info.request_id, "instance": info.instance,
            "release_s": info.arrival_ns / NS, "queued_s": f.queued_ns / NS,
            "scheduled_s": f.first_scheduled_ns / NS,
            "first_token_s": f.first_token_ns / NS, "last_token_s": f.last_token_ns / NS,
            "completion_s": info.completion_ns / NS,
            "input_tokens": call.prompt_tokens, "output_tokens": n_out,
            "cached_tokens": f.num_cached_tokens, "ttft_s": ttft, "tpot_s": tpot,
            "queueing_s": (f.first_scheduled_ns - info.arrival_ns) / NS,
            "e2e_s": (f.last_token_ns - info.arrival_ns) / NS,
            "service_s": (info.completion_ns - f.first_scheduled_ns) / NS,
            "preemptions": f.num_preemptions, "tool_name": call.tool_name or "",
            "tool_duration_s": call.tool_duration_ns / NS,
        })
    rows.sort(key=lambda r: (r["program_id"], r["call_index"]))
    return rows


def program_rows(results) -> list[dict]:
    rows = []
    for r in results:
        done = r.completion_ns is not None
        rows.append({"program_id": r.program_id, "session_id": r.session_id, "arrival_s": r.arrival_ns / NS,
                     "completion_s": r.completion_ns / NS if done else "",
                     "jct_s": (r.completion_ns - r.arrival_ns) / NS if done else "",
                     "calls": r.num_calls, "preemptions": r.num_preemptions,
                     "attained_service_s": r.attained_service_ns / NS})
    return rows


def write_csv(path: Path, columns: list[str], rows: Iterable[dict], *, atomic: bool = False) -> None:
    """``rows`` as CSV with ``fmt``-formatted cells; ``atomic``: via :func:`atomic_file`."""
    with (atomic_file(path, newline="") if atomic else open(path, "w", encoding="utf-8", newline="")) as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(columns)
        for r in rows:
            w.writerow([fmt(r[c]) for c in columns])


def write_json(path: Path, obj) -> None:
    Path(path).write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


@contextmanager
def atomic_file(path: Path, *, durable: bool = False, newline: str | None = None) -> Iterator:
    """A text file to write that replaces ``path`` only when the body completes: written as a
    temp file in the same folder (unique name, so concurrent writers never share one), then
    renamed; on any error or interrupt the temp file is removed and ``path`` is untouched.
    ``durable`` also fsyncs before the rename (a cache that must survive a crash)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline=newline) as f:
            yield f
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


def write_atomic(path: Path, text: str, *, durable: bool = False) -> None:
    """Write ``text`` so that readers never see half a file (:func:`atomic_file`)."""
    with atomic_file(path, durable=durable) as f:
        f.write(text)


# What a run folder may hold: the run's outputs, a sweep cell's bookkeeping, validate's report.
# A folder holding anything else is not replaced (it may be the user's own folder, say `--out .`).
RUN_FOLDER_ENTRIES = frozenset({
    "config.yaml", "summary.json", "calls.csv", "programs.csv", "timeseries.csv", "plots",
    "cell.json", "done", "error.txt", "validation.json", "validation.md"})
MARKER = ".agentservesim-run"


def _replaceable(folder: Path) -> tuple[bool, list[str]]:
    """Whether ``folder`` is empty, ours (marker) or holds only run outputs; else the strangers."""
    names = sorted(os.listdir(folder))
    if MARKER in names:
        return True, []
    strangers = [n for n in names if n not in RUN_FOLDER_ENTRIES]
    return not strangers, strangers


@contextmanager
def staged_folder(out_dir: Path, *, key: str = "--out") -> Iterator[Path]:
    """Yield an empty temporary sibling of ``out_dir`` to write a run's outputs into; when the
    body completes, the sibling replaces ``out_dir`` (two renames on one file system).

    Invariants: ``out_dir`` holds either its previous complete contents or the new complete
    contents, never a mix; a failure, Ctrl-C or a full disk leaves the previous contents (or
    nothing) and removes the temporary folder; the error says which. Being entered first,
    it checks that ``out_dir`` can be written before anything is simulated. A process killed
    with SIGKILL leaves a hidden ``.NAME.partial-PID`` sibling, removed by the next run.
    """
    out_dir = Path(out_dir)
    if Path.cwd().resolve().is_relative_to(out_dir.resolve()):
        raise ConfigError(f"output folder {out_dir} is the current folder or holds it; give a subfolder", key=key)
    if out_dir.exists():
        if not out_dir.is_dir():
            raise ConfigError(f"output folder {out_dir} exists and is not a folder", key=key)
        ok, strangers = _replaceable(out_dir)
        if not ok:
            shown = ", ".join(strangers[:3]) + (", ..." if len(strangers) > 3 else "")
            raise ConfigError(f"output folder {out_dir} holds files that are not a run's outputs ({shown}); "
                              "choose an empty or new folder", key=key)
    parent = out_dir.parent
    _remove_stale_partials(parent, out_dir.name)
    stage = parent / f".{out_dir.name}.partial-{os.getpid()}"
    try:
        parent.mkdir(parents=True, exist_ok=True)
        if stage.exists():
            shutil.rmtree(stage)
        stage.mkdir()
        (stage / MARKER).write_text("")
    except OSError as exc:
        shutil.rmtree(stage, ignore_errors=True)
        raise ConfigError(f"cannot write output folder {out_dir}: {exc.strerror or exc}", key=key) from None
    had_outputs = out_dir.is_dir() and any(out_dir.iterdir())
    previous = (f"the previous outputs in {out_dir} are unchanged" if had_outputs
                else f"no outputs were written to {out_dir}")
    try:
        yield stage
        old = parent / f".{out_dir.name}.old-{os.getpid()}"
        if out_dir.exists():
            os.rename(out_dir, old)
        os.rename(stage, out_dir)
        shutil.rmtree(old, ignore_errors=True)
    except OSError as exc:                       # disk full, file too large, permissions
        where = exc.filename if exc.filename else out_dir
        raise SimError(f"cannot write outputs ({exc.strerror or exc}); {previous}", file=str(where)) from None
    except SimError as exc:
        if had_outputs:                  # worth saying only when there was something to keep
            exc.message = f"{exc.message} ({previous})"
            exc.args = (str(exc),)
        raise
    except KeyboardInterrupt:
        raise KeyboardInterrupt(previous) from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _remove_stale_partials(parent: Path, name: str) -> None:
    """Remove temporary siblings left by killed runs (their process no longer exists)."""
    if not parent.is_dir():
        return
    for entry in parent.glob(f".{name}.*-*"):
        kind, _, pid = entry.name[len(name) + 2:].partition("-")
        if kind not in ("partial", "old") or not pid.isdigit() or _alive(int(pid)):
            continue
        shutil.rmtree(entry, ignore_errors=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False                     # our own leftovers from an earlier failed attempt
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
