"""Device descriptions: what a GPU is, how its tensor-parallel group talks, what it draws.

A device is one YAML file ``hardware/<NAME>.yaml`` (format and sources policy in
``hardware/README.md``). It names an ASTRA-Sim network YAML for the node's intra-node group and
an ASTRA-Sim system JSON; both are loaded and checked here, once, so that a bad file stops the
run at load time with the file and key in the message instead of deep inside a simulation.

Invariants of a loaded :class:`Device`:
- every required key is present with the right type, and no unknown key is;
- ``0 <= idle_w <= standby_w <= active_w``; every size, bandwidth and rate is positive;
- the network file has exactly one dimension (the intra-node group) whose ``npus_count`` equals
  ``gpus_per_node``; the group of a TP degree ``n`` is the same dimension with ``n`` NPUs;
- the system file's ``local-mem-bw`` and ``peak-perf`` equal the device's
  ``memory_bandwidth_gbs`` and ``peak_bf16_tflops`` (one number, one place: the YAML carries the
  source comment, the JSON only repeats it for ASTRA-Sim).

:func:`ring_allreduce_ns` is ASTRA-Sim's congestion-unaware ring all-reduce in closed form
(docs/formats.md §2); it is how the network bandwidths were fitted to measured NCCL figures (the
engine itself times collectives with the astrasim system simulator, execution_graph.py).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import lru_cache
from math import floor
from pathlib import Path
from typing import Any, Mapping, Optional

from llmservingsim.errors import ConfigError, ProfileError, finite_number, load_json, load_yaml
from llmservingsim.paths import hardware_dir

from .device_keys import GIB_PER_GB, GIB_PER_GB_EXACT, check_keys

# Link traversals per message: ring neighbours and fully-connected peers are one hop away,
# a switch puts two links (NPU -> switch -> NPU) on every path.
HOPS = {"Ring": 1, "FullyConnected": 1, "Switch": 2}

_FLOAT, _INT, _STR = "number", "integer", "string"
_DEVICE_KEYS = {
    "name": _STR, "gpu": _STR, "memory_gib": _FLOAT, "memory_bandwidth_gbs": _FLOAT,
    "peak_bf16_tflops": _FLOAT, "power": "mapping", "gpus_per_node": _INT,
    "interconnect": _STR, "network": _STR, "system": _STR, "nccl_allreduce_busbw_gbs": _FLOAT,
    "cuda_memory_bytes": _INT, "sm_count": _INT, "tp_non_torch_gib": _FLOAT,
}
# Optional: measured time of a tiny (4 KiB) all-reduce on 2 GPUs, i.e. the fixed cost of one
# collective. Used only where the device has no fitted collective regimes for the TP size
# (hardware/overhead/<device>.yaml; execution_graph.GraphCommModel).
_OPTIONAL_DEVICE_KEYS = {"collective_latency_ns": _FLOAT, "host_link": "mapping", "memory_technology": _STR,
                         "boost_clock_mhz": _FLOAT, "sustained_clock_mhz": _FLOAT}
# Optional, together: the SM clock ``peak_bf16_tflops`` is stated at on the datasheet
# (``boost_clock_mhz``) and the SM clock the part is measured to hold under load
# (``sustained_clock_mhz``). Tensor throughput scales with the SM clock, so a datasheet
# synthesis prices FLOPs at ``Device.compute_tflops`` (device_efficiency).
_CLOCK_KEYS = ("boost_clock_mhz", "sustained_clock_mhz")
# Optional: the DRAM technology on the datasheet ("HBM3e", "GDDR7", ...). Its family (HBM or
# GDDR) selects the GEMM bandwidth fraction and the elementwise fixed cost a datasheet synthesis
# uses (device_efficiency).
MEMORY_FAMILIES = ("HBM", "GDDR")
# Optional: one GPU's copy-engine path to host DRAM, the default link of a kv_tiers CPU tier
# (llmservingsim/kv_tiers.py): measured host-to-device / device-to-host GB/s and a latency.
_HOST_LINK_KEYS = ("kind", "h2d_gbs", "d2h_gbs", "latency_us")
_POWER_KEYS = ("idle_w", "standby_w", "active_w")
_NETWORK_KEYS = ("topology", "npus_count", "bandwidth", "latency")
_SYSTEM_KEYS = {
    "scheduling-policy": _STR, "endpoint-delay": _INT, "active-chunks-per-dimension": _INT,
    "preferred-dataset-splits": _INT, "all-reduce-implementation": "list",
    "all-gather-implementation": "list", "reduce-scatter-implementation": "list",
    "all-to-all-implementation": "list", "collective-optimization": _STR,
    "local-mem-bw": _FLOAT, "peak-perf": _FLOAT, "roofline-enabled": _INT,
}


def network_yaml(cfg: dict) -> str:
    """An ASTRA-Sim network config (``topology``, ``npus_count``, ``bandwidth``, ``latency``
    lists) as the network YAML text upstream ASTRA-Sim reads."""
    return "".join(f"{k}: [ {', '.join(str(v) for v in cfg[k])} ]\n" for k in _NETWORK_KEYS)


@dataclass(frozen=True)
class PowerSpec:
    """Board power in watts per GPU. idle: powered, nothing loaded; standby: model loaded,
    engine idle between steps; active: running steps. Invariant 0 <= idle <= standby <= active."""
    idle_w: float
    standby_w: float
    active_w: float


@dataclass(frozen=True)
class Device:
    """One GPU type as ``hardware/<name>.yaml`` describes it (see the module docstring for the
    invariants). ``network`` and ``system`` are the paths as written in the YAML (relative to
    its folder); the parsed files are held privately and handed out as fresh copies."""
    name: str
    gpu: str
    memory_gib: float
    memory_bandwidth_gbs: float
    peak_bf16_tflops: float
    power: PowerSpec
    gpus_per_node: int
    interconnect: str
    network: str
    system: str
    nccl_allreduce_busbw_gbs: float
    path: Path
    cuda_memory_bytes: int = 0       # cudaMemGetInfo total: what vLLM sizes its KV pool from
    sm_count: int = 0
    tp_non_torch_gib: float = 0.0    # non-torch memory the TP communicators add (memory_model)
    collective_latency_ns: float = 0.0
    memory_technology: str = ""      # datasheet DRAM technology; "" when the file does not say
    boost_clock_mhz: float = 0.0     # SM clock of peak_bf16_tflops on the datasheet; 0 when not given
    sustained_clock_mhz: float = 0.0 # SM clock measured under load; 0 when not given
    inter_node: Any = None           # inter_node.InterNode: the network between nodes (optional)
    host_link: Optional[Mapping[str, Any]] = field(default=None, compare=False)   # kind, h2d_gbs, d2h_gbs, latency_us
    _network: Mapping[str, tuple] = field(repr=False, compare=False, default_factory=dict)
    _system: Mapping[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @property
    def memory_family(self) -> str:
        """"HBM" or "GDDR" (the prefix of ``memory_technology``), "" when unknown."""
        return next((f for f in MEMORY_FAMILIES if self.memory_technology.startswith(f)), "")

    @property
    def compute_tflops(self) -> float:
        """The BF16 tensor peak at the clock the part holds under load: ``peak_bf16_tflops``
        x ``sustained_clock_mhz / boost_clock_mhz`` where the file gives both clocks, else
        ``peak_bf16_tflops`` (tensor throughput per SM cycle is fixed, so it scales with the
        clock). What a datasheet synthesis prices FLOPs at; the system JSON keeps the datasheet peak."""
        if self.boost_clock_mhz and self.sustained_clock_mhz:
            return self.peak_bf16_tflops * self.sustained_clock_mhz / self.boost_clock_mhz
        return self.peak_bf16_tflops

    @property
    def tp_non_torch_bytes(self) -> int:
        return round(self.tp_non_torch_gib * (1 << 30))

    @property
    def network_path(self) -> Path:
        return self.path.parent / self.network

    @property
    def system_path(self) -> Path:
        return self.path.parent / self.system

    def network_for_tp(self, n: int) -> dict:
        """ASTRA-Sim network config for a TP group of ``n`` GPUs on one node: the device's
        intra-node dimension with ``npus_count`` set to ``n``. Raises ConfigError unless
        ``1 <= n <= gpus_per_node``."""
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= self.gpus_per_node:
            raise ConfigError(
                f"device {self.name} has {self.gpus_per_node} GPUs per node; a tensor-parallel "
                f"group of {n!r} GPUs does not fit in one node", file=str(self.path),
                key="gpus_per_node")
        net = {k: list(v) for k, v in self._network.items()}
        net["npus_count"] = [n]
        return net

    def network_yaml_for_tp(self, n: int) -> str:
        """:meth:`network_for_tp` rendered as an ASTRA-Sim network YAML text."""
        return network_yaml(self.network_for_tp(n))

    def system_config(self) -> dict:
        """The ASTRA-Sim system JSON as a dict (a fresh deep copy each call)."""
        return copy.deepcopy(dict(self._system))

    def allreduce_ns(self, size_bytes: int, n: int) -> int:
        """Time of an ``n``-GPU ring all-reduce of ``size_bytes`` on this device's network and
        system configuration (congestion-unaware closed form, see :func:`ring_allreduce_ns`)."""
        net = self.network_for_tp(n)
        return ring_allreduce_ns(
            size_bytes, n, net["bandwidth"][0], net["latency"][0], HOPS[net["topology"][0]],
            self._system["endpoint-delay"], self._system["local-mem-bw"],
            self._system["preferred-dataset-splits"])


@lru_cache(maxsize=4096)
def ring_allreduce_ns(size_bytes: int, n: int, bandwidth_gbs: float, latency_ns: float,
                      hops: int, endpoint_delay_ns: float, local_mem_bw_gbs: float,
                      splits: int = 1) -> int:
    """ASTRA-Sim congestion-unaware ring all-reduce time in ns (one active chunk, one queue):

        T = splits * [ 2(n-1) * floor(hops*L + m/B) + (n-1) * 3 * floor(m/M) + (2n-1) * E ]

    with m = S / splits / n in whole bytes (ASTRA-Sim's sizes are unsigned integers, so both
    divisions truncate), B = bandwidth_gbs * 2^30 / 1e9 bytes/ns, M = local_mem_bw_gbs
    (decimal GB/s = bytes/ns), L = latency_ns, E = endpoint_delay_ns. Evaluated in exact
    rational arithmetic on the given inputs, so the floors never suffer float rounding.
    A group of one GPU does not communicate: n == 1 gives 0.
    Example (docs/formats.md §2): 2 NPUs, 16 MiB, Ring 100 GB/s, 1000 ns, splits 1, E 10,
    M 1600 -> 174,006 ns.
    """
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes < 0:
        raise ValueError(f"size_bytes must be a non-negative int, got {size_bytes!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    if not isinstance(splits, int) or splits < 1:
        raise ValueError(f"splits must be a positive int, got {splits!r}")
    if bandwidth_gbs <= 0 or local_mem_bw_gbs <= 0 or latency_ns < 0 or endpoint_delay_ns < 0:
        raise ValueError("bandwidth and local-mem-bw must be > 0, latency and endpoint delay >= 0")
    if n == 1:
        return 0
    from fractions import Fraction
    m = Fraction(size_bytes // splits // n)
    link = Fraction(bandwidth_gbs) * Fraction(*GIB_PER_GB_EXACT)
    per_step = floor(hops * Fraction(latency_ns) + m / link)
    reduce_step = floor(m / Fraction(local_mem_bw_gbs))
    total = (2 * (n - 1) * per_step + (n - 1) * 3 * reduce_step
             + (2 * n - 1) * Fraction(endpoint_delay_ns))
    return int(floor(splits * total))


def allreduce_busbw_gbs(size_bytes: int, n: int, time_ns: int) -> float:
    """NCCL's bus bandwidth of an all-reduce: (S / T) * 2(n-1)/n, in decimal GB/s."""
    return size_bytes / time_ns * 2 * (n - 1) / n


