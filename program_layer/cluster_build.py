"""The pieces ``run._build`` adds for clusters and pipeline parallelism (docs/clusters.md):
each instance's step timer on its own network layout, and vLLM's async-scheduling rule for
pp > 1. Single-node instances share the one timer they always had (nothing per step added)."""
from __future__ import annotations

from typing import Callable

from llmservingsim.errors import ConfigError
from llmservingsim.rank_layout import dp_layout, layout_for


def instance_timers(placements: list, device, make: Callable, one_node=None) -> list:
    """One step timer per instance, ``make(layout)`` built once per distinct layout (its
    communication memo shared by the instances laid out alike): ``make(None)``, the timer
    runs always had, for every instance on one node (``one_node`` when already built)."""
    out, made = [], ({} if one_node is None else {None: one_node})
    for p in placements:
        layout = layout_for(p, device)
        key = layout if layout.multi_node else None
        if key not in made:
            made[key] = make(key)
        out.append(made[key])
    return out


def rank_timers(placements: list, device, make: Callable, first: list) -> list:
    """Data-parallel servers (dp > 1): one step timer per engine core (core = server x dp +
    rank), each rank's on its own stages' layout (a dense rank with pp > 1 may span nodes);
    ``first``: the ``instance_timers`` result, whose one-node timer every rank on one node
    shares (nothing per step added)."""
    made = {None: next((t for p, t in zip(placements, first) if not layout_for(p, device).multi_node), None)}
    out = []
    for p in placements:
        for d in range(p.dp):
            layout = layout_for(p, device, replica=d)
            key = layout if layout.multi_node else None
            if made.get(key) is None:
                made[key] = make(key)
            out.append(made[key])
    return out


def server_layouts(placements: list, device) -> list:
    """Per lockstep MoE server (pp = 1): the layout its EP collectives run on, None for a
    server on one node (the network they always had, ``EPCommModel``'s default)."""
    out = []
    for p in placements:
        layout = dp_layout(p, device)
        out.append(layout if layout.multi_node else None)
    return out


def pipeline_async_scheduling(config: dict) -> bool:
    """vLLM 0.19 with pipeline_parallel_size > 1: async scheduling left at its default is
    disabled ("not yet supported ... and will be disabled"); asked for explicitly, it is an
    error ("not yet compatible with pipeline_parallel_size > 1"). The resolved engine says
    False either way. ``config``: the run config as given to ``build_simulation`` (a loaded file
    has its defaults filled in, so there the key's own line says it was written)."""
    if "_lines" in config:
        given = "engine.async_scheduling" in config["_lines"] and config["engine"].get("async_scheduling")
    else:
        given = (config.get("engine") or {}).get("async_scheduling")
    if given is True:
        raise ConfigError("vLLM does not run async scheduling with pipeline parallelism (pp > 1): "
                          "leave engine.async_scheduling unset or set it to false", key="engine.async_scheduling")
    return False


# --trace-steps columns added for pp > 1 (one row per batch): its TP all-reduce and PP send/recv
# time summed over stages, the part of the send/recv that crossed nodes, launch-to-result latency
BATCH_TRACE_COLUMNS = ("tp_allreduce_s", "pp_sendrecv_s", "inter_node_s", "latency_s")


def record_batches(cluster, metrics) -> None:
    """Keep each batch's communication breakdown for the step trace (``batch_trace``)."""
    rows: dict = {}
    metrics.batch_rows = rows

    def on_batch(inst, step, t):
        rows[(inst.index, step)] = (t.allreduce_ns, t.sendrecv_ns, t.inter_node_ns, t.latency_ns)
    for inst in cluster.instances:
        inst.on_batch = on_batch


def batch_trace(metrics):
    """The rows ``record_batches`` kept, by (instance, step); None when not recorded."""
    return getattr(metrics, "batch_rows", None)
