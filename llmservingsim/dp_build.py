"""Assembling data / expert parallelism for a run (the build step run.py delegates to).

One concept: from (model, device, bundle, tp, pp, dp, ep) to the servers of
``data_parallel`` and the MoE timing of ``expert_parallel``, plus what the run reports about
them (summary.json ``data_parallel``, the ``--trace-steps`` comm breakdown). Nothing here
runs for a config with dp = ep = 1.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Optional

from .data_parallel import DPRank, DPServer, LockstepGroup, LockstepTimer
from .instance import Instance
from .pipeline import PipelineInstance
from .expert_parallel import EPCommModel, MoEParallel, MoERankTimer, describe, moe_layers, moe_timer

BREAKDOWN_COLUMNS = ["tp_all_reduce_s", "ep_all_gather_s", "ep_reduce_scatter_s", "dp_wait_s"]


@dataclass
class DPSetup:
    par: MoEParallel
    model: object
    bundle: object
    moe: Optional[MoERankTimer] = None
    pp: int = 1
    device: object = None
    servers: list = field(default_factory=list)
    trace_extra: Optional[list] = None      # per lockstep trace row: (tp, ag, rs, wait) ns

    def summary(self) -> dict:
        out = {"dp": self.par.dp, "ep": self.par.ep, "lockstep": self.moe is not None,
               "engine_cores": sum(len(s.ranks) for s in self.servers)}
        moe = describe(self.par, self.model)
        if moe is not None:
            out["moe"] = moe
        if self.moe is not None:
            out["dummy_steps"] = sum(s.group.dummy_steps for s in self.servers)
        out["calls_per_rank"] = [list(s.balancer.assigned) for s in self.servers]
        return out


def moe_parallel_setup(model, device, bundle, tp: int, pp: int, dp: int, ep: int) -> DPSetup:
    """The MoE timing of a MoE model with dp > 1 or ep > 1. With dp = 1 (TP with expert
    parallelism) no tokens are gathered: the bundle's MoE table is replaced by the rank's
    local-expert time at its own tokens. With dp > 1 the lockstep timer (``add_dp_servers``)
    adds the gathered-token MoE itself."""
    par = MoEParallel(dp, tp, ep)
    timer = moe_timer(model, device, bundle, par)
    setup = DPSetup(par, model, bundle, timer, pp, device)
    if dp == 1:
        setup.bundle = replace(bundle, moe=lambda tokens, experts: timer.us(tokens, tokens),
                               provenance=f"{bundle.provenance}, MoE at ep{ep} from tp{timer.source_tp}'s moe.csv")
        setup.moe = None
    return setup


def add_dp_servers(cluster, servers: int, dp: int, engine_core: Callable, timer, setup: Optional[DPSetup],
                   metrics, layouts: Optional[list] = None) -> DPSetup:
    """Add ``servers`` servers of ``dp`` engine cores (core index = server x dp + rank).
    ``engine_core(index, server, cls, on_step)`` builds one core. A MoE model (``setup``
    with a MoE timer) gets a lockstep group per server; a dense model's ranks step alone
    (each a ``PipelineInstance`` when pp > 1). ``layouts[s]``: the rank layout of a lockstep
    server whose ranks span nodes (its EP collectives on the two-level network), None for one
    on one node."""
    if setup is None:           # dense model: independent ranks
        setup = DPSetup(MoEParallel(dp, timer.perf.bundle.tp, 1), timer.perf.model, timer.perf.bundle, pp=timer.pp)
        setup.moe = None
    lockstep = setup.moe is not None
    on_step = metrics.on_step
    core_cls = DPRank if lockstep else (PipelineInstance if setup.pp > 1 else Instance)
    ls_timers: dict = {}
    if lockstep:
        ep_comm = EPCommModel(setup.model, setup.device, dp, setup.par.tp)
        ls_timers[None] = LockstepTimer(timer, setup.moe, ep_comm, moe_layers(setup.model, setup.pp))
        for layout in layouts or ():
            if layout not in ls_timers:     # a server across nodes: its own EP network
                ls_timers[layout] = LockstepTimer(timer, setup.moe, EPCommModel(setup.model, setup.device, dp,
                                                                                setup.par.tp, layout),
                                                  moe_layers(setup.model, setup.pp))
        if metrics.trace_rows is not None:
            extra = setup.trace_extra = []

            def traced_step(inst, out, now, timing, _record=metrics.on_step):
                _record(inst, out, now, timing)
                extra.append((timing.tp_comm_ns, timing.ep_all_gather_ns, timing.ep_reduce_scatter_ns,
                              timing.dp_wait_ns))
            on_step = traced_step
    for s in range(servers):
        ranks = [engine_core(s * dp + r, s, core_cls, on_step) for r in range(dp)]
        for rank in ranks:
            rank.server = s             # what CallInfo names: the server, not the engine core
        group = LockstepGroup(ranks, ls_timers[layouts[s] if layouts else None]) if lockstep else None
        server = DPServer(s, ranks, group)
        cluster.add_server(server)
        setup.servers.append(server)
    return setup


def trace_rows(columns: list, rows: list, extra: list, fmt: Callable) -> tuple[list, list]:
    """The ``--trace-steps`` columns and rows of a lockstep run: the usual columns, then the
    step's exposed communication split into TP all-reduces, the EP all-gathers and
    reduce-scatters of its MoE layers, and the wait for the slowest rank (they sum to
    ``exposed_comm_s`` up to rounding)."""
    cols = list(columns) + BREAKDOWN_COLUMNS
    out = []
    for (i, k, start, dur, npf, pt, nd, ns, comp, comm, ovh), (tp, ag, rs, wait) in zip(rows, extra):
        out.append(dict(zip(cols, (i, k, fmt(start), fmt(dur), npf, pt, nd, ns, fmt(comp), fmt(comm), fmt(ovh),
                                   fmt(tp), fmt(ag), fmt(rs), fmt(wait)))))
    return cols, out
