"""Generate docs/configuration.md from the key tables of :mod:`program_layer.config`.

    python -m program_layer.config_doc            # print the page
    python -m program_layer.config_doc --write    # write docs/configuration.md
    python -m program_layer.config_doc --check    # exit 1 if docs/configuration.md is stale

Types and defaults come from the tables (``TOP_KEYS``, ``PARALLELISM_KEYS``, ``ENGINE_KEYS``,
``POLICY_KEYS``, ``WORKLOAD_KEYS``); the built-in policies and their parameters from
``program_layer.policies.BUILTINS``; the generators' parameters from
``program_layer.workloads.generators``; the shipped devices' resolved engine defaults from
``program_layer.config.resolve_engine``. Only the descriptions below are written by hand.
:func:`render` raises ``KeyError`` when a key of a table has no description or a description
names a key that no table has, so the page cannot silently fall behind the code.
"""
from __future__ import annotations

import inspect
import sys
from pathlib import Path

from . import config as C
from . import tier_config as T

DOC_PATH = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"

#: (prefix, table name, table) in page order.
SECTIONS = (
    ("", "TOP_KEYS", C.TOP_KEYS),
    ("parallelism.", "PARALLELISM_KEYS", C.PARALLELISM_KEYS),
    ("engine.", "ENGINE_KEYS", C.ENGINE_KEYS),
    ("policies.", "POLICY_KEYS", C.POLICY_KEYS),
    ("workload.", "WORKLOAD_KEYS", C.WORKLOAD_KEYS),
    ("kv_tiers.", "TIER_KEYS", T.TIER_KEYS),
    ("kv_tiers.cpu.", "TIER_LINK_KEYS", T.TIER_LINK_KEYS),
)

