"""Build and run one simulation from a validated config; write its outputs.

``run_config`` is the single entry point used by the CLI, sweeps and the policy-search
evaluator. Layers meet only here: the engine (``llmservingsim``) is built from the config,
the program layer's Orchestrator drives it through the engine API and the four hooks.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from llmservingsim.cluster import Cluster
from llmservingsim.errors import ConfigError, StuckError
from llmservingsim.events import EventLoop
from llmservingsim.instance import Instance
from llmservingsim.kv_cache_manager import KVCacheManager
from llmservingsim.metrics import MetricsCollector
from llmservingsim.overhead_model import Framework
from llmservingsim.power import PowerModel
from llmservingsim.scheduler import Scheduler
from llmservingsim.pipeline import PipelineInstance
from llmservingsim.placement import place
from .cluster_build import BATCH_TRACE_COLUMNS, batch_trace, instance_timers, record_batches
from llmservingsim.step_timer import StepTimer

from . import outputs, package_version
from .config import config_ref, parallelism_summary, validate_config
from .dispatch import DispatchPlane
from .instances import (build_instances, check_list_instance, cluster_setup, cluster_summary, expand_instances,
                        facts_of, instance_count, is_list, placement_of)
from .orchestrator import Orchestrator
from .policies import BUILTINS, load_policy
from .policies.builtin_retention import CacheLRU
from .policies.checks import signals_recorded
from .program_hooks import ProgramHooks
from .retention import RetentionPlane
from .tier_outputs import add_tier_columns, tier_summary
from .workload_io import load_workload


@dataclass
class Simulation:
    """A built simulation: the engine, the Orchestrator and what its outputs are computed from."""
    cfg: dict
    engine: dict
    cluster: Cluster
    orchestrator: Orchestrator
    programs: list
    metrics: MetricsCollector
    memory: object
    model: object
    device: object
    timer: StepTimer
    workload_source: str
    overhead: object = None
    base_dir: Path = Path(".")
    bundle: object = None
    dpep: object = None          # data / expert parallelism (llmservingsim/dp_build.py DPSetup)
    placements: list = None         # placement.InstancePlacement per instance (instances: N)
    specs: list = None              # per instance: InstanceSpec, BuiltInstance (program_layer/instances.py)
    built: list = None

    def end_ns(self) -> int:
        """When the last call completed (later events, e.g. a protection lapsing, do not count)."""
        return max((f.info.completion_ns for f in self.cluster.finished_calls), default=0)

    def run(self, quiet: bool = True) -> None:
        """Simulate to the end; a progress bar of completed calls on a terminal unless quiet.
        While it runs, a KeyboardInterrupt from a real Ctrl-C/SIGTERM is told apart from one
        policy code raises (``signals_recorded``: the latter becomes a PolicyError)."""
        from .sweep.progress import progress
        total = sum(len(p.calls) for p in self.programs)
        with signals_recorded(), _collector_skips_the_build(), \
                progress(total, "simulating calls", quiet=quiet) as bar:
            if bar.enabled:
                done = self.cluster.on_request_finished

                def counted(info):      # reads only the CallInfo (Cluster.finish_listener_quiet)
                    done(info)
                    bar.update(note=f"t={info.completion_ns / 1e9:.0f} s")
                self.cluster.on_request_finished = counted
            self.orchestrator.start()
            self.cluster.run()


def build_simulation(config: dict, *, base_dir: Optional[Path] = None, seed: Optional[int] = None,
                     profiles: Optional[str] = None, trace_steps: bool = False,
                     step_mode: bool = False, framework: Optional[Framework] = None) -> Simulation:
    """``step_mode`` turns exact fast-forward off (the plain step-by-step loop);
    ``framework`` replaces the framework overhead (calibration in the loop). A config
    error found while building names the config file and line of its key."""
    collecting = gc.isenabled()
    # A build allocates ~10^6 objects that live as long as the simulation (the workload's token
    # ids, profile tables, the engine); young-generation collections during it would traverse
    # them again and again (a tenth of a short run's build), and they hold no garbage cycles
    # worth collecting. Outputs never depend on when the collector runs.
    gc.disable()
    try:
        return _build(config, base_dir=base_dir, seed=seed, profiles=profiles, trace_steps=trace_steps,
                      step_mode=step_mode, framework=framework)
    except ConfigError as exc:
        source = config.get("_source")
        if exc.file is None and exc.key and source:
            line = (config.get("_lines") or {}).get(exc.key) or \
                (config.get("_lines") or {}).get(exc.key.split(".")[0])
            raise ConfigError(exc.message, file=source, line=line, key=exc.key) from None
        raise
    finally:
        if collecting:
            gc.enable()


@contextmanager
def _collector_skips_the_build():
    """While a simulation runs, the garbage collector leaves alone what existed before it
    started (``gc.freeze``): every full collection would otherwise traverse the build's
    hundreds of thousands of long-lived objects once more. Objects the run creates are
    collected as usual, and afterwards everything is collectable again (``gc.unfreeze``). A
    process that froze objects itself (before forking, say) is left as it is."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _build(config: dict, *, base_dir, seed, profiles, trace_steps, step_mode, framework) -> Simulation:
    cfg = validate_config({k: v for k, v in config.items() if not k.startswith("_")})
    base = Path(base_dir or config.get("_base_dir") or ".")
    if seed is not None:           # --seed: the run's seed and the generator's
        cfg["seed"] = seed
        if "generator" in cfg["workload"]:
            cfg["workload"]["seed"] = seed
    policies = {axis: load_policy(axis, cfg["policies"][axis], base_dir=base)
                for axis in ("retention", "scheduling", "routing")}
    # what needs only the config is refused before any bundle loads (one may take seconds)
    par = cfg["parallelism"]
    if is_list(cfg) and cfg.get("cluster") is not None:
        raise ConfigError("cluster (nodes, placement) with a list of instances is not modelled: list "
                          "instances are packed into nodes in order", key="cluster")
    if cfg.get("kv_tiers") is not None and (is_list(cfg) or par["pp"] > 1 or par["dp"] > 1):
        raise ConfigError("KV tiers with pipeline or data parallelism, or with a list of instances, are "
                          "not modelled (kv_tiers needs instances: N with pp: 1 and dp: 1)", key="kv_tiers")
    specs = expand_instances(cfg)
    dispatch = DispatchPlane(policies["routing"], policies["scheduling"], len(specs))
    placed: list = []

    def place_instances(spec, device, par):
        # where each instance's GPUs are (cluster.nodes / cluster.placement; docs/clusters.md)
        placed.append(place(cfg.get("cluster"), instances=cfg["instances"], tp=par["tp"], pp=par["pp"],
                            dp=par["dp"], gpus_per_node=device.gpus_per_node, device=device.name,
                            source=config.get("_source"), lines=config.get("_lines")))
    built = build_instances(specs, cfg, base=base, profiles=profiles, framework=framework, dispatch=dispatch,
                            config=config, before_bundle=check_list_instance if is_list(cfg) else place_instances)
    b0 = built[0]
    model, device, engine, bundle, mem, overhead = b0.model, b0.device, b0.engine, b0.bundle, b0.memory, b0.overhead
    tp, pp, dp = b0.tp, b0.pp, b0.dp
    dpep = b0.dpep
    if not is_list(cfg):
        placements = placed[0]
        timers = instance_timers(placements, device, b0.make_timer, one_node=b0.timer)
        if b0.timer is None:            # spans nodes: its placement's timer
            b0.timer = timers[0]
            b0.facts = facts_of(b0)
    else:                   # heterogeneous / role-split: each instance on one node (instances.py)
        placements = None
        timers = [b.timer for b in built]
    timer = timers[0]
    core_timers = None
    if dp > 1 and placements is not None:   # each data-parallel rank on its own stages' layout
        from .cluster_build import rank_timers
        core_timers = rank_timers(placements, device, b0.make_timer, timers)
    program_hooks = ProgramHooks()
    hooks = program_hooks.as_hooks()
    if engine["scheduling_policy"] != "priority":
        hooks.priority = None
    if type(policies["retention"]) is CacheLRU:      # vLLM's own behaviour: pay nothing
        hooks.retention = hooks.victim_protection = hooks.residency = None
    loop = EventLoop()
    cluster = Cluster(loop, hooks)
    metrics = MetricsCollector(len(specs) * dp, trace=trace_steps)

    def engine_core(i: int, server: int, cls=Instance, on_step=metrics.on_step):
        b = built[server]
        kv = KVCacheManager(b.memory.num_blocks, b.engine["block_size"], b.engine["enable_prefix_caching"],
                            clock=lambda: loop.now, hooks=hooks, instance=server)
        extra = {} if cls is not PipelineInstance else {"pp": b.pp}
        return cls(i, loop, Scheduler(b.sched_cfg, kv), timers[server] if core_timers is None else core_timers[i], hooks, b.engine["async_scheduling"],
                   cluster.finished, on_step, metrics.on_decode_steps, fast_forward=not step_mode, **extra)
    if dp == 1:
        for i, b in enumerate(built):
            cluster.add_instance(engine_core(i, i, Instance if b.pp == 1 else PipelineInstance))
    else:
        from llmservingsim.dp_build import add_dp_servers

        from .cluster_build import server_layouts
        layouts = server_layouts(placements, device) if dpep is not None and dpep.moe is not None else None
        dpep = add_dp_servers(cluster, cfg["instances"], dp, engine_core, timer, dpep, metrics, layouts)
    if pp > 1 and trace_steps:
        record_batches(cluster, metrics)
    if cfg.get("kv_tiers") is not None:         # CPU / CXL KV tiers (docs/kv-tiers.md)
        from .tier_outputs import attach_cluster_tiers
        attach_cluster_tiers(cluster, cfg["kv_tiers"], device, mem, tp * pp, hooks)
    cluster_setup(specs, built, cluster, dispatch)      # roles, the routing facts (program_layer/instances.py)
    programs, source = load_workload(cfg["workload"], base, engine["block_size"], cfg["seed"])
    _check_calls_fit(programs, min(b.memory.kv_pool_tokens for b in built), min(b.engine["max_model_len"] for b in built))
    orch = Orchestrator(cluster, programs, dispatch, RetentionPlane(policies["retention"]), program_hooks)
    return Simulation(cfg, engine, cluster, orch, programs, metrics, mem, model, device, timer, source, overhead,
                      base, bundle, dpep, placements, specs, built)


