"""The one way to load a run configuration (YAML file or mapping).

Every key is declared here with its type and default; an unknown key or a wrong type is a
:class:`ConfigError` naming the key (and the file and line when the config came from a
file). Engine defaults follow vLLM 0.19 ``vllm serve`` (docs/configuration.md, "Engine defaults") and are
resolved against the device in :func:`resolve_engine`.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Optional

import yaml

from llmservingsim.errors import ConfigError, parse_yaml, read_text

from .policies.base import DECODE_ROLES, PREFILL_ROLES, ROLES
from .tier_config import validate_tiers

_NUM = (int, float)
# key -> (accepted types, default); None default = resolved later / optional
ENGINE_KEYS = {
    "max_num_seqs": ((int,), None),
    "max_num_batched_tokens": ((int,), None),
    "block_size": ((int,), 16),
    "gpu_memory_utilization": (_NUM, 0.9),
    "kv_pool_tokens": ((int,), None),
    "enable_prefix_caching": ((bool,), True),
    "enable_chunked_prefill": ((bool,), True),
    "long_prefill_token_threshold": ((int,), 0),
    "scheduling_policy": ((str,), None),       # fcfs | priority; default from the scheduling policy
    "async_scheduling": ((bool,), True),
    "max_model_len": ((int,), None),
}
# Every released call's routing decision reads every instance's load (the routing policy is
# given one entry per instance) and a completion's retention decision visits every instance,
# so a run costs O(calls x instances) however few instances are busy (~10 us per instance per
# call: 100000 instances take about 1 s per call). Idle instances themselves are nearly free
# (their KV blocks are created on first use), and the GPUs per instance do not matter: one
# instance is one engine whatever its tp x pp.
MAX_INSTANCES = 10_000

TOP_KEYS = {
    "model": ((str,), "meta-llama/Llama-3.1-8B"),
    "hardware": ((str,), "RTXPRO6000"),
    "profiles": ((str,), None),
    "parallelism": ((dict,), None),
    "instances": ((int, list), 1),     # a list: per-instance mappings (program_layer/instances.py)
    "engine": ((dict,), None),
    "workload": ((dict,), None),
    "policies": ((dict,), None),
    "seed": ((int,), 0),
    "name": ((str,), None),
    "calibration": ((str,), None),     # CAL.yaml written by `agentservesim calibrate` (relative to the config)
    "network": ((dict,), None),         # backend / topology / gpus (llmservingsim/network_choice.py)
    "cluster": ((dict,), None),         # nodes / placement (llmservingsim/placement.py, docs/clusters.md)
    "kv_tiers": ((dict,), None),        # CPU / CXL KV tiers (program_layer/tier_config.py)
}
# dp, ep: data and expert parallelism inside one instance (docs/data-expert-parallel.md);
# ep is 1 (off) or dp x tp (vLLM's --enable-expert-parallel), checked against the model in run.py
PARALLELISM_KEYS = {"tp": ((int,), 1), "pp": ((int,), 1), "dp": ((int,), 1), "ep": ((int,), 1)}


def parallelism_summary(par: dict) -> dict:
    """``parallelism`` as summary.json and config.yaml record it: dp and ep only when used
    (so the runs without them keep their files)."""
    return {k: v for k, v in par.items() if k in ("tp", "pp") or v != 1}


# instances: a list of these per-instance mappings (program_layer/instances.py builds them)
INSTANCE_KEYS = {
    "hardware": ((str,), None),
    "model": ((str,), None),
    "parallelism": ((dict,), None),
    "engine": ((dict,), None),
    "role": ((str,), "both"),
    "count": ((int,), 1),
}
POLICY_KEYS = {"retention": ((str, dict), "cache-lru"), "scheduling": ((str, dict), "fcfs"),
               "routing": ((str, dict), "round-robin")}
WORKLOAD_KEYS = {
    "path": ((str,), None), "generator": ((str,), None), "trace": ((str,), None),
    "programs": ((int,), None), "rate_jps": (_NUM, None), "seed": ((int,), None),
    "limit": ((int,), None), "time_scale": (_NUM, None), "params": ((dict,), None),
    "max_idle_s": (_NUM, None),
}


class _Lines:
    """Map dotted key paths to YAML line numbers for error messages."""

    def __init__(self, text: Optional[str]):
        self.lines: dict[str, int] = {}
        if text:
            try:
                self._walk(yaml.compose(text), "")
            except yaml.YAMLError:
                pass

    def _walk(self, node, prefix):
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                path = f"{prefix}{k.value}"
                self.lines[path] = k.start_mark.line + 1
                self._walk(v, path + ".")
        elif isinstance(node, yaml.SequenceNode) and prefix:    # list items: key[0], key[0].sub
            for i, v in enumerate(node.value):
                path = f"{prefix[:-1]}[{i}]"
                self.lines[path] = v.start_mark.line + 1
                self._walk(v, path + ".")

    def get(self, key: str) -> Optional[int]:
        return self.lines.get(key)


def _check(section: dict, schema: dict, prefix: str, src: Optional[str], lines: _Lines) -> dict:
    out = {}
    for key, value in section.items():
        full = f"{prefix}{key}"
        if key not in schema:
            raise ConfigError(f"unknown key (valid: {', '.join(sorted(schema))})", file=src,
                              line=lines.get(full), key=full)
        types, _ = schema[key]
        if value is not None and (not isinstance(value, types) or (isinstance(value, bool) and bool not in types)):
            want = " or ".join(t.__name__ for t in types)
            raise ConfigError(f"expected {want}, got {type(value).__name__} ({value!r})", file=src,
                              line=lines.get(full), key=full)
        out[key] = value
    for key, (_, default) in schema.items():
        if out.get(key) is None:
            out[key] = copy.deepcopy(default)
    return out


def validate_config(raw: Any, *, source: Optional[str] = None, text: Optional[str] = None) -> dict:
    """Validated copy of a config mapping with every default filled in."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError("a config must be a mapping of keys", file=source)
    lines = _Lines(text)
    cfg = _check(raw, TOP_KEYS, "", source, lines)
    cfg["parallelism"] = _check(cfg["parallelism"] or {}, PARALLELISM_KEYS, "parallelism.", source, lines)
    cfg["engine"] = _check(cfg["engine"] or {}, ENGINE_KEYS, "engine.", source, lines)
    cfg["policies"] = _check(cfg["policies"] or {}, POLICY_KEYS, "policies.", source, lines)
    cfg["kv_tiers"] = validate_tiers(cfg["kv_tiers"], _check, source, lines)
    wl = cfg["workload"]
    if wl is None:
        raise ConfigError("missing workload (give workload.path or workload.generator)", file=source, key="workload")
    wl = _check(wl, WORKLOAD_KEYS, "workload.", source, lines)
    sources = [k for k in ("path", "generator") if wl.get(k)]
    if len(sources) != 1:
        raise ConfigError("give exactly one of workload.path (JSONL, or a trace with workload.trace) "
                          "and workload.generator", file=source, line=lines.get("workload"), key="workload")
    cfg["workload"] = {k: v for k, v in wl.items() if v is not None}
    listed = isinstance(cfg["instances"], list)
    for key, minimum in (("parallelism.tp", 1), ("parallelism.pp", 1), ("parallelism.dp", 1),
                         ("parallelism.ep", 1)) + ((("instances", 1),) if not listed else ()):
        sec, _, name = key.rpartition(".")
        val = (cfg[sec] if sec else cfg)[name]
        if val < minimum:
            raise ConfigError(f"must be >= {minimum}", file=source, line=lines.get(key), key=key)
    if not listed and cfg["instances"] > MAX_INSTANCES:
        raise ConfigError(f"{cfg['instances']} instances is more than the simulator supports (at most "
                          f"{MAX_INSTANCES}): every call's routing decision reads every instance's load, so "
                          "time grows with calls x instances", file=source, line=lines.get("instances"),
                          key="instances")
    eng = cfg["engine"]
    for name in ("max_num_seqs", "max_num_batched_tokens", "block_size", "kv_pool_tokens", "max_model_len"):
        if eng[name] is not None and eng[name] < 1:
            raise ConfigError("must be >= 1", file=source, line=lines.get(f"engine.{name}"), key=f"engine.{name}")
    if eng["long_prefill_token_threshold"] < 0:
        raise ConfigError("must be >= 0 (0 = off)", file=source, line=lines.get("engine.long_prefill_token_threshold"),
                          key="engine.long_prefill_token_threshold")
    if eng["block_size"] not in (1, 8, 16, 32, 64, 128):
        raise ConfigError("must be one of 1, 8, 16, 32, 64, 128 (vLLM's block sizes)", file=source,
                          line=lines.get("engine.block_size"), key="engine.block_size")
    if not 0 < eng["gpu_memory_utilization"] <= 1:
        raise ConfigError("must be in (0, 1]", file=source, line=lines.get("engine.gpu_memory_utilization"),
                          key="engine.gpu_memory_utilization")
    if eng["scheduling_policy"] not in (None, "fcfs", "priority"):
        raise ConfigError("must be fcfs or priority", file=source, key="engine.scheduling_policy")
    if listed:                      # per-instance mappings, checked over the top-level values
        cfg["instances"] = check_instance_list(cfg, source, lines)
    return cfg


