"""The workload to replay: programs of calls, read with the simulator's loader.

The file is read by ``workloads.io.read_jsonl`` (schema checks) and
``workload_io.build_programs`` (programs, session ids, arrivals, per-call lengths and tool
gaps), so a replay releases exactly the calls the simulator would. Times are scaled by
``time_scale`` once, here, to integer nanoseconds (``round(t * time_scale)``); the scaled
records are what the replay runs and what it writes to its ``workload.jsonl``, so a config
pointing at that file simulates the run as replayed.

Invariants: ``ReplayProgram.index`` is the loader's program id (file order); ``order`` is the
program's rank by (arrival, index); ``ReplayCall.shared_prefix`` is the number of leading
prompt tokens that are the predecessor's context (prompt + output), derived exactly as the
loader derives the token stream (docs/workloads.md "Prefix sharing"): 0 on call 0, on a call
with explicit ``input_tok_ids`` and after one; else ``min(reuse_prefix_toks, previous
context)`` with ``reuse_prefix_toks`` defaulting to ``min(previous context, input_toks)``.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from program_layer.digests import file_sha256
from program_layer.workloads._fields import scaled_ns


@dataclass
class ReplayCall:
    """One LLM call: its prompt and output lengths and the tool gap after it (scaled ns)."""
    index: int
    input_toks: int
    output_toks: int
    gap_ns: int
    shared_prefix: int = 0                  # leading prompt tokens = predecessor's context
    explicit_ids: Optional[list] = None     # input_tok_ids from the workload, sent verbatim
    hash_ids: Optional[list] = None         # Mooncake blocks (request records)
    hash_block_tokens: int = 512


@dataclass
class ReplayProgram:
    index: int
    order: int
    session_id: str
    arrival_ns: int
    calls: list = field(default_factory=list)


@dataclass
class ReplayPlan:
    path: Path
    sha256: str
    programs: list
    records: list                           # the scaled workload records (for workload.jsonl)

    @property
    def num_calls(self) -> int:
        return sum(len(p.calls) for p in self.programs)


def scale_record(obj: dict, time_scale: float) -> dict:
    """A copy of one workload record with arrival and tool gaps multiplied by ``time_scale``."""
    out = copy.deepcopy(obj)
    out["arrival_time_ns"] = scaled_ns(out["arrival_time_ns"], time_scale)
    for sub in out.get("sub_requests") or ():
        if isinstance(sub, dict) and "tool_duration_ns" in sub:
            sub["tool_duration_ns"] = scaled_ns(sub["tool_duration_ns"], time_scale)
    return out


def load_plan(path, time_scale: float = 1.0) -> ReplayPlan:
    """Read and check the workload at ``path``; one WorkloadError naming file and line if bad."""
    from program_layer.workload_io import build_programs
    from program_layer.workloads.io import read_jsonl

    path = Path(path)
    raw = read_jsonl(path, with_lines=True)
    scaled = [(line, scale_record(obj, time_scale)) for line, obj in raw]
    specs = build_programs(scaled, str(path))    # refuses duplicate session ids (the record pairs by them)
    ranks = {s.program_id: r for r, s in enumerate(sorted(specs, key=lambda s: (s.arrival_ns, s.program_id)))}
    programs = []
    for (_, obj), spec in zip(scaled, specs):
        subs = obj["sub_requests"] if "sub_requests" in obj else [obj]
        programs.append(ReplayProgram(spec.program_id, ranks[spec.program_id], spec.session_id,
                                      spec.arrival_ns, _calls(spec.calls, subs, "sub_requests" in obj)))
    digest = file_sha256(path)
    return ReplayPlan(path, digest, programs, [obj for _, obj in scaled])


def _calls(specs: list, subs: list, is_program: bool) -> list:
    calls, prev_ctx, prev_explicit = [], 0, False
    for spec, sub in zip(specs, subs):
        explicit = sub.get("input_tok_ids")
        k = spec.call_index
        if k == 0 or explicit is not None or prev_explicit:
            shared = 0
        else:
            reuse = sub.get("reuse_prefix_toks", min(prev_ctx, spec.prompt_tokens))
            shared = min(reuse, prev_ctx)
        hash_ids = None if is_program else sub.get("hash_ids")
        calls.append(ReplayCall(k, spec.prompt_tokens, spec.output_tokens, spec.tool_duration_ns, shared,
                                list(explicit) if explicit is not None else None,
                                list(hash_ids) if hash_ids is not None else None,
                                int(sub.get("hash_block_tokens", 512))))
        prev_ctx, prev_explicit = spec.prompt_tokens + spec.output_tokens, explicit is not None
    return calls