def _check_calls_fit(programs, pool_tokens: int, max_model_len: int) -> None:
    """Fail before simulating if a call can never run (vLLM rejects such requests)."""
    for p in programs:
        for c in p.calls:
            total = c.prompt_tokens + c.output_tokens
            if total > pool_tokens or total > max_model_len:
                limit = "KV pool" if total > pool_tokens else "max_model_len"
                cap = pool_tokens if total > pool_tokens else max_model_len
                raise StuckError(f"program {p.session_id!r} call {c.call_index} needs {total} tokens "
                                 f"({c.prompt_tokens} prompt + {c.output_tokens} output) but the {limit} "
                                 f"holds {cap}: it can never run", file=c.source or None)


def summarize(sim: Simulation, calls: list[dict], progs: list[dict]) -> dict:
    jct = [r["jct_s"] for r in progs if r["jct_s"] != ""]
    end_ns = sim.end_ns()
    first = min((p.arrival_ns for p in sim.programs), default=0)
    last = max((p.arrival_ns for p in sim.programs), default=0)
    makespan = (end_ns - first) / 1e9
    stats = [inst.kv.prefix_stats for inst in sim.cluster.instances]
    queries = sum(s.queries for s in stats)
    hits = sum(s.hits for s in stats)
    powers = per_instance_power(sim)
    energy = sum(powers[inst.server].energy_j(inst.busy_ns, max(end_ns - inst.busy_ns, 0))
                 for inst in sim.cluster.instances)      # each engine core (a DP rank: its server's GPUs)
    gen = sum(r["output_tokens"] for r in calls)
    prompt = sum(r["input_tokens"] - r["cached_tokens"] for r in calls)
    tp = sim.cfg["parallelism"]["tp"]
    busy = sim.metrics.compute_ns + sim.metrics.comm_ns + sim.metrics.overhead_ns
    share = lambda v: round(v / busy, 6) if busy else 0.0
    return {
        "model": sim.model.name, "hardware": sim.device.name, "gpu": sim.device.gpu,
        "parallelism": parallelism_summary(sim.cfg["parallelism"]), "instances": instance_count(sim.cfg["instances"]),
        "placement": ([p.summary() for p in sim.placements] if sim.placements is not None
                      else placement_of(sim.specs, sim.built)),
        "policies": {axis: policy_label(spec) for axis, spec in sim.cfg["policies"].items()},
        "bundle": {"path": f"{sim.device.name}/{sim.model.name}/bf16/tp{tp}", "provenance": sim.bundle.provenance},
        "version": package_version(),
        "seed": sim.cfg["seed"],
        "time_shares": {"compute": share(sim.metrics.compute_ns), "exposed_comm": share(sim.metrics.comm_ns),
                        "overhead": share(sim.metrics.overhead_ns)},
        "programs": len(progs), "calls": len(calls),
        "makespan_s": round(makespan, 9), "arrival_span_s": round((last - first) / 1e9, 9),
        "jct_s": outputs.percentiles(jct),
        "ttft_s": outputs.percentiles([r["ttft_s"] for r in calls]),
        "tpot_s": outputs.percentiles([r["tpot_s"] for r in calls if r["output_tokens"] > 1]),
        "e2e_s": outputs.percentiles([r["e2e_s"] for r in calls]),
        "queueing_s": outputs.percentiles([r["queueing_s"] for r in calls]),
        "throughput": {"output_tokens_per_s": round(gen / makespan, 6) if makespan else 0.0,
                       "prompt_tokens_per_s": round(prompt / makespan, 6) if makespan else 0.0,
                       "programs_per_s": round(len(progs) / makespan, 9) if makespan else 0.0},
        "preemptions": sum(r["preemptions"] for r in calls),
        "prefix_cache_hit_rate": round(hits / queries, 6) if queries else 0.0,
        "kv_pool_tokens": sim.memory.kv_pool_tokens,
        "memory": sim.memory.breakdown(),
        "step_overhead": {"source": sim.overhead.source,
                          "framework": {k: round(v, 6) for k, v in asdict(sim.overhead.framework).items()},
                          "collectives": [{"max_bytes": r.max_bytes, "latency_us": r.latency_us,
                                           "bandwidth_gbs": r.bandwidth_gbs}
                                          for r in (sim.timer.comm.regimes if sim.timer.comm is not None else ())]},
        "energy_j": round(energy, 3),
        "steps": sum(inst.num_steps for inst in sim.cluster.instances),
        "timeseries_interval_s": sim.metrics.interval_s(end_ns),
        "engine": {k: sim.engine[k] for k in sorted(sim.engine)},
        "workload": sim.workload_source if not Path(sim.workload_source).is_absolute() else Path(sim.workload_source).name,
        **tier_summary(sim.cluster),        # "kv_tiers" only when configured
        **cluster_summary(sim, calls),      # per-instance facts, KV transfers (instances: a list only)
    }


