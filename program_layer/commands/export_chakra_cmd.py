"""``agentservesim export-chakra CONFIG.yaml --steps N --out DIR``.

For the first N engine steps of instance 0, a folder per step with the per-rank
``step.<rank>.et`` graphs, ``system.json``, ``network.yml``, ``remote_memory.json``,
``comm_group.json`` (when TP/PP groups are used) and ``expected.json`` (our per-rank finish
times in ns), so upstream ASTRA-Sim can run the same graphs with its usual flags.
"""
from __future__ import annotations

import json
from pathlib import Path


def add_arguments(p) -> None:
    p.add_argument("config")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--out", required=True)


def main(args) -> int:
    from astrasim import write_workload
    from llmservingsim.errors import ConfigError, astrasim_errors
    from llmservingsim.execution_graph import GraphCommModel, step_graphs
    from llmservingsim.hardware import network_yaml
    from llmservingsim.step_timer import shape_of
    from program_layer.config import load_config
    from program_layer.run import build_simulation

    if args.steps < 1:
        raise ConfigError("must be >= 1", key="--steps")
    cfg = load_config(args.config)
    sim = build_simulation(cfg, step_mode=True)
    tp, pp = cfg["parallelism"]["tp"], cfg["parallelism"]["pp"]
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
    system = sim.device.system_config()
    groups = {str(s + 1): list(range(s * tp, (s + 1) * tp)) for s in range(pp)} if tp > 1 else None
    for k, shape in enumerate(shapes):
        d = out / f"step{k:05d}"
        d.mkdir(parents=True, exist_ok=True)
        graphs = step_graphs(sim.timer.perf, shape, tp, pp, comm)
        write_workload(str(d / "step"), graphs)
        (d / "system.json").write_text(json.dumps(system, indent=2) + "\n")
        (d / "network.yml").write_text(network_yaml(comm.network_for(shape.num_tokens)))
        (d / "remote_memory.json").write_text(json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}) + "\n")
        if groups:
            (d / "comm_group.json").write_text(json.dumps(groups) + "\n")
        with astrasim_errors():
            result = comm.simulator_for(shape.num_tokens).run(graphs)
        (d / "expected.json").write_text(json.dumps({
            "finish_ns": {str(r): v for r, v in enumerate(result.finish_ns)},
            "exposed_comm_ns": {str(r): v for r, v in enumerate(result.exposed_comm_ns)},
            "batch": {"prefill_tokens": shape.prefill_tokens, "prefills": shape.num_prefills,
                      "decodes": shape.num_decodes, "tokens": shape.num_tokens}}, indent=2) + "\n")
    print(f"wrote {len(shapes)} step folder(s) to {out}/ (each with the network of its collectives' regime); "
          f"run upstream ASTRA-Sim as: "
          f"--workload-configuration={out}/step00000/step --system-configuration={out}/step00000/system.json "
          f"--network-configuration={out}/step00000/network.yml "
          f"--remote-memory-configuration={out}/step00000/remote_memory.json"
          + (f" --comm-group-configuration={out}/step00000/comm_group.json" if groups else ""))
    return 0


class _Done(Exception):
    pass