#: One description per dotted key. Keep in step with program_layer/config.py (render checks).
DESCRIPTIONS: dict[str, str] = {
    # top level
    "model": "Model: a registry name (`profiles/models/<org>/<name>.json`), or a path to a "
             "Hugging Face `config.json` or a folder holding one (relative to the config's "
             "folder, like every path in a config). The registry name (for a path: the config's "
             "`_name_or_path`, else the file stem) selects the profile bundle "
             "(`profiles/<hardware>/<model>/bf16/tp<N>/`).",
    "hardware": "Device: a name in `hardware/` (`hardware/<NAME>.yaml`) or a path to a device YAML "
                "(relative to the config). Also names the profile-bundle folder and "
                "`hardware/overhead/<NAME>.yaml`.",
    "profiles": "Profile-bundle root (default: the repository's `profiles/`); relative to the "
                "config. `agentservesim run --profiles DIR` overrides it.",
    "parallelism": "Tensor, pipeline, data and expert parallelism of one instance (keys below). "
                   "`tp x pp x dp` must not exceed the device's `gpus_per_node`.",
    "instances": "Number of identical serving instances (1 to 10000); calls are spread over them "
                 "by the routing policy. Every call's routing decision reads every instance's "
                 "load, so time grows with calls x instances; idle instances cost almost nothing. "
                 "Or a list of mappings, one per kind of instance, with keys `hardware`, `model`, "
                 "`parallelism`, `engine` (overriding the top-level ones, `parallelism` and `engine` "
                 "key by key), `role` (`prefill`, `decode` or `both`, default both: prefill/decode "
                 "disaggregation) and `count` (default 1): a heterogeneous cluster "
                 "(docs/serving-architectures.md).",
    "engine": "vLLM engine arguments of every instance (keys below).",
    "workload": "Where the programs come from (keys below); required. Give exactly one of "
                "`workload.path` and `workload.generator`.",
    "policies": "Retention, scheduling and routing policies (keys below; docs/policies.md).",
    "seed": "Run seed: the generator's seed when `workload.seed` is not given (nothing else in "
            "a run is random). `agentservesim run --seed N` overrides both.",
    "name": "Free-form label of the run (used by the shipped cells); the simulator does not read it.",
    "network": "Which backend times the step's collectives: `{backend: analytical | congestion-aware "
               "| graph | astra-sim, topology: FILE or {generator: NAME, ...}, gpus: [...], binary: PATH}` "
               "(absent: analytical on the device network; `astra-sim` runs each distinct step graph on your "
               "own upstream ASTRA-Sim binary, `binary` or $ASTRASIM_BIN; docs/topologies.md).",
    "cluster": "The cluster the instances are placed on: `{nodes: N, placement: [{stages: [{node: N, gpus: "
               "'a-b' or [...]}, ...]}, ...]}` (absent: as many nodes of the device as the instances need, "
               "each instance inside one node). TP stays inside a node; pipeline stages may span nodes "
               "(then the device file's `inter_node` network times their transfers); docs/clusters.md.",
    "calibration": "A calibration file written by `agentservesim calibrate` (relative to the "
                   "config): its `calibration.framework` terms replace the device's fitted "
                   "framework overhead. The file's `calibration.applies_to.hardware` must equal "
                   "`hardware` (docs/validation.md).",
    "kv_tiers": "KV memory tiers below GPU memory after vLLM's native KV offloading: a CPU DRAM "
                "tier and optionally a CXL tier (keys below; docs/kv-tiers.md). Absent: no tiers, "
                "nothing changes. A retention decision `(\"offload\", until)` keeps a context there.",
    # kv_tiers
    "kv_tiers.shared": "One tier store per node, shared by its instances (each keeps its own "
                       "link); false: one per instance.",
    "kv_tiers.eviction": "The tier's eviction policy: `lru` (vLLM's LRUOffloadingManager).",
    "kv_tiers.cpu": "The CPU DRAM tier (required when `kv_tiers` is given); keys as "
                    "`kv_tiers.cpu.*` below.",
    "kv_tiers.cxl": "Optional CXL tier below the CPU tier (CPU evictions move there); same keys, "
                    "but `bandwidth_gbs` (or `h2d_gbs` and `d2h_gbs`) and `latency_us` are required.",
    "kv_tiers.cpu.capacity_gib": "Tier size in GiB for one instance's KV (all its GPUs' shards; "
                                 "with `shared`, the node's); required.",
    "kv_tiers.cpu.bandwidth_gbs": "Link bandwidth per GPU, decimal GB/s, both directions "
                                  "(default: the device YAML's `host_link`).",
    "kv_tiers.cpu.h2d_gbs": "Host-to-device GB/s per GPU (loads); default `host_link.h2d_gbs`.",
    "kv_tiers.cpu.d2h_gbs": "Device-to-host GB/s per GPU (stores); default `host_link.d2h_gbs`.",
    "kv_tiers.cpu.latency_us": "Fixed cost of one transfer in us; default `host_link.latency_us`.",
    # parallelism
    "parallelism.tp": "Tensor-parallel degree (>= 1). Needs a `tp<N>` folder in the bundle.",
    "parallelism.pp": "Pipeline-parallel degree (>= 1): layers split over `pp` stages that run "
                      "one after another within a step (no micro-batching).",
    "parallelism.dp": "Data-parallel ranks of one instance (>= 1, vLLM `--data-parallel-size`): each rank "
                      "is an engine core of `tp x pp` GPUs with its own scheduler and KV pool; requests go to "
                      "the rank vLLM's DP load balancer picks. A MoE model's ranks step in lockstep "
                      "(docs/data-expert-parallel.md).",
    "parallelism.ep": "Expert parallelism: 1 (off) or `dp x tp` (vLLM `--enable-expert-parallel`, the only "
                      "EP size vLLM builds); must divide the model's experts; MoE models only.",
    # engine
    "engine.max_num_seqs": "Most requests running at once (vLLM `--max-num-seqs`); default "
                           "from the device (rules below).",
    "engine.max_num_batched_tokens": "Token budget of one step, shared by prefill chunks and "
                                     "decodes (vLLM `--max-num-batched-tokens`); default from "
                                     "the device (rules below).",
    "engine.block_size": "KV block size in tokens: one of 1, 8, 16, 32, 64, 128.",
    "engine.gpu_memory_utilization": "Fraction of the device's CUDA-visible memory the engine "
                                     "may use, in (0, 1] (docs/memory-model.md).",
    "engine.kv_pool_tokens": "Override the memory model: the KV pool holds this many tokens "
                             "(vLLM `num_gpu_blocks_override`, in tokens; rounded down to whole "
                             "blocks).",
    "engine.enable_prefix_caching": "Prefix caching (vLLM's chained block hashes).",
    "engine.enable_chunked_prefill": "Chunked prefill; when false a prompt that does not fit "
                                     "the step's remaining budget waits (and holds up the "
                                     "requests queued behind it).",
    "engine.long_prefill_token_threshold": "Cap on the tokens one request may schedule per "
                                           "step (0 = off, vLLM's default).",
    "engine.scheduling_policy": "Engine waiting queue: `fcfs` (deque) or `priority` (heap by "
                                "(priority, arrival, id)). Default: what the scheduling policy "
                                "asks for (rules below).",
    "engine.async_scheduling": "vLLM's asynchronous scheduling (step N+1 is scheduled while step "
                               "N runs); false gives the synchronous loop. Fast-forward needs it.",
    "engine.max_model_len": "Longest sequence (prompt + output) in tokens; default: the model's "
                            "`max_position_embeddings`, capped at the KV pool.",
    # policies
    "policies.retention": "Retention policy: a built-in name, `{name: NAME, param: value, ...}`, "
                          "`path/to/file.py:Class` (relative to the config) or `pkg.module:Class`.",
    "policies.scheduling": "Scheduling policy (priority q of each call), same forms as retention.",
    "policies.routing": "Routing policy (instance of each call), same forms as retention.",
    # workload
    "workload.path": "A workload JSONL file (docs/workloads.md), relative to the config; or, "
                     "with `workload.trace`, a raw public trace.",
    "workload.generator": "A synthetic generator (table below).",
    "workload.trace": "Read `workload.path` as a raw trace of this format (`tracelab`, "
                      "`mooncake`, `azure`) instead of workload JSONL.",
    "workload.programs": "Generator only: number of programs (default 50).",
    "workload.rate_jps": "Generator only: Poisson program arrival rate, programs per second "
                         "(default 0.02).",
    "workload.seed": "Generator only: its seed (default: the run's `seed`).",
    "workload.limit": "Trace only: keep the first N rows of a request trace (file order) or the "
                      "first N programs (by arrival).",
    "workload.time_scale": "Trace only: multiply arrival times (0.5 = twice the rate; default 1). "
                           "Tool durations are not scaled.",
    "workload.max_idle_s": "Trace only: shorten every stretch in which no session is active (a request "
                           "at its arrival, a program for the sum of its tool durations) to this many "
                           "seconds (default 600); later arrivals move earlier, in-program gaps are "
                           "kept. `agentservesim workload import --keep-idle-gaps` keeps them.",
    "workload.params": "Generator only: generator parameters, `{name: value}` (table below); "
                       "each must be a positive number.",
}