def per_instance_power(sim: Simulation) -> list:
    """One PowerModel per instance (its device and GPU count)."""
    return [PowerModel(b.device, b.tp * b.pp) for b in sim.built]


def placement(instances: int, gpus_per_instance: int, gpus_per_node: int) -> list:
    """Instances of one TP group each on consecutive GPUs of consecutive nodes, as summary.json
    lists them (``llmservingsim.placement``, without a ``cluster`` key)."""
    return [p.summary() for p in place(None, instances=instances, tp=gpus_per_instance, pp=1, dp=1,
                                       gpus_per_node=gpus_per_node, device="device")]


def policy_label(spec) -> str:
    """A policy spec as summary.json records it: a file reference by its file name only (so a
    copied config with absolute paths reproduces the same summary)."""
    name = spec.get("name") if isinstance(spec, dict) else spec
    text = str(name)
    if ":" in text and text.split(":")[0].endswith(".py"):
        text = Path(text.split(":")[0]).name + ":" + text.split(":", 1)[1]
    if isinstance(spec, dict):
        params = ", ".join(f"{k}={v}" for k, v in sorted(spec.items()) if k != "name")
        return f"{text}({params})" if params else text
    return text


def resolved_config(sim: Simulation) -> dict:
    """The run's config with every default filled in (the resolved engine) and every path
    absolute, so that re-running it from anywhere reproduces the run."""
    import copy
    cfg = copy.deepcopy(sim.cfg)
    base = Path(sim.base_dir).resolve()

    def absolute(v):
        return str((base / v).resolve()) if isinstance(v, str) and not Path(v).is_absolute() else v
    cfg["engine"] = {k: sim.engine[k] for k in cfg["engine"]}
    cfg["parallelism"] = parallelism_summary(cfg["parallelism"])
    if "path" in cfg["workload"]:
        cfg["workload"]["path"] = absolute(cfg["workload"]["path"])
    for key in ("calibration", "profiles"):
        if cfg.get(key):
            cfg[key] = absolute(cfg[key])
    for key in ("topology", "binary"):              # files named relative to the config
        value = (cfg.get("network") or {}).get(key)
        if isinstance(value, str):
            cfg["network"][key] = absolute(value)
    for key in ("hardware", "model"):        # the paths _build resolved, made absolute
        if config_ref(key, cfg[key], base) != cfg[key]:
            cfg[key] = absolute(cfg[key])
    for axis, spec in cfg["policies"].items():
        name = spec.get("name") if isinstance(spec, dict) else spec
        if isinstance(name, str) and ":" in name and name.split(":")[0].endswith(".py"):
            path, cls = name.split(":", 1)
            name = f"{absolute(path)}:{cls}"
            if isinstance(spec, dict):
                spec["name"] = name
            else:
                cfg["policies"][axis] = name
        if isinstance(spec, dict):           # the parameters the loader resolves as paths
            for k in getattr(BUILTINS[axis].get(name), "path_params", ()):
                if isinstance(spec.get(k), str):
                    spec[k] = absolute(spec[k])
    return {k: v for k, v in cfg.items() if v is not None}


