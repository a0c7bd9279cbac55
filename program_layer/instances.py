"""Per-instance specs and their construction: homogeneous (``instances: N``) and
heterogeneous / role-split (``instances:`` a list of mappings) clusters.

``instances: N`` gives N specs of the top-level ``hardware``, ``model``, ``parallelism`` and
``engine`` with role ``both``; the build is the one a single instance always had, shared by
the N (one device, bundle, memory plan and StepTimer). A list gives, per mapping and
``count`` times, a spec whose keys override the top-level ones (``parallelism`` and ``engine``
key by key), with a ``role``: ``prefill``, ``decode`` or ``both``. Identical specs share
one build, so a list of equal mappings costs what ``instances: N`` costs.

Invariants the checks here keep (each a ConfigError naming ``instances[k].<key>``):
- every instance serves the same model family (one architecture ``model_type`` and one
  vocabulary: one tokenizer), and one ``engine.block_size`` (the workload's token blocks
  are hashed once);
- at least one instance can prefill (role prefill or both) and one can decode (decode or
  both);
- with roles (any instance not ``both``): the instances that can exchange KV run the same
  model with pp = 1, their TP sizes divide one another (vLLM's NIXL connector requires
  it), and instances on different nodes both have a device ``inter_node`` block (the KV
  transfer crosses the network between the nodes: ``kv_transfer.py``). Different devices
  may pair (vLLM's NIXL connector moves KV between different GPUs when model and KV layout
  match); they always sit on different nodes (placement below).

Placement: instances fill the GPUs of a node in order while they fit and use the same
device; otherwise the next node begins (for ``instances: N`` the layout summary.json always
reported).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from llmservingsim.errors import ConfigError

from .config import config_ref, merged_instance, parallelism_summary, resolve_engine

# Reference shapes of the speed figures routing policies see (InflightLoad.decode_step_s,
# prefill_step_s): a decode step of 32 sequences at 1,024 tokens of context, and one
# 2,048-token prefill with no prior context.
REF_DECODES, REF_DECODE_CTX, REF_PREFILL_TOKENS = 32, 1024, 2048


@dataclass
class InstanceSpec:
    """One instance as configured. ``parallelism`` and ``engine`` are the merged mappings
    (``engine`` before device defaults are resolved); ``key_prefix`` names the config item
    it came from in errors ("" for ``instances: N``)."""
    index: int
    hardware: str
    model: str
    parallelism: dict
    engine: dict
    role: str = "both"
    key_prefix: str = ""

    def build_key(self) -> tuple:
        return (self.hardware, self.model, repr(sorted(self.parallelism.items())),
                repr(sorted(self.engine.items())))


@dataclass
class BuiltInstance:
    """What an instance is made of (shared by identical specs)."""
    model: object
    device: object
    engine: dict
    bundle: object
    memory: object
    overhead: object
    timer: object
    sched_cfg: object
    tp: int
    pp: int
    dp: int = 1
    ep: int = 1
    dpep: object = None                    # dp_build.DPSetup (MoE data / expert parallelism)
    make_timer: object = None              # layout -> StepTimer (placement layouts spanning nodes)
    facts: tuple = field(default=())       # static InflightLoad fields but role (facts_of)


def instance_count(instances) -> int:
    return sum(item.get("count", 1) for item in instances) if isinstance(instances, list) else instances


def is_list(cfg: dict) -> bool:
    return isinstance(cfg["instances"], list)


# ---- validation (called by config.validate_config for a list) ----------------------------
def expand_instances(cfg: dict) -> list[InstanceSpec]:
    """One spec per instance, in index order."""
    if not is_list(cfg):
        return [InstanceSpec(i, cfg["hardware"], cfg["model"], cfg["parallelism"], cfg["engine"])
                for i in range(cfg["instances"])]
    specs = []
    for k, item in enumerate(cfg["instances"]):
        m = merged_instance(cfg, item)
        for _ in range(item.get("count", 1)):
            specs.append(InstanceSpec(len(specs), m["hardware"], m["model"], dict(m["parallelism"]),
                                      dict(m["engine"]), item.get("role", "both"), f"instances[{k}]."))
    return specs


# ---- construction ---------------------------------------------------------------------------
def build_instances(specs: list, cfg: dict, *, base: Path, profiles, framework, dispatch,
                    config: dict, before_bundle=None) -> list[BuiltInstance]:
    """One BuiltInstance per spec (identical specs share one); checks the cluster-level
    invariants of the module docstring. ``before_bundle(spec, device, parallelism)`` runs once per
    distinct build after the cheap checks and before the bundle is loaded (a bundle derived
    or synthesized on the fly takes seconds: a config error should not wait for it)."""
    built, cache = [], {}
    for spec in specs:
        key = spec.build_key()
        if key not in cache:
            try:
                cache[key] = _build_one(spec, cfg, base, profiles, framework, dispatch, config, before_bundle)
            except ConfigError as exc:
                if spec.key_prefix and exc.file is None and exc.key and not exc.key.startswith("instances"):
                    raise ConfigError(exc.message, key=spec.key_prefix + exc.key) from None
                raise
        built.append(cache[key])
    if len(cache) > 1:
        _check_family(specs, built)
    return built


def _build_one(spec: InstanceSpec, cfg, base, profiles, framework, dispatch, config,
               before_bundle=None) -> BuiltInstance:
    """Everything one instance is made of but its placement: device, model, resolved engine,
    bundle (measured, derived or synthesized), memory plan, overhead, and ``make_timer(layout)``
    (a StepTimer for a placement layout; ``timer`` is the one for ``None``, one node)."""
    from llmservingsim.derive_bundle import load_or_derive
    from llmservingsim.hardware import load_device
    from llmservingsim.memory_model import plan_memory
    from llmservingsim.model_config import load_model
    from llmservingsim.overhead_model import load_overhead
    from llmservingsim.perf_model import PerformanceModel
    from llmservingsim.scheduler import SchedulerConfig
    from llmservingsim.step_timer import StepTimer

    from .cluster_build import pipeline_async_scheduling

    model = load_model(config_ref("model", spec.model, base))
    device = load_device(config_ref("hardware", spec.hardware, base))
    par = spec.parallelism
    tp, pp, dp, ep = par["tp"], par["pp"], par.get("dp", 1), par.get("ep", 1)
    if dp > 1 or ep > 1:         # data / expert parallelism: docs/data-expert-parallel.md
        from llmservingsim.expert_parallel import check_parallelism
        check_parallelism(model, device.gpus_per_node, device.name, tp, pp, dp, ep)
        if pp > 1 and model.is_moe:     # a dense model's ranks are independent engine cores: any pp
            raise ConfigError("pipeline parallelism together with data parallelism is not modelled for a "
                              "mixture-of-experts model (its ranks step in lockstep waves, and how vLLM runs "
                              "those waves with pp > 1 is not modelled): give pp: 1 with dp / ep > 1",
                              key="parallelism.pp")
    engine = resolve_engine(spec.engine, device.cuda_memory_bytes / (1 << 30), device.gpu, model.max_model_len,
                            dispatch.engine_args)
    if pp > 1:                                  # vLLM 0.19: no async scheduling with pp > 1
        engine["async_scheduling"] = pipeline_async_scheduling(config)
    if before_bundle is not None:
        before_bundle(spec, device, par)
    prof_root = profiles or cfg.get("profiles")
    if prof_root and not Path(prof_root).is_absolute():
        prof_root = str(base / prof_root)
    bundle = load_or_derive(device.name, model.name, tp, root=Path(prof_root) if prof_root else None,
                            tp_key="parallelism.tp", device=device, spec=model)
    if model.is_moe:            # a MoE bundle without moe.csv: derived from the nearest measured one
        from llmservingsim.expert_parallel import with_moe
        bundle = with_moe(bundle, model, device)
    mem = plan_memory(model, device, tp, pp, engine["block_size"], engine["gpu_memory_utilization"],
                      engine["max_num_batched_tokens"], engine["max_num_seqs"], engine["kv_pool_tokens"],
                      dp=dp, ep=ep)
    if mem.num_blocks < 2:
        raise ConfigError(f"no memory left for the KV cache: {mem.describe()}", key="engine.gpu_memory_utilization")
    if mem.kv_pool_tokens < engine["max_model_len"] and spec.engine["max_model_len"] is None:
        engine["max_model_len"] = mem.kv_pool_tokens    # vLLM would refuse; cap like --max-model-len
    dpep = None
    if model.is_moe and (dp > 1 or ep > 1):
        from llmservingsim.dp_build import moe_parallel_setup
        dpep = moe_parallel_setup(model, device, bundle, tp, pp, dp, ep)
        bundle = dpep.bundle
    perf = PerformanceModel(model, bundle, pp)
    overhead = load_overhead(device.name).for_model(model.name)
    if cfg.get("calibration"):
        from .calibrate import load_calibration
        overhead = load_calibration(base / cfg["calibration"], {**cfg, "hardware": spec.hardware}, overhead)
    if framework is not None:
        overhead = replace(overhead, framework=framework)
    choice = None
    if cfg.get("network") is not None:
        from llmservingsim.network_choice import network_choice
        choice = network_choice(cfg["network"], base=base, ranks=tp * pp, source=config.get("_source"),
                                lines=config.get("_lines"))

    def make_timer(layout):
        return StepTimer(perf, comm_model(model, device, tp, pp, overhead, perf, choice, layout), overhead.framework)

    sched_cfg = SchedulerConfig(engine["max_num_seqs"], engine["max_num_batched_tokens"],
                                engine["long_prefill_token_threshold"], engine["enable_chunked_prefill"],
                                engine["scheduling_policy"], engine["max_model_len"])
    # the one-node timer; an instance spanning nodes gets its timer (and routing facts) from
    # its placement (run.py)
    one_node = tp * pp <= device.gpus_per_node
    b = BuiltInstance(model, device, engine, bundle, mem, overhead, make_timer(None) if one_node else None,
                      sched_cfg, tp, pp, dp=dp, ep=ep, dpep=dpep, make_timer=make_timer)
    if one_node:
        b.facts = facts_of(b)
    return b


def comm_model(model, device, tp: int, pp: int, overhead, perf, choice=None, layout=None):
    """The step timer's communication model: None without TP or PP; the execution-graph model on
    the instance's network (``layout``: a placement spanning nodes); the user's upstream
    ASTRA-Sim binary around it with ``network: {backend: astra-sim}``."""
    if tp == 1 and pp == 1:
        return None
    from llmservingsim.execution_graph import GraphCommModel
    comm = GraphCommModel(model, device, tp, pp, regimes=overhead.regimes_for(tp), choice=choice, layout=layout)
    if choice is not None and choice.backend == "astra-sim":     # each step graph run by the user's binary
        from llmservingsim.upstream_comm import UpstreamCommModel
        return UpstreamCommModel(comm, perf, choice.binary, device.system_config())
    return comm


def facts_of(b: BuiltInstance) -> tuple:
    """Static facts a routing policy sees (InflightLoad after ``role``): device, gpus,
    peak_tflops (per GPU), memory_bandwidth_gbs (per GPU), decode_step_s, prefill_step_s
    (the modelled step times at the reference shapes above: compute and framework overhead;
    TP communication only when it is timed in-process, never by an upstream binary)."""
    from llmservingsim.perf_model import BatchShape
    from llmservingsim.step_timer import StepTimer
    # a fresh memo (the run's timer stays untouched); an upstream binary's in-process twin
    comm = getattr(b.timer.comm, "inner", b.timer.comm)
    timer = StepTimer(b.timer.perf, comm, b.timer.framework)
    n, ctx, t = REF_DECODES, REF_DECODE_CTX, REF_PREFILL_TOKENS
    decode = timer.time_shape(BatchShape(0, 0.0, 0, n, n * (ctx + 1), ctx + 1, ctx + 1)).total_ns
    prefill = timer.time_shape(BatchShape(t, 0.0, 1, 0, 0, 0, 0)).total_ns
    return (b.device.name, b.tp * b.pp, float(b.device.peak_bf16_tflops), float(b.device.memory_bandwidth_gbs),
            decode / 1e9, prefill / 1e9)


def _check_family(specs: list, built: list) -> None:
    first = built[0].model
    for spec, b in zip(specs, built):
        m = b.model
        if (m.architecture, m.vocab_size) != (first.architecture, first.vocab_size):
            raise ConfigError(f"model {m.name} ({m.architecture or '?'}, vocabulary {m.vocab_size}) is not of the "
                              f"family of instance 0's {first.name} ({first.architecture or '?'}, vocabulary "
                              f"{first.vocab_size}): one cluster serves one tokenizer and architecture",
                              key=spec.key_prefix + "model")


def placement_of(specs: list, built: list) -> list:
    """Per instance: {instance, node, gpus} (module docstring)."""
    out, node, used, device = [], -1, 0, None
    for spec, b in zip(specs, built):
        g = b.tp * b.pp
        per_node = b.device.gpus_per_node
        if node < 0 or b.device.name != device or used + g > per_node:
            node, used, device = node + 1, 0, b.device.name
        out.append({"instance": spec.index, "node": node, "gpus": list(range(used, used + g))})
        used += g
    return out


def check_disaggregation(specs: list, built: list, places: list) -> None:
    """The invariants a KV transfer between instances needs (module docstring)."""
    node, tp0 = places[0]["node"], built[0].tp
    for s, b, p in zip(specs, built, places):
        where = s.key_prefix or "instances."
        if b.pp != 1:
            raise ConfigError("prefill/decode roles need pp = 1 on every instance (a pipeline's KV transfer "
                              "is not modelled)", key=where + "parallelism.pp")
        if b.model.name != built[0].model.name:
            raise ConfigError(f"prefill/decode roles need one model on every instance ({b.model.name} vs "
                              f"{built[0].model.name}): the KV moves between them", key=where + "model")
        if max(b.tp, tp0) % min(b.tp, tp0):
            raise ConfigError(f"tp {b.tp} and instance 0's tp {tp0}: with prefill/decode roles one TP size must "
                              "divide the other (vLLM's NIXL connector maps KV heads between them)",
                              key=where + "parallelism.tp")
        if p["node"] != node:
            for other in (b.device, built[0].device):
                if other.inter_node is None:
                    raise ConfigError(f"instance {s.index} is on node {p['node']}, instance 0 on node {node}: a KV "
                                      f"transfer between nodes crosses the network between them, but device "
                                      f"{other.name} ({other.path}) has no inter_node block; add one, or with "
                                      "prefill/decode roles fit every instance on one node", key="instances")


def check_list_instance(spec: InstanceSpec, device, par: dict) -> None:
    """What an instance of a list does not model yet (each a ConfigError naming the key):
    data or expert parallelism, and an instance larger than one node (list instances are
    packed into nodes in order, see placement_of). Run before its bundle is loaded."""
    where = spec.key_prefix or "instances."
    dp, ep = par.get("dp", 1), par.get("ep", 1)
    if dp > 1 or ep > 1:
        raise ConfigError("data / expert parallelism in a list of instances is not modelled "
                          "(use instances: N)", key=where + ("parallelism.dp" if dp > 1 else "parallelism.ep"))
    if par["tp"] * par["pp"] > device.gpus_per_node:
        raise ConfigError(f"tp x pp = {par['tp'] * par['pp']} GPUs, but a {device.name} node has "
                          f"{device.gpus_per_node}: in a list of instances each must fit in one node",
                          key=where + "parallelism.tp")


def has_roles(specs: list) -> bool:
    return any(s.role != "both" for s in specs)


def cluster_setup(specs: list, built: list, cluster, dispatch) -> None:
    """Hand the routing policy its static facts and, with roles, install P/D
    disaggregation (the KV transfer model on the instances' placement) and role pairing."""
    dispatch.facts = [(s.role,) + b.facts for s, b in zip(specs, built)]
    if not has_roles(specs):
        return
    from llmservingsim.disagg import Disaggregation
    from llmservingsim.kv_transfer import InstancePlace, KVTransferModel

    from .roles import RolePairing
    places = placement_of(specs, built)
    check_disaggregation(specs, built, places)
    model = KVTransferModel([InstancePlace(p["node"], tuple(p["gpus"]), b.device, b.model.kv_bytes_per_token(b.tp, b.pp))
                             for p, b in zip(places, built)], built[0].engine["block_size"])
    cluster.disagg = Disaggregation(cluster, model)
    dispatch.pairing = RolePairing([s.role for s in specs])


def cluster_summary(sim, calls: list) -> dict:
    """summary.json's per-instance section (``instances:`` a list only; nothing otherwise,
    so a homogeneous run's summary keeps its bytes): each instance's role, device, model,
    parallelism, bundle and provenance, KV pool, engine batch limits, routing speed facts and
    calls completed there; with roles, the KV transfers."""
    if not is_list(sim.cfg):
        return {}
    served: dict = {}
    for r in calls:
        served[r["instance"]] = served.get(r["instance"], 0) + 1
    rows = []
    for spec, b, inst in zip(sim.specs, sim.built, sim.cluster.instances):
        _, _, _, _, decode_s, prefill_s = b.facts
        rows.append({
            "instance": spec.index, "role": spec.role, "hardware": b.device.name, "gpu": b.device.gpu,
            "model": b.model.name, "parallelism": parallelism_summary({k: spec.parallelism[k] for k in sorted(spec.parallelism)}),
            "bundle": {"path": f"{b.device.name}/{b.model.name}/bf16/tp{b.tp}", "provenance": b.bundle.provenance},
            "kv_pool_tokens": b.memory.kv_pool_tokens,
            "max_num_seqs": b.engine["max_num_seqs"], "max_num_batched_tokens": b.engine["max_num_batched_tokens"],
            "decode_step_s": round(decode_s, 9), "prefill_step_s": round(prefill_s, 9),
            "calls_completed": served.get(spec.index, 0), "steps": inst.num_steps,
            "busy_s": round(inst.busy_ns / 1e9, 9),
        })
    out = {"instance_specs": rows}
    disagg = sim.cluster.disagg
    if disagg is not None:
        recs = disagg.records
        secs = [(r.end_ns - r.start_ns) / 1e9 for r in recs]
        from . import outputs
        out["kv_transfers"] = {"count": len(recs), "blocks": sum(r.blocks for r in recs),
                               "bytes": sum(r.bytes for r in recs), "transfer_s": outputs.percentiles(secs)}
    return out