def load_config(path) -> dict:
    """Read and validate a YAML config file; relative paths inside stay relative to it."""
    path = Path(path)
    text = read_text(path, what="config")
    raw = parse_yaml(text, file=str(path))
    cfg = validate_config(raw, source=str(path), text=text)
    cfg["_base_dir"] = str(path.resolve().parent)
    cfg["_source"] = str(path)
    cfg["_lines"] = _Lines(text).lines      # for errors found later (build_simulation)
    return cfg


def resolve_engine(engine: dict, device_memory_gib: float, gpu_name: str, model_max_len: int,
                   scheduling_engine_args: dict) -> dict:
    """Fill vLLM 0.19 ``vllm serve`` defaults that depend on the device (EngineArgs batch
    defaults: >= 70 GiB and not an A100 -> 8192 tokens / 1024 seqs, else 2048 / 256)."""
    e = dict(engine)
    big = device_memory_gib >= 70 and "A100" not in gpu_name
    if e["max_num_seqs"] is None:
        e["max_num_seqs"] = 1024 if big else 256
    e["max_model_len"] = e["max_model_len"] or model_max_len
    if e["max_num_batched_tokens"] is None:
        e["max_num_batched_tokens"] = min(8192 if big else 2048, e["max_num_seqs"] * e["max_model_len"])
    e["max_num_seqs"] = min(e["max_num_seqs"], e["max_num_batched_tokens"])
    if e["scheduling_policy"] is None:
        # a scheduling policy exists to set priorities: one that does not name an engine
        # policy gets vLLM's priority queue (the built-in fcfs asks for "fcfs")
        e["scheduling_policy"] = scheduling_engine_args.get("scheduling_policy", "priority")
    return e