TRACE_COLUMNS = ["instance", "step", "start_s", "duration_s", "prefills", "prefill_tokens", "decodes",
                 "sequences", "compute_s", "exposed_comm_s", "overhead_s"]


def write_outputs(sim: Simulation, out_dir: Path, trace_steps: Optional[Path] = None,
                  calls: Optional[list] = None) -> dict:
    """Write the run's files into ``out_dir`` (in place; ``run_config`` stages it), summary.json
    last. ``calls``: the run's ``outputs.call_rows`` when the caller already has them."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    import yaml
    (out_dir / "config.yaml").write_text("# the run's resolved config: `agentservesim run config.yaml` reproduces it\n"
                                         + yaml.safe_dump(resolved_config(sim), sort_keys=False))
    if calls is None:
        calls = outputs.call_rows(sim.cluster.finished_calls, sim.programs)
    progs = outputs.program_rows(sim.orchestrator.program_results())
    outputs.write_csv(out_dir / "calls.csv", outputs.CALL_COLUMNS + add_tier_columns(sim.cluster, calls), calls)
    outputs.write_csv(out_dir / "programs.csv", outputs.PROGRAM_COLUMNS, progs)
    if not is_list(sim.cfg):
        power = PowerModel(sim.device, sim.cfg["parallelism"]["tp"] * sim.cfg["parallelism"]["pp"])
        ts = sim.metrics.rows(sim.end_ns(), sim.memory.kv_bytes_per_token * sim.memory.block_size,
                              sim.memory.weight_bytes, power)      # per GPU: each rank holds its share
    else:                   # each instance its own memory plan and device
        ts = sim.metrics.rows(sim.end_ns(), [b.memory.kv_bytes_per_token * b.memory.block_size for b in sim.built],
                              [b.memory.weight_bytes for b in sim.built], per_instance_power(sim))
    cols = ["time_s", "instance", "running", "waiting", "kv_utilization", "memory_used_gib",
            "prompt_tokens_per_s", "generation_tokens_per_s", "busy_fraction", "power_w"]
    outputs.write_csv(out_dir / "timeseries.csv", cols, ts)
    if trace_steps is not None and sim.metrics.trace_rows is not None:
        Path(trace_steps).parent.mkdir(parents=True, exist_ok=True)
        if sim.dpep is not None and sim.dpep.trace_extra is not None:     # lockstep steps: comm broken down
            from llmservingsim.dp_build import trace_rows
            cols, rows = trace_rows(TRACE_COLUMNS, sim.metrics.trace_rows, sim.dpep.trace_extra, fmt_ns)
            outputs.write_csv(Path(trace_steps), cols, rows, atomic=True)
        else:
            extra = batch_trace(sim.metrics)        # pp > 1: TP vs PP vs inter-node comm per batch
            cols = TRACE_COLUMNS + list(BATCH_TRACE_COLUMNS) if extra is not None else TRACE_COLUMNS
            outputs.write_csv(Path(trace_steps), cols, (
                dict(zip(cols, (i, k, fmt_ns(start), fmt_ns(dur), npf, pt, nd, ns, fmt_ns(comp), fmt_ns(comm),
                                fmt_ns(ovh)) + (tuple(map(fmt_ns, extra[(i, k)])) if extra is not None else ())))
                for (i, k, start, dur, npf, pt, nd, ns, comp, comm, ovh) in sim.metrics.trace_rows), atomic=True)
    summary = summarize(sim, calls, progs)
    if sim.dpep is not None:
        summary["data_parallel"] = sim.dpep.summary()
    outputs.write_json(out_dir / "summary.json", summary)
    return summary


def fmt_ns(ns: int) -> str:
    return outputs.fmt(ns / 1e9)


def run_config(config: dict, out_dir, *, base_dir: Optional[Path] = None, seed: Optional[int] = None,
               step_mode: bool = False, quiet: bool = True, profiles: Optional[str] = None,
               trace_steps: Optional[Path] = None, plot: bool = False) -> dict:
    """Simulate ``config`` and write config.yaml, calls.csv, programs.csv, timeseries.csv,
    summary.json (and, with ``plot``, plots/) into ``out_dir``, atomically: the files are
    written into a temporary sibling that replaces ``out_dir`` only when all are complete
    (``outputs.staged_folder``), so ``out_dir`` never mixes an old run with a new one."""
    out_dir = Path(out_dir)
    with outputs.staged_folder(out_dir) as stage:
        if trace_steps is not None and Path(trace_steps).resolve().is_relative_to(out_dir.resolve()):
            trace_steps = stage / Path(trace_steps).resolve().relative_to(out_dir.resolve())
        summary, _ = simulate(config, stage, base_dir=base_dir, seed=seed, step_mode=step_mode, quiet=quiet,
                              profiles=profiles, trace_steps=trace_steps)
        if plot:
            from program_layer.sweep.run_plots import render_run_plots
            render_run_plots(stage)
    return summary


def simulate(config: dict, out_dir: Path, *, base_dir: Optional[Path] = None, seed: Optional[int] = None,
             step_mode: bool = False, quiet: bool = True, profiles: Optional[str] = None,
             trace_steps: Optional[Path] = None) -> tuple:
    """Simulate ``config`` and write its files into ``out_dir`` as it is (not staged: for a
    caller that stages a folder of its own, e.g. ``validate``). Returns (summary, call rows)."""
    sim = build_simulation(config, base_dir=base_dir, seed=seed, profiles=profiles,
                           trace_steps=trace_steps is not None, step_mode=step_mode)
    sim.run(quiet=quiet)
    calls = outputs.call_rows(sim.cluster.finished_calls, sim.programs)
    return write_outputs(sim, out_dir, trace_steps, calls), calls
