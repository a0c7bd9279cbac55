"""The replay's output folder, in the real-run format ``validate`` and ``calibrate`` read.

- ``requests.jsonl``: one line per *completed* call, appended and flushed as it completes
  (``input_toks``, ``output_toks``, ``arrival_time`` = release, ``queued_ts`` = send,
  ``first_token_ts``, ``last_token_ts``, ``request_id``, ``program_id`` = the workload's
  session id, ``call_index``; plus ``priority``, ``server_request_id``, and the server's
  ``server_prompt_tokens`` / ``cached_tokens`` when it reports them);
- ``failed.jsonl``: one line per failed call (``program_id``, ``call_index``, ``reason``,
  ``time``; the call's release and send times and tokens received);
- ``meta.json``: written when the run starts (``"complete": false``) and rewritten, whole and
  atomically, when it ends (``complete``, counts, ``finished_at``);
- ``workload.jsonl``: the workload as replayed (times scaled by ``--time-scale``), for the
  config that simulates the run.

Invariants: the folder was empty or absent before (two runs never mix); every line on disk
is a whole JSON object (written under one lock, flushed, so an interrupted run leaves a
valid partial record); after ``close`` nothing more is written.
"""
from __future__ import annotations

import json
import threading
from pathlib import Path

from llmservingsim.errors import ConfigError
from program_layer.outputs import write_atomic

SCHEMA_VERSION = 1


def check_out_dir(out) -> Path:
    """``out`` as a Path; ConfigError unless it is absent or an empty folder."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"{out} exists and is not an empty folder; give a new one so two runs never mix",
                          key="--out")
    return out


class RunRecord:
    """Owns the output files; thread-safe (one lock for every write)."""

    def __init__(self, out, meta: dict, workload_records: list):
        from program_layer.workloads.io import write_jsonl
        self.out = check_out_dir(out)
        try:
            self.out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create {self.out} ({exc.strerror})", key="--out") from None
        self._lock = threading.Lock()
        self._closed = False
        self.meta = dict(meta, schema_version=SCHEMA_VERSION)
        write_jsonl(self.out / "workload.jsonl", workload_records)
        self.write_meta()
        self._requests = open(self.out / "requests.jsonl", "a", encoding="utf-8", newline="\n")
        self._failed = open(self.out / "failed.jsonl", "a", encoding="utf-8", newline="\n")

    def write_meta(self, **updates) -> None:
        """Merge ``updates`` into meta.json and rewrite it atomically."""
        self.meta.update(updates)
        write_atomic(self.out / "meta.json", json.dumps(self.meta, indent=2, sort_keys=True) + "\n")

    def _append(self, fh, obj: dict) -> bool:
        with self._lock:
            if self._closed:
                return False
            fh.write(json.dumps(obj, sort_keys=True, allow_nan=False) + "\n")
            fh.flush()
            return True

    def request(self, obj: dict) -> bool:
        return self._append(self._requests, obj)

    def failure(self, obj: dict) -> bool:
        return self._append(self._failed, obj)

    def close(self, **meta_updates) -> None:
        """Stop writing records and rewrite meta.json with ``meta_updates`` (idempotent for
        records; meta is rewritten each time)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._requests.close()
                self._failed.close()
            self.write_meta(**meta_updates)