def fit_link_bandwidth_gbs(busbw_gbs: float, local_mem_bw_gbs: float) -> float:
    """The network ``bandwidth`` (ASTRA-Sim GB/s) whose ring all-reduce reproduces a measured
    large-message bus bandwidth, with zero latency and endpoint delay. For large S the closed
    form gives busbw = 2 / (2/B + 3/M) for every n, so B = 1 / (1/busbw - 1.5/M) bytes/ns,
    reported in ASTRA-Sim units (divided by 2^30/1e9)."""
    inv = 1 / busbw_gbs - 1.5 / local_mem_bw_gbs
    if inv <= 0:
        raise ValueError("local-mem-bw too small to reach that bus bandwidth")
    return 1 / inv / GIB_PER_GB


# ---------------------------------------------------------------- loading

def list_devices() -> list[str]:
    """Names of the devices shipped in ``hardware/`` (file stems of ``*.yaml``), sorted."""
    return sorted(p.stem for p in hardware_dir().glob("*.yaml"))


def load_device(name_or_path: str) -> Device:
    """Load a device by name (``hardware/<name>.yaml``) or by path to a YAML file.
    Raises ProfileError naming the file and key for anything missing, unknown or ill-typed,
    and listing the known devices for an unknown name."""
    path = _resolve(str(name_or_path))
    raw = _read_yaml(path, "device file")
    return _build_device(raw, path)