def config_ref(key: str, ref: str, base: Path) -> str:
    """``model`` or ``hardware`` as load_model / load_device take it: a registry name stays
    as it is; a path (hardware: a file name with a suffix; model: a config.json, or a path of
    more than org/name that exists) relative to the config's folder is joined to it."""
    p = Path(ref)
    if key == "hardware":
        is_path = bool(p.suffix)
    else:
        is_path = (p.suffix == ".json" or len(p.parts) > 2) and (base / ref).exists()
    return str(base / ref) if is_path and not p.is_absolute() else ref


def check_instance_list(cfg: dict, source: Optional[str], lines) -> list:
    """The validated list (each mapping's given keys, ``role`` filled in). Every value is
    checked as the top-level key of the same name would be, after merging it over the
    top-level defaults."""
    items = cfg["instances"]
    if not items:
        raise ConfigError("an empty list: give an instance count or at least one mapping", file=source,
                          line=lines.get("instances"), key="instances")
    out, roles, block_sizes = [], [], []
    for k, item in enumerate(items):
        prefix = f"instances[{k}]"
        line = lines.get(prefix) or lines.get("instances")
        if not isinstance(item, dict):
            raise ConfigError(f"expected a mapping of {', '.join(INSTANCE_KEYS)}, got {type(item).__name__}",
                              file=source, line=line, key=prefix)
        checked = _check(item, INSTANCE_KEYS, prefix + ".", source, lines)
        given = {key: copy.deepcopy(item[key]) for key in INSTANCE_KEYS if key in item and item[key] is not None}
        given["role"] = checked["role"]
        if checked["role"] not in ROLES:
            raise ConfigError(f"must be one of {', '.join(ROLES)}", file=source,
                              line=lines.get(prefix + ".role") or line, key=prefix + ".role")
        if checked["count"] < 1:
            raise ConfigError("must be >= 1", file=source, line=lines.get(prefix + ".count") or line,
                              key=prefix + ".count")
        merged = merged_instance(cfg, given)
        mini = {"model": merged["model"], "hardware": merged["hardware"], "parallelism": merged["parallelism"],
                "engine": merged["engine"], "workload": {"generator": "swebench"}}
        try:                       # the top-level checks, on this item's merged values
            checked_mini = validate_config(mini)
        except ConfigError as exc:
            key = f"{prefix}.{exc.key}" if exc.key else prefix
            raise ConfigError(exc.message, file=source, line=lines.get(key) or line, key=key) from None
        roles.extend([checked["role"]] * checked["count"])
        block_sizes.append((checked_mini["engine"]["block_size"], prefix))
        out.append(given)
    total = len(roles)
    if total > MAX_INSTANCES:
        raise ConfigError(f"{total} instances is more than the simulator supports (at most {MAX_INSTANCES}): "
                          "every call's routing decision reads every instance's load", file=source,
                          line=lines.get("instances"), key="instances")
    sizes = {bs for bs, _ in block_sizes}
    if len(sizes) > 1:
        prefix = next(p for bs, p in block_sizes if bs != block_sizes[0][0])
        raise ConfigError(f"every instance needs the same engine.block_size (got {sorted(sizes)}): the "
                          "workload's token blocks are hashed once for the cluster", file=source,
                          line=lines.get(prefix + ".engine.block_size") or lines.get(prefix), key=prefix + ".engine.block_size")
    can_prefill = any(r in PREFILL_ROLES for r in roles)
    if not can_prefill or not any(r in DECODE_ROLES for r in roles):
        missing = "prefill" if not can_prefill else "decode"
        raise ConfigError(f"no instance can {missing} (roles: {', '.join(roles)}): give at least one instance "
                          f"with role {missing} or both", file=source, line=lines.get("instances"),
                          key="instances")
    return out


def merged_instance(cfg: dict, item: dict) -> dict:
    """An instance-list item's hardware, model, parallelism and engine over the top-level ones."""
    return {"hardware": item.get("hardware", cfg["hardware"]), "model": item.get("model", cfg["model"]),
            "parallelism": {**cfg["parallelism"], **(item.get("parallelism") or {})},
            "engine": {**cfg["engine"], **(item.get("engine") or {})}}