_TYPE_NAMES = {int: "integer", float: "number", bool: "bool", str: "string", dict: "mapping"}


def _type_text(types: tuple) -> str:
    if set(types) == {int, float}:
        return "number"
    return " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in types)


def _default_text(default) -> str:
    if default is None:
        return "—"
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    return f"`{default}`"


def check_descriptions() -> None:
    """KeyError naming every undescribed key and every description of a key that is gone."""
    keys = {prefix + k for prefix, _, table in SECTIONS for k in table}
    missing = sorted(keys - set(DESCRIPTIONS))
    stale = sorted(set(DESCRIPTIONS) - keys)
    if missing or stale:
        parts = []
        if missing:
            parts.append("keys in program_layer/config.py without a description in "
                         f"program_layer/config_doc.py: {', '.join(missing)}")
        if stale:
            parts.append(f"descriptions of keys that program_layer/config.py no longer has: "
                         f"{', '.join(stale)}")
        raise KeyError("; ".join(parts))


def _key_tables() -> list[str]:
    out = []
    titles = {"": "Top level", "parallelism.": "`parallelism:`", "engine.": "`engine:`",
              "policies.": "`policies:`", "workload.": "`workload:`", "kv_tiers.": "`kv_tiers:`",
              "kv_tiers.cpu.": "`kv_tiers.cpu:` and `kv_tiers.cxl:`"}
    for prefix, table_name, table in SECTIONS:
        out += [f"## {titles[prefix]} (`{table_name}`)", "",
                "| key | type | default | description |", "|---|---|---|---|"]
        for key, (types, default) in table.items():
            desc = DESCRIPTIONS[prefix + key].replace("|", "\\|")
            out.append(f"| `{prefix}{key}` | {_type_text(types)} | {_default_text(default)} | {desc} |")
        out.append("")
    return out