def _resolve(name_or_path: str) -> Path:
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or len(candidate.parts) > 1:
        if not candidate.is_file():
            raise ProfileError("device file not found", file=str(candidate))
        return candidate
    path = hardware_dir() / f"{name_or_path}.yaml"
    if not path.is_file():
        known = ", ".join(list_devices()) or "(none)"
        raise ProfileError(f"unknown device '{name_or_path}'; known devices: {known}",
                           file=str(hardware_dir()))
    return path


def _read_yaml(path: Path, what: str) -> Any:
    return load_yaml(path, error=ProfileError, what=what, problem="not valid YAML")


def _check(value: Any, kind: str, file: Path, key: str) -> Any:
    """Return ``value`` if it has the expected kind, else raise ProfileError naming file/key."""
    ok = {
        _FLOAT: finite_number(value),         # .nan / .inf in YAML are no device figure
        _INT: isinstance(value, int) and not isinstance(value, bool),
        _STR: isinstance(value, str) and value != "",
        "mapping": isinstance(value, dict),
        "list": isinstance(value, list) and len(value) > 0,
    }[kind]
    if not ok:
        raise ProfileError(f"expected a {kind}, got {value!r}", file=str(file), key=key)
    return float(value) if kind == _FLOAT else value


def _positive(value: float, file: Path, key: str) -> float:
    if value <= 0:
        raise ProfileError(f"must be > 0, got {value!r}", file=str(file), key=key)
    return value


