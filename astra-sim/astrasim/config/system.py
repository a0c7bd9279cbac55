"""System JSON reader (ASTRA-Sim ``--system-configuration``).

Keys read (others, e.g. ``L``/``o``/``g``/``G``/``intra-dimension-scheduling``, are ignored):

=============================  ========  =========================================================
key                            default   meaning
=============================  ========  =========================================================
scheduling-policy              LIFO      LIFO / FIFO / EXPLICIT (priority between collectives that
                                         are in flight together; one comm node per rank is in
                                         flight at a time, so it never changes our results)
endpoint-delay                 10        ns charged per packet hand-off at an endpoint (E)
active-chunks-per-dimension    1         chunks a dimension works on concurrently
preferred-dataset-splits       required  chunks a collective is split into
{all-reduce,all-gather,        required  one algorithm per network dimension: ring, oneRing,
 reduce-scatter,all-to-all}-             direct[window], oneDirect[window], halvingDoubling,
 implementation                          oneHalvingDoubling (doubleBinaryTree: unsupported)
collective-optimization        baseline  baseline / localBWAware
local-mem-bw                   required  GB/s (decimal): local reduction costs 3*floor(m/M)
peak-perf                      0         TFLOPS, roofline mode only
roofline-enabled               0         1: GPU compute time from num_ops/tensor_size
trace-enabled                  0         accepted, no effect
replay-only                    0         1: every node just replays duration_micros
=============================  ========  =========================================================
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ConfigError
from ._read import get_choice, get_number, load_json

COLLECTIVE_KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")
BASE_ALGORITHMS = ("ring", "direct", "halvingDoubling")


@dataclass(frozen=True, slots=True)
class Implementation:
    """One per-dimension algorithm choice, e.g. ``oneDirect8`` -> (direct, one=True, window=8)."""

    algorithm: str            # ring | direct | halvingDoubling
    one: bool = False         # "one*": a single logical ring over all NPUs
    window: int = -1          # direct only: peers in flight at once (-1: all)

    @property
    def name(self) -> str:
        base = self.algorithm if not self.one else "one" + self.algorithm[0].upper() + self.algorithm[1:]
        return base + (str(self.window) if self.window > 0 else "")


def parse_implementation(text: str, where: str, key: str) -> Implementation:
    if not isinstance(text, str):
        raise ConfigError(f"entries must be strings, got {text!r}", file=where, key=key)
    if text == "doubleBinaryTree":
        raise ConfigError("doubleBinaryTree is not supported by astrasim "
                          "(use ring, direct or halvingDoubling)", file=where, key=key)
    for prefix, algo, one in (("oneRing", "ring", True), ("ring", "ring", False),
                              ("oneHalvingDoubling", "halvingDoubling", True),
                              ("halvingDoubling", "halvingDoubling", False),
                              ("oneDirect", "direct", True), ("direct", "direct", False)):
        if text == prefix:
            return Implementation(algo, one)
        if algo == "direct" and text.startswith(prefix) and text[len(prefix):].isdigit():
            return Implementation(algo, one, max(1, int(text[len(prefix):])))
    raise ConfigError(f"unknown collective implementation {text!r}", file=where, key=key)


@dataclass(frozen=True, slots=True)
class SystemConfig:
    """Typed system configuration; the field defaults are ASTRA-Sim's where it has one."""

    preferred_dataset_splits: int = 1
    local_mem_bw_gbs: float = 1600.0
    endpoint_delay_ns: int = 10
    active_chunks_per_dimension: int = 1
    scheduling_policy: str = "LIFO"
    collective_optimization: str = "baseline"
    implementations: dict = field(default_factory=lambda: {
        k: (Implementation("ring"),) for k in COLLECTIVE_KINDS})
    peak_perf_tflops: float = 0.0
    roofline_enabled: bool = False
    trace_enabled: bool = False
    replay_only: bool = False
    source: str = "<in-process>"

    @staticmethod
    def with_algorithm(algorithm: str, dims: int = 1, **kwargs) -> "SystemConfig":
        """Every collective uses ``algorithm`` (e.g. "ring") on each of ``dims`` dimensions."""
        impl = parse_implementation(algorithm, "<in-process>", "algorithm")
        return SystemConfig(implementations={k: (impl,) * dims for k in COLLECTIVE_KINDS}, **kwargs)


def parse_system(data: dict, where: str = "<in-process>") -> SystemConfig:
    """Validate a system mapping; raises ConfigError naming ``where`` and the key."""
    impls = {}
    for kind in COLLECTIVE_KINDS:
        key = f"{kind}-implementation"
        if key not in data:
            raise ConfigError("required key is missing", file=where, key=key)
        v = data[key]
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, list) or not v:
            raise ConfigError("must be a non-empty list, one algorithm per dimension", file=where, key=key)
        impls[kind] = tuple(parse_implementation(x, where, key) for x in v)
    flag = lambda k: bool(get_number(data, k, where, default=0))  # noqa: E731
    cfg = SystemConfig(
        preferred_dataset_splits=get_number(data, "preferred-dataset-splits", where, integer=True,
                                            minimum=1, required=True),
        local_mem_bw_gbs=float(get_number(data, "local-mem-bw", where, required=True)),
        endpoint_delay_ns=get_number(data, "endpoint-delay", where, default=10, integer=True, minimum=0),
        active_chunks_per_dimension=get_number(data, "active-chunks-per-dimension", where, default=1,
                                               integer=True, minimum=1),
        scheduling_policy=get_choice(data, "scheduling-policy", where, ("LIFO", "FIFO", "EXPLICIT"), "LIFO"),
        collective_optimization=get_choice(data, "collective-optimization", where,
                                           ("baseline", "localBWAware"), "baseline"),
        implementations=impls,
        peak_perf_tflops=float(get_number(data, "peak-perf", where, default=0.0, minimum=0)),
        roofline_enabled=flag("roofline-enabled"),
        trace_enabled=flag("trace-enabled"),
        replay_only=flag("replay-only"),
        source=where,
    )
    if cfg.local_mem_bw_gbs <= 0:
        raise ConfigError(f"must be > 0, got {cfg.local_mem_bw_gbs!r}", file=where, key="local-mem-bw")
    if cfg.roofline_enabled and cfg.peak_perf_tflops <= 0:
        raise ConfigError("roofline-enabled needs peak-perf > 0", file=where, key="peak-perf")
    return cfg


def load_system(path) -> SystemConfig:
    """Read a system JSON file."""
    return parse_system(load_json(path), str(path))