def _engine_rules() -> list[str]:
    lines = [
        "## Engine defaults (`resolve_engine`)", "",
        "Unset engine keys get vLLM 0.19 `vllm serve` defaults, resolved against the device "
        "(`program_layer/config.py` `resolve_engine`, then `program_layer/run.py`):", "",
        "1. *big device* = CUDA-visible memory (`cuda_memory_bytes` / 2^30) >= 70 GiB and `A100` "
        "not in the device's `gpu` name.",
        "2. `max_num_seqs` unset: 1024 on a big device, else 256.",
        "3. `max_model_len` unset: the model's `max_position_embeddings` (131072 when absent).",
        "4. `max_num_batched_tokens` unset: min(8192 on a big device else 2048, "
        "`max_num_seqs` x `max_model_len`).",
        "5. Always: `max_num_seqs` = min(`max_num_seqs`, `max_num_batched_tokens`).",
        "6. `scheduling_policy` unset: the scheduling policy's `engine_args[\"scheduling_policy\"]`, "
        "or `priority` when it names none (built-ins: `fcfs` asks for `fcfs`; `program-fcfs` and "
        "`plas` ask for `priority`).",
        "7. After the memory model: when `max_model_len` was not set and the KV pool holds fewer "
        "tokens, `max_model_len` = the pool size (as `vllm serve --max-model-len` would have to be).",
        "",
        "With `scheduling_policy: fcfs` the priority hook is not installed (the policy's q is not "
        "used). With `policies.retention: cache-lru` the retention, victim-protection and "
        "residency hooks are not installed (vLLM's own behaviour, at no cost). The resolved "
        "values are in `summary.json` `engine` and in the run folder's `config.yaml`.",
        "",
    ]
    try:
        from llmservingsim.hardware import list_devices, load_device
        rows = []
        base = {k: d for k, (_, d) in C.ENGINE_KEYS.items()}
        for name in list_devices():
            dev = load_device(name)
            gib = dev.cuda_memory_bytes / (1 << 30)
            e = C.resolve_engine(dict(base), gib, dev.gpu, 131072, {})
            rows.append(f"| `{name}` | {gib:.2f} | {e['max_num_seqs']} | {e['max_num_batched_tokens']} |")
    except Exception as exc:      # a broken device file must not hide behind the docs
        raise RuntimeError(f"cannot resolve the shipped devices' engine defaults: {exc}") from exc
    lines += ["Shipped devices (model with 131072 positions):", "",
              "| device | CUDA memory (GiB) | `max_num_seqs` | `max_num_batched_tokens` |",
              "|---|---|---|---|", *rows, ""]
    return lines


def _policy_tables() -> list[str]:
    from program_layer.policies import BUILTINS
    lines = ["## Built-in policies", "",
             "`policies.<axis>: NAME` or `{name: NAME, param: value}`; semantics in docs/policies.md.", "",
             "| axis | name | parameters (default) |", "|---|---|---|"]
    for axis, table in BUILTINS.items():
        for name in sorted(table):
            sig = inspect.signature(table[name].__init__)
            params = [f"`{p.name}` ({'required' if p.default is inspect.Parameter.empty else repr(p.default)})"
                      for p in sig.parameters.values() if p.name != "self"
                      and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
            lines.append(f"| {axis} | `{name}` | {', '.join(params) or '—'} |")
    lines.append("")
    return lines


def _generator_tables() -> list[str]:
    from program_layer.workloads.generators import GENERATORS, describe_params
    from program_layer.workloads.importers import IMPORTERS
    lines = ["## Generators and trace formats", "",
             "| `workload.generator` | description | `workload.params` (default) |", "|---|---|---|"]
    for name, spec in GENERATORS.items():
        params = ", ".join(f"`{k}` ({v})" for k, v in describe_params(name).items())
        lines.append(f"| `{name}` | {spec.description} | {params} |")
    lines += ["", "| `workload.trace` | reads | gives |", "|---|---|---|"]
    for name, spec in IMPORTERS.items():
        lines.append(f"| `{name}` | {spec.description} | {spec.kind} |")
    lines.append("")
    return lines


def render() -> str:
    """The whole page (raises KeyError when descriptions and tables disagree)."""
    check_descriptions()
    head = [
        "# Configuration reference",
        "",
        "<!-- generated by `python -m program_layer.config_doc --write` from program_layer/config.py; do not edit -->",
        "",
        "A run is one YAML mapping (`agentservesim run CONFIG.yaml`). Every key is optional except "
        "`workload`; an unknown key or a wrong type is a `ConfigError` naming the key, the file and "
        "the line. `null` (or leaving a key out) means the default. Paths inside a config are "
        "relative to the config file's folder (except `model`, see below). Example: `examples/quickstart.yaml`.",
        "",
    ]
    return "\n".join(head + _key_tables() + _engine_rules() + _policy_tables() + _generator_tables())


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = render()
    if "--write" in argv:
        DOC_PATH.write_text(text, encoding="utf-8")
        print(f"wrote {DOC_PATH}")
    elif "--check" in argv:
        if not DOC_PATH.is_file() or DOC_PATH.read_text(encoding="utf-8") != text:
            print(f"{DOC_PATH} is out of date: run python -m program_layer.config_doc --write",
                  file=sys.stderr)
            return 1
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
