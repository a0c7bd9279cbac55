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