def _build_device(raw: Any, path: Path) -> Device:
    optional = {k: _check(raw.pop(k), kind, path, k) for k, kind in _OPTIONAL_DEVICE_KEYS.items()
                if isinstance(raw, dict) and k in raw}
    inter_node = None
    if isinstance(raw, dict) and "inter_node" in raw:      # optional: the network between nodes
        from .inter_node import parse_inter_node
        inter_node = parse_inter_node(raw.pop("inter_node"), path)
    check_keys(raw, _DEVICE_KEYS, path)
    v = {k: _check(raw[k], kind, path, k) for k, kind in _DEVICE_KEYS.items()}
    tech = optional.get("memory_technology", "")
    if "memory_technology" in optional and not tech.startswith(MEMORY_FAMILIES):
        raise ProfileError(f"'{tech}' must name an HBM or GDDR technology (e.g. HBM3e, GDDR7)",
                           file=str(path), key="memory_technology")
    if optional.get("collective_latency_ns", 0.0) < 0:
        raise ProfileError("must be >= 0", file=str(path), key="collective_latency_ns")
    clocks = [k for k in _CLOCK_KEYS if k in optional]
    if len(clocks) == 1:
        other = next(k for k in _CLOCK_KEYS if k not in optional)
        raise ProfileError(f"needs {other} too (the two clocks scale the BF16 peak together)",
                           file=str(path), key=clocks[0])
    for k in clocks:
        _positive(optional[k], path, k)
    if v["name"] != path.stem:
        raise ProfileError(f"name '{v['name']}' must equal the file name '{path.stem}'",
                           file=str(path), key="name")
    for key in ("memory_gib", "memory_bandwidth_gbs", "peak_bf16_tflops",
                "nccl_allreduce_busbw_gbs", "gpus_per_node", "cuda_memory_bytes", "sm_count"):
        _positive(v[key], path, key)
    if v["tp_non_torch_gib"] < 0:
        raise ProfileError("must be >= 0", file=str(path), key="tp_non_torch_gib")
    if v["cuda_memory_bytes"] > v["memory_gib"] * (1 << 30):
        raise ProfileError("the CUDA-visible total cannot exceed nvidia-smi's total (memory_gib)",
                           file=str(path), key="cuda_memory_bytes")
    power = _build_power(v["power"], path)
    network = _load_network(path, v["network"], v["gpus_per_node"])
    system = _load_system(path, v["system"], v["memory_bandwidth_gbs"], v["peak_bf16_tflops"])
    return Device(name=v["name"], gpu=v["gpu"], memory_gib=v["memory_gib"],
                  memory_bandwidth_gbs=v["memory_bandwidth_gbs"],
                  peak_bf16_tflops=v["peak_bf16_tflops"], power=power,
                  gpus_per_node=v["gpus_per_node"], interconnect=v["interconnect"],
                  network=v["network"], system=v["system"],
                  nccl_allreduce_busbw_gbs=v["nccl_allreduce_busbw_gbs"], path=path,
                  cuda_memory_bytes=v["cuda_memory_bytes"], sm_count=v["sm_count"],
                  tp_non_torch_gib=v["tp_non_torch_gib"],
                  collective_latency_ns=optional.get("collective_latency_ns", 0.0),
                  memory_technology=tech, boost_clock_mhz=optional.get("boost_clock_mhz", 0.0),
                  sustained_clock_mhz=optional.get("sustained_clock_mhz", 0.0), inter_node=inter_node, host_link=_host_link(optional.get("host_link"), path),
                  _network=network, _system=system)


