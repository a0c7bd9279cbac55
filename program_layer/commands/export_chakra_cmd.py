"""``agentservesim export-chakra CONFIG.yaml --steps N --out DIR``.

For the first N engine steps of instance 0, a folder per step with the per-rank
``step.<rank>.et`` graphs, ``system.json``, ``network.yml``, ``remote_memory.json``,
``comm_group.json`` (when TP/PP groups are used) and ``expected.json`` (our per-rank finish
times in ns), so upstream ASTRA-Sim can run the same graphs with its usual flags.

Invariant: every export replays on upstream ASTRA-Sim and ``expected.json`` is what astrasim
computes from exactly the files written next to it. Hence: a single GPU (tp = pp = 1) is
refused (upstream needs at least 2 NPUs, and there is no communication to simulate); an
``endpoint-delay`` below 1 ns is exported as 1 ns (upstream aborts on a zero delay: it would
schedule an event at the current time), and ``expected.json`` is computed with that value.

A lockstep MoE server (dp > 1 on a mixture-of-experts model: docs/data-expert-parallel.md)
exports its ``dp x tp`` GPUs: step k's folder holds one graph per GPU (each data-parallel
rank's own batch, or its dummy step, with the MoE layers' dispatch all-gather and combine
reduce-scatter, ``execution_graph.lockstep_step_graphs``) on the network the engine times
those collectives on (``EPCommModel.network``), and comm_group.json has the TP and dispatch
groups (``execution_graph.lockstep_groups``).
"""
from __future__ import annotations

import json
from pathlib import Path


def add_arguments(p) -> None:
    p.add_argument("config")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--out", required=True)


def main(args) -> int:
    from llmservingsim.errors import ConfigError, astrasim_errors
    from llmservingsim.execution_graph import (GraphCommModel, comm_groups, step_graphs, system_simulator,
                                               upstream_system, write_step_folder)
    from llmservingsim.step_timer import shape_of
    from program_layer.config import load_config
    from program_layer.run import build_simulation

    if args.steps < 1:
        raise ConfigError("must be >= 1", key="--steps")
    cfg = load_config(args.config)
    tp, pp = cfg["parallelism"]["tp"], cfg["parallelism"]["pp"]
    if isinstance(cfg.get("instances", 1), int) and (cfg["parallelism"].get("dp") or 1) > 1:
        done = _export_lockstep(cfg, args)      # None: a dense model's independent ranks (below)
        if done is not None:
            return done
    if tp * pp < 2:
        raise ConfigError("export-chakra needs tp x pp >= 2: one GPU has no communication to simulate, "
                          "and upstream ASTRA-Sim refuses a network of 1 NPU (npus_count (1) should be "
                          "larger than 1)", file=cfg.get("_source"), key="parallelism.tp",
                          line=(cfg.get("_lines") or {}).get("parallelism.tp"))
    backend = (cfg.get("network") or {}).get("backend", "analytical")
    if backend == "graph":
        raise ConfigError("export-chakra writes ASTRA-Sim network YAML for upstream's analytical backends; a "
                          "topology graph has no upstream equivalent (use backend analytical or "
                          "congestion-aware)", file=cfg.get("_source"), key="network.backend",
                          line=(cfg.get("_lines") or {}).get("network.backend"))
    sim = build_simulation(cfg, step_mode=True)
    comm = sim.timer.comm or GraphCommModel(sim.model, sim.device, tp, pp)
    shapes = []
    inst0 = sim.cluster.instances[0]
    prev = inst0._on_step

    def capture(inst, out, now, timing):
        if prev is not None:
            prev(inst, out, now, timing)
        if inst.index == 0 and len(shapes) < args.steps:
            shapes.append(shape_of(out))
            if len(shapes) == args.steps:
                raise _Done()
    for inst in sim.cluster.instances:
        inst._on_step = capture
    try:
        sim.run()
    except _Done:
        pass
    out = Path(args.out)
    system, raised = upstream_system(sim.device.system_config())
    groups = comm_groups(tp, pp)
    if comm.layout.multi_node:      # an instance across nodes: the [intra, inter] network (docs/clusters.md)
        from llmservingsim.inter_node import per_dimension_system
        groups, system = comm.layout.groups(tp, pp), per_dimension_system(system, 2)
    for k, shape in enumerate(shapes):
        d = out / f"step{k:05d}"
        d.mkdir(parents=True, exist_ok=True)
        graphs = step_graphs(sim.timer.perf, shape, tp, pp, comm)
        write_step_folder(d, graphs, system, comm.network_for(shape.num_tokens), groups)
        with astrasim_errors():
            result = system_simulator(sim.device, tp, pp, comm.network_for(shape.num_tokens), system,
                                      backend=backend, groups=groups).run(graphs)
        (d / "expected.json").write_text(json.dumps({
            "finish_ns": {str(r): v for r, v in enumerate(result.finish_ns)},
            "exposed_comm_ns": {str(r): v for r, v in enumerate(result.exposed_comm_ns)},
            "batch": {"prefill_tokens": shape.prefill_tokens, "prefills": shape.num_prefills,
                      "decodes": shape.num_decodes, "tokens": shape.num_tokens}}, indent=2) + "\n")
    if raised:
        print(f"note: the device's endpoint-delay {sim.device.system_config().get('endpoint-delay')} ns is exported "
              "as 1 ns (upstream ASTRA-Sim aborts on 0); expected.json uses 1 ns")
    if backend == "congestion-aware":
        print("note: expected.json is the congestion-aware backend's; replay with upstream's "
              "AstraSim_Analytical_Congestion_Aware binary")
    print(f"wrote {len(shapes)} step folder(s) to {out}/ (each with the network of its collectives' regime); "
          f"run upstream ASTRA-Sim as: "
          f"--workload-configuration={out}/step00000/step --system-configuration={out}/step00000/system.json "
          f"--network-configuration={out}/step00000/network.yml "
          f"--remote-memory-configuration={out}/step00000/remote_memory.json"
          + (f" --comm-group-configuration={out}/step00000/comm_group.json" if groups else ""))
    return 0


