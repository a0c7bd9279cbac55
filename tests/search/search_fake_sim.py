"""A tiny deterministic stand-in for ``program_layer.run.run_config`` (tests only).

Programs run their calls back to back with a fixed tool gap. A call whose predecessor's KV is
still protected when it arrives prefills from cache (fast); otherwise it prefills in full.
Decisions are validated the way the real simulator does: an invalid one or an exception
raises PolicyError naming policy, program, call and simulated time. The PCB view refuses
``output_tokens`` (future information) with PolicyError, like the causal boundary.
Config keys used: ``fake: {programs, calls, gap_s, full_prefill_s, hit_prefill_s, decode_s}``
and ``policies.retention`` (NAME or FILE.py:Class).
"""
from __future__ import annotations

import statistics
from pathlib import Path

from llmservingsim.errors import PolicyError
from program_layer.search import axes


class FakePCB:
    __slots__ = ("tool_name", "context_tokens", "attained_service_s", "kv_protected", "_last_done")

    def __init__(self, context_tokens):
        self.tool_name = "bash"
        self.context_tokens = context_tokens
        self.attained_service_s = 0.0
        self.kv_protected = False
        self._last_done = None

    def gap_elapsed_s(self, now):
        return None if self._last_done is None else now - self._last_done

    @property
    def output_tokens(self):
        raise PolicyError("causal boundary: output_tokens is future information")


class _Builtin:
    def __init__(self, name):
        self.name = name

    def on_turn_complete(self, pcb, request_id, now):
        return {"evict-always": "evict", "ttl": ("protect", now + 2.0)}.get(self.name, "release")

    def on_turn_arrival(self, pcb, now):
        return "none"


def _load(value):
    if ":" not in value:
        return _Builtin(value), value
    path, _, cls = value.rpartition(":")
    module = axes.load_module_from_file(Path(path), "_fake_policy")
    return getattr(module, cls)(), cls


def _check(decision, name, prog, call, now):
    if decision in ("release", "evict", "none"):
        return decision
    if (isinstance(decision, tuple) and len(decision) == 2 and decision[0] == "protect"
            and isinstance(decision[1], (int, float))):
        return decision
    raise PolicyError(f"policy {name} returned invalid decision {decision!r} "
                      f"(program {prog}, call {call}, t={now:.3f} s)")


def _call(fn, name, prog, call, now, *args):
    try:
        return _check(fn(*args), name, prog, call, now)
    except PolicyError:
        raise
    except Exception as exc:
        raise PolicyError(f"policy {name} raised {type(exc).__name__}: {exc} "
                          f"(program {prog}, call {call}, t={now:.3f} s)") from exc


def run_config(config, out_dir, *, base_dir=None, seed=None, step_mode=False, quiet=True):
    fake = config.get("fake") or {}
    n, calls = int(fake.get("programs", 4)), int(fake.get("calls", 5))
    gap, full, hit, dec = (float(fake.get(k, d)) for k, d in
                           (("gap_s", 1.0), ("full_prefill_s", 0.5), ("hit_prefill_s", 0.05), ("decode_s", 0.2)))
    policy, name = _load((config.get("policies") or {}).get("retention", "evict-always"))
    jcts = []
    for prog in range(n):
        now, start, pcb, protected_until = float(prog), float(prog), FakePCB(1000), None
        for call in range(calls):
            if call:
                _call(policy.on_turn_arrival, name, prog, call, now, pcb, now)
            cached = protected_until is not None and protected_until >= now
            now += (hit if cached else full) + dec
            pcb.attained_service_s += dec
            decision = _call(policy.on_turn_complete, name, prog, call, now, pcb, call, now)
            protected_until = decision[1] if isinstance(decision, tuple) else None
            pcb._last_done = now
            if call < calls - 1:
                now += gap
        jcts.append(now - start)
    jcts.sort()
    mean = statistics.fmean(jcts)
    return {"jct_s": {"mean": mean, "p50": statistics.median(jcts), "p90": jcts[-1], "p99": jcts[-1]},
            "throughput": {"output_tokens_per_s": 100.0 * n * calls / max(jcts)},
            "programs": n, "calls": n * calls}
