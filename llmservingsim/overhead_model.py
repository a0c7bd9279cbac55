"""Step cost beyond profiled kernels: framework overhead and the cost of each collective.

The profile bundles time each operator's GPU kernels in isolation (vLLM layerwise profile,
eager mode, tensor parallelism emulated on one GPU, no communication). A real vLLM step
also pays (docs/overhead-model.md derives each term and its fit):

``framework`` (per device; TP-independent host and framework costs)
    ``step_us``          every step: host work the async pipeline does not hide, and the
                         difference between eager-profiled and CUDA-graph decode kernels
                         (negative when graphs run faster than the profile);
    ``prefill_us``       per prefill chunk in the step: admission, KV block allocation,
                         block-table and input preparation of a chunk, a step outside the
                         CUDA-graph sizes;
    ``prefill_compute``  relative extra time of the step's prefill share of compute
                         (clocks under sustained compute-bound load: the share is
                         compute x prefill tokens / tokens).

``collectives`` (per device and TP size): the cost of one all-reduce of S bytes on TP GPUs
as vLLM dispatches it, a list of regimes ``latency_us + S / bandwidth_gbs`` chosen by the
first ``max_bytes`` that S fits under (e.g. vLLM's custom all-reduce below its 8 MiB buffer
on 2 GPUs, NCCL above). The execution graph charges each collective on the system simulator
with a ring network whose link latency and bandwidth reproduce the regime at that TP size
(``Regime.ring_network``, execution_graph.py).

A model whose bundle on this device has its own residual table may carry its own framework
terms (``models:``), fitted on that table; other models get the device's.

A device without a file in ``hardware/overhead/`` gets no framework overhead and the
generic collective model of its device file (measured NCCL bus bandwidth and fixed cost),
and the run says so (``OverheadModel.source``).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

from .errors import ProfileError, finite_number, load_yaml
from .paths import hardware_dir

FRAMEWORK_KEYS = ("step_us", "prefill_us", "prefill_compute")
REGIME_KEYS = ("latency_us", "bandwidth_gbs")


@dataclass(frozen=True)
class Framework:
    """The framework's overhead of one step: µs per step and per prefill, and ``prefill_compute``
    times the compute of the step's prefill share of tokens."""
    step_us: float = 0.0
    prefill_us: float = 0.0
    prefill_compute: float = 0.0

    def us(self, num_prefills: int, prefill_tokens: int, num_tokens: int, compute_us: float) -> float:
        """Overhead of one step (µs) given its shape and its profiled compute."""
        v = self.step_us + self.prefill_us * num_prefills
        if prefill_tokens and self.prefill_compute:
            v += self.prefill_compute * compute_us * prefill_tokens / num_tokens
        return v


@dataclass(frozen=True)
class Regime:
    """One all-reduce costs ``latency_us + bytes / bandwidth_gbs`` below ``max_bytes``."""
    latency_us: float
    bandwidth_gbs: float
    max_bytes: Optional[int] = None      # None: no upper bound (the last regime)

    def us(self, size_bytes: int) -> float:
        """One all-reduce of ``size_bytes`` (decimal GB/s: bytes / (GB/s x 1e3) is µs)."""
        return self.latency_us + size_bytes / (self.bandwidth_gbs * 1e3)

    @classmethod
    def of_ring(cls, bus_bandwidth_gbs: float, fixed_ns: float, n: int) -> "Regime":
        """The per-call regime of an ``n``-GPU ring (``n`` >= 2) with bus bandwidth
        ``bus_bandwidth_gbs`` and 2-GPU fixed cost ``fixed_ns``: :meth:`ring_network`'s inverse
        (the fixed cost paid n - 1 times, 2 (n - 1) / n of the bytes moved)."""
        return cls((n - 1) * fixed_ns / 1000.0, bus_bandwidth_gbs * n / (2 * (n - 1)))

    def ring_network(self, n: int) -> tuple:
        """(bus bandwidth GB/s, 2-GPU fixed cost ns) of the ring network whose ``n``-GPU
        all-reduce costs :meth:`us`: a ring pays the fixed cost n - 1 times and moves
        2 (n - 1) / n of the bytes (execution_graph.network_config); identity at n = 2."""
        if n < 2:
            return self.bandwidth_gbs, self.latency_us * 1000.0
        return self.bandwidth_gbs * 2 * (n - 1) / n, self.latency_us * 1000.0 / (n - 1)


@dataclass(frozen=True)
class OverheadModel:
    """A device's step overhead: framework terms, and the collective regimes per TP size."""
    framework: Framework = field(default_factory=Framework)
    collectives: dict = field(default_factory=dict)       # TP size -> tuple[Regime, ...]
    source: str = "none"
    models: dict = field(default_factory=dict)            # model name -> Framework (own table)

    def regimes_for(self, tp: int) -> Optional[tuple]:
        return self.collectives.get(tp)

    def for_model(self, model: str) -> "OverheadModel":
        """This device's model with the framework terms of ``model`` (its own fit if any)."""
        fw = self.models.get(model)
        return self if fw is None else replace(self, framework=fw, models={})

    def with_framework(self, **changes) -> "OverheadModel":
        return replace(self, framework=replace(self.framework, **changes))