class _Done(Exception):
    pass


def _export_lockstep(cfg: dict, args):
    """export-chakra of a lockstep MoE server: the first N steps of server 0, all its ranks;
    None when server 0 is not one (a dense model's data-parallel ranks step alone)."""
    from llmservingsim.data_parallel import DUMMY_SHAPE
    from llmservingsim.errors import ConfigError, astrasim_errors
    from llmservingsim.execution_graph import (lockstep_groups, lockstep_step_graphs, system_simulator,
                                               upstream_system, write_step_folder)
    from llmservingsim.step_timer import shape_of
    from program_layer.run import build_simulation

    if not _is_moe(cfg):           # a lockstep group exists exactly for a MoE model with dp > 1
        return None
    if cfg["parallelism"]["pp"] != 1:
        raise ConfigError("export-chakra of a lockstep data-parallel MoE server is built for pp: 1 (the engine "
                          "times its MoE collectives on the dp x tp GPUs of one stage)", file=cfg.get("_source"),
                          key="parallelism.pp", line=(cfg.get("_lines") or {}).get("parallelism.pp"))
    backend = (cfg.get("network") or {}).get("backend", "analytical")
    if backend not in ("analytical", "congestion-aware"):
        raise ConfigError("export-chakra of a lockstep data-parallel MoE server writes the analytical network "
                          "its MoE collectives are timed on (use backend analytical)", file=cfg.get("_source"),
                          key="network.backend", line=(cfg.get("_lines") or {}).get("network.backend"))
    sim = build_simulation(cfg, step_mode=True)
    group = sim.cluster.servers[0].group if sim.cluster.servers else None
    if group is None:
        return None
    dp = len(group.ranks)
    steps: list = []
    current: dict = {}

    def capture(prev):
        def on_step(inst, out, now, timing):
            if prev is not None:
                prev(inst, out, now, timing)
            if inst.server == 0 and len(steps) < args.steps:
                current[inst.index] = (shape_of(out) if out else DUMMY_SHAPE, not out)
                if len(current) == dp:          # every rank of the step seen (in rank order)
                    steps.append([current.pop(i) for i in sorted(current)])
                    if len(steps) == args.steps:
                        raise _Done()
        return on_step
    for inst in sim.cluster.instances:
        inst._on_step = capture(inst._on_step)
    try:
        sim.run()
    except _Done:
        pass
    timer = group.timer
    ep = timer.ep_comm
    tp = ep.tp
    system, raised = upstream_system(sim.device.system_config())
    groups = lockstep_groups(dp, tp, ep.layout)
    if ep.layout is not None and ep.layout.multi_node:     # ranks across nodes: the [intra, inter] network
        from llmservingsim.inter_node import per_dimension_system
        system = per_dimension_system(system, 2)
    out = Path(args.out)
    for k, ranks in enumerate(steps):
        d = out / f"step{k:05d}"
        d.mkdir(parents=True, exist_ok=True)
        shapes, dummies = [s for s, _ in ranks], [x for _, x in ranks]
        graphs = lockstep_step_graphs(timer, shapes, dummies)
        write_step_folder(d, graphs, system, ep.network, groups)
        with astrasim_errors():
            result = system_simulator(sim.device, dp * tp, 1, ep.network, system, backend=backend,
                                      groups=groups).run(graphs)
        (d / "expected.json").write_text(json.dumps({
            "finish_ns": {str(r): v for r, v in enumerate(result.finish_ns)},
            "exposed_comm_ns": {str(r): v for r, v in enumerate(result.exposed_comm_ns)},
            "batch": [{"rank": r, "dummy": dummy, "prefill_tokens": s.prefill_tokens, "prefills": s.num_prefills,
                       "decodes": s.num_decodes, "tokens": s.num_tokens}
                      for r, (s, dummy) in enumerate(ranks)]}, indent=2) + "\n")
    if raised:
        print(f"note: the device's endpoint-delay {sim.device.system_config().get('endpoint-delay')} ns is exported "
              "as 1 ns (upstream ASTRA-Sim aborts on 0); expected.json uses 1 ns")
    where = "" if ep.layout is None else f" on {ep.layout.nodes} nodes of a {ep.layout.npus_count}-NPU network, the others idle"
    print(f"wrote {len(steps)} step folder(s) to {out}/ ({dp} data-parallel ranks x tp {tp} = {dp * tp} NPUs{where}, "
          f"MoE dispatch and combine on the groups of comm_group.json); run upstream ASTRA-Sim as: "
          f"--workload-configuration={out}/step00000/step --system-configuration={out}/step00000/system.json "
          f"--network-configuration={out}/step00000/network.yml "
          f"--remote-memory-configuration={out}/step00000/remote_memory.json "
          f"--comm-group-configuration={out}/step00000/comm_group.json")
    return 0



def _is_moe(cfg: dict) -> bool:
    from llmservingsim.model_config import load_model
    return load_model(cfg["model"]).is_moe