def _host_link(raw: Optional[dict], path: Path) -> Optional[dict]:
    if raw is None:
        return None
    check_keys(raw, _HOST_LINK_KEYS, path, prefix="host_link.")
    out = {"kind": _check(raw["kind"], _STR, path, "host_link.kind")}
    for k in _HOST_LINK_KEYS[1:]:
        v = _check(raw[k], _FLOAT, path, f"host_link.{k}")
        if v < 0 or (v == 0 and k != "latency_us"):
            raise ProfileError("must be > 0" if k != "latency_us" else "must be >= 0",
                               file=str(path), key=f"host_link.{k}")
        out[k] = v
    return out


def _build_power(raw: dict, path: Path) -> PowerSpec:
    check_keys(raw, _POWER_KEYS, path, prefix="power.")
    w = {k: _check(raw[k], _FLOAT, path, f"power.{k}") for k in _POWER_KEYS}
    if not 0 <= w["idle_w"] <= w["standby_w"] <= w["active_w"]:
        raise ProfileError("power must satisfy 0 <= idle_w <= standby_w <= active_w, got "
                           f"{w['idle_w']}, {w['standby_w']}, {w['active_w']}",
                           file=str(path), key="power")
    return PowerSpec(**w)


def _load_network(device_path: Path, rel: str, gpus_per_node: int) -> dict:
    file = device_path.parent / rel
    if not file.is_file():
        raise ProfileError(f"network file '{rel}' not found (looked in {file.parent})",
                           file=str(device_path), key="network")
    raw = _read_yaml(file, "network file")
    check_keys(raw, _NETWORK_KEYS, file)
    for key in _NETWORK_KEYS:
        if not isinstance(raw[key], list) or len(raw[key]) != 1:
            raise ProfileError("expected a one-entry list (the intra-node dimension only)",
                               file=str(file), key=key)
    topo = raw["topology"][0]
    if topo not in HOPS:
        raise ProfileError(f"topology '{topo}' is not one of {', '.join(HOPS)}",
                           file=str(file), key="topology")
    npus = _check(raw["npus_count"][0], _INT, file, "npus_count")
    if npus != gpus_per_node:
        raise ProfileError(f"npus_count {npus} must equal the device's gpus_per_node "
                           f"{gpus_per_node}", file=str(file), key="npus_count")
    bw = _positive(_check(raw["bandwidth"][0], _FLOAT, file, "bandwidth"), file, "bandwidth")
    lat = _check(raw["latency"][0], _FLOAT, file, "latency")
    if lat < 0:
        raise ProfileError(f"must be >= 0, got {lat!r}", file=str(file), key="latency")
    return {"topology": (topo,), "npus_count": (npus,), "bandwidth": (bw,), "latency": (lat,)}


def _load_system(device_path: Path, rel: str, mem_bw: float, peak: float) -> dict:
    file = device_path.parent / rel
    if not file.is_file():
        raise ProfileError(f"system file '{rel}' not found (looked in {file.parent})",
                           file=str(device_path), key="system")
    raw = load_json(file, error=ProfileError, what="system file", problem="not valid JSON")
    check_keys(raw, _SYSTEM_KEYS, file)
    for key, kind in _SYSTEM_KEYS.items():
        _check(raw[key], kind, file, key)
    if raw["endpoint-delay"] < 0 or raw["preferred-dataset-splits"] < 1:
        raise ProfileError("endpoint-delay must be >= 0 and preferred-dataset-splits >= 1",
                           file=str(file), key="endpoint-delay")
    for key, want, src in (("local-mem-bw", mem_bw, "memory_bandwidth_gbs"),
                           ("peak-perf", peak, "peak_bf16_tflops")):
        if float(raw[key]) != want:
            raise ProfileError(f"{raw[key]} differs from the device's {src} {want} in "
                               f"{device_path.name}", file=str(file), key=key)
    return raw
