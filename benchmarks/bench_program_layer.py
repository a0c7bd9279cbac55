"""CPU time of the program layer's per-call path (issue 15): release, dispatch, the engine
hooks and the completion bookkeeping, without the engine. Run by hand; never a timed test.

    python benchmarks/bench_program_layer.py [--programs 50] [--calls 60] [--repeats 5]

A stub engine (here, not llmservingsim) follows the engine's public API the way
``Instance``/``Cluster`` call the program layer: ``submit`` calls the arrival retention hook
then the priority hook; a call finishes 1 ms after its release with
``on_request_finished``, then the completion retention hook and, for protected KV, a
residency report; a protection's deadline reports the entry gone. Policies: ttl (2 s) +
plas + round-robin on one instance, as in the paper's validation cells. Prints the best CPU
time per call of the whole run and of the same run with the program layer's work replaced
by constant answers (the stub's own floor); their difference is the program layer's cost.
"""
from __future__ import annotations

import argparse
import gc
import heapq
import time
from pathlib import Path

from hooks import NONE, CallInfo, Hooks, RetentionDecision
from llmservingsim.cluster import InstanceLoad
from llmservingsim.request import CallSpec
from program_layer.dispatch import DispatchPlane
from program_layer.orchestrator import Orchestrator
from program_layer.policies import load_policy
from program_layer.program_hooks import ProgramHooks
from program_layer.retention import RetentionPlane
from program_layer.workload_io import ProgramSpec

MS = 1_000_000
_LOAD = InstanceLoad(3, 1, 0.5, 4096, 65536, 40, 4000)


class StubCluster:
    """One instance; every call takes 1 ms; the event queue orders equal times by insertion."""

    def __init__(self, hooks: Hooks):
        self.hooks = hooks
        self.now_ns = 0
        self.num_instances = 1
        self.on_request_finished = None
        self._events: list = []
        self._seq = 0

    def schedule(self, time_ns: int, callback) -> None:
        heapq.heappush(self._events, (time_ns, self._seq, callback))
        self._seq += 1

    def load(self, instance: int) -> InstanceLoad:
        return _LOAD

    def submit(self, instance: int, call: CallSpec, request_id: int) -> None:
        now = self.now_ns
        info = CallInfo(request_id, call.owner, instance, now, call.prompt_tokens, call.prompt_tokens)
        hooks = self.hooks
        hooks.retention.on_arrival(info, now)
        hooks.priority.priority(info, now)
        self.schedule(now + MS, lambda: self._finish(info, call))

    def _finish(self, arrived: CallInfo, call: CallSpec) -> None:
        now = self.now_ns
        context = call.prompt_tokens + call.output_tokens
        info = CallInfo(arrived.request_id, call.owner, arrived.instance, arrived.arrival_ns,
                        call.prompt_tokens, context, arrived.arrival_ns, now)
        self.on_request_finished(info)
        decision = self.hooks.retention.on_complete(info, now, 0.5)
        if decision.kind == "protect":
            residency = self.hooks.residency
            residency.on_residency(call.owner, info.instance, context, True, now)
            self.schedule(decision.deadline_ns,
                          lambda: residency.on_residency(call.owner, info.instance, context, False,
                                                         self.now_ns))

    def run(self) -> None:
        events = self._events
        while events:
            t, _, cb = heapq.heappop(events)
            self.now_ns = t
            cb()


class ConstantHooks:
    """The stub's floor: hooks answering at once, and a trivial orchestrator loop."""
    def on_arrival(self, info, now):
        return NONE

    def priority(self, info, now):
        return 0

    def on_complete(self, info, now, u):
        return NONE

    def on_residency(self, *args):
        pass


def programs(n: int, calls: int) -> list[ProgramSpec]:
    out = []
    for p in range(n):
        specs = [CallSpec(owner=p, call_index=k, prompt_tokens=1000 + 100 * k, output_tokens=50,
                          tool_duration_ns=(1 + (p + k) % 5) * 1000 * MS,
                          tool_name=("bash", "edit", "search")[(p + k) % 3], tokens=None)
                 for k in range(calls)]
        out.append(ProgramSpec(program_id=p, session_id=f"s{p}", arrival_ns=p * 7 * MS, calls=specs))
    return out


def run_layer(progs: list) -> float:
    hooks = ProgramHooks()
    cluster = StubCluster(hooks.as_hooks())
    here = Path(__file__).parent
    dispatch = DispatchPlane(load_policy("routing", "round-robin", base_dir=here),
                             load_policy("scheduling", "plas", base_dir=here), 1)
    retention = RetentionPlane(load_policy("retention", {"name": "ttl", "tau_s": 2.0}, base_dir=here))
    orch = Orchestrator(cluster, progs, dispatch, retention, hooks)
    gc.collect()
    gc.freeze()             # as Simulation.run does: the build stays out of the collector's way
    t0 = time.process_time()
    orch.start()
    cluster.run()
    t = time.process_time() - t0
    gc.unfreeze()
    assert orch.programs_done()
    return t


def run_floor(progs: list) -> float:
    const = ConstantHooks()
    cluster = StubCluster(Hooks(priority=const, retention=const, residency=const))
    rid = iter(range(10 ** 9))

    cluster.on_request_finished = lambda info: None
    gc.collect()
    gc.freeze()
    t0 = time.process_time()
    for spec in progs:      # every call released at its program's arrival: the stub's own work
        for call in spec.calls:
            cluster.schedule(spec.arrival_ns, lambda call=call: cluster.submit(0, call, next(rid)))
    cluster.run()
    t = time.process_time() - t0
    gc.unfreeze()
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", type=int, default=50)
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    progs = programs(args.programs, args.calls)
    n = args.programs * args.calls
    layer = min(run_layer(progs) for _ in range(args.repeats))
    floor = min(run_floor(progs) for _ in range(args.repeats))
    print(f"{n} calls, best of {args.repeats}: {1e6 * layer / n:.1f} us/call with the program layer, "
          f"{1e6 * floor / n:.1f} us/call stub floor, {1e6 * (layer - floor) / n:.1f} us/call program layer")


if __name__ == "__main__":
    main()