def regime_for(regimes: tuple, size_bytes: int) -> Regime:
    for r in regimes:
        if r.max_bytes is None or size_bytes < r.max_bytes:
            return r
    return regimes[-1]


def _number(v, file, key, minimum=None):
    if not finite_number(v):
        raise ProfileError(f"expected a finite number, got {v!r}", file=file, key=key)
    if minimum is not None and v < minimum:
        raise ProfileError(f"must be >= {minimum}, got {v!r}", file=file, key=key)
    return float(v)


def parse_framework(raw, file: str, prefix: str = "framework") -> Framework:
    if not isinstance(raw, dict):
        raise ProfileError("expected a mapping", file=file, key=prefix)
    unknown = set(raw) - set(FRAMEWORK_KEYS)
    if unknown:
        raise ProfileError(f"unknown key (expected: {', '.join(FRAMEWORK_KEYS)})", file=file,
                           key=f"{prefix}.{sorted(unknown)[0]}")
    vals = {k: _number(raw[k], file, f"{prefix}.{k}") for k in FRAMEWORK_KEYS if k in raw}
    if vals.get("prefill_compute", 0.0) <= -1:
        raise ProfileError("must be > -1", file=file, key=f"{prefix}.prefill_compute")
    return Framework(**vals)


def parse_regimes(raw, file: str, key: str) -> tuple:
    if not isinstance(raw, list) or not raw:
        raise ProfileError("expected a non-empty list of regimes", file=file, key=key)
    out = []
    for i, r in enumerate(raw):
        k = f"{key}[{i}]"
        if not isinstance(r, dict):
            raise ProfileError("expected a mapping", file=file, key=k)
        unknown = set(r) - set(REGIME_KEYS) - {"max_bytes"}
        if unknown:
            raise ProfileError("unknown key (expected: max_bytes, latency_us, bandwidth_gbs)", file=file,
                               key=f"{k}.{sorted(unknown)[0]}")
        for need in REGIME_KEYS:
            if need not in r:
                raise ProfileError("missing key", file=file, key=f"{k}.{need}")
        mb = r.get("max_bytes")
        if mb is not None and (isinstance(mb, bool) or not isinstance(mb, int) or mb <= 0):
            raise ProfileError(f"expected a positive integer, got {mb!r}", file=file, key=f"{k}.max_bytes")
        bw = _number(r["bandwidth_gbs"], file, f"{k}.bandwidth_gbs")
        if bw <= 0:
            raise ProfileError("must be > 0", file=file, key=f"{k}.bandwidth_gbs")
        out.append(Regime(_number(r["latency_us"], file, f"{k}.latency_us", 0.0), bw, mb))
    bounds = [r.max_bytes for r in out[:-1]]
    if any(b is None for b in bounds) or bounds != sorted(bounds):
        raise ProfileError("regimes must be ordered by max_bytes, only the last one unbounded", file=file, key=key)
    return tuple(out)


def parse_overhead(raw, file: str) -> OverheadModel:
    if not isinstance(raw, dict):
        raise ProfileError("an overhead file must be a mapping", file=file)
    unknown = set(raw) - {"device", "framework", "models", "collectives", "provenance"}
    if unknown:
        raise ProfileError("unknown key (expected: device, framework, models, collectives, provenance)", file=file,
                           key=sorted(unknown)[0])
    framework = parse_framework(raw.get("framework") or {}, file)
    models = raw.get("models") or {}
    if not isinstance(models, dict):
        raise ProfileError("expected a mapping of model name to framework terms", file=file, key="models")
    models = {str(m): parse_framework(v, file, f"models.{m}") for m, v in models.items()}
    coll = {}
    for tp_key, regimes in (raw.get("collectives") or {}).items():
        if not (isinstance(tp_key, str) and tp_key.startswith("tp") and tp_key[2:].isdigit()):
            raise ProfileError("collectives are keyed tp<N>", file=file, key=f"collectives.{tp_key}")
        coll[int(tp_key[2:])] = parse_regimes(regimes, file, f"collectives.{tp_key}")
    return OverheadModel(framework, coll, source=str(raw.get("provenance", file)).strip().splitlines()[0],
                         models=models)


def overhead_path(device_name: str) -> Path:
    return hardware_dir() / "overhead" / f"{device_name}.yaml"


def load_overhead(device_name: str, path: Optional[Path] = None) -> OverheadModel:
    """The fitted overhead model of a device (``hardware/overhead/<device>.yaml``); none
    (zero framework cost, generic collectives) when the device has no file."""
    path = Path(path) if path is not None else overhead_path(device_name)
    if not path.is_file():
        return OverheadModel(source=f"none: no fit for {device_name} (hardware/overhead/{device_name}.yaml)")
    raw = load_yaml(path, error=ProfileError, what="overhead model")
    return parse_overhead(raw, str(path))
