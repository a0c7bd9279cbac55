"""Network YAML reader (ASTRA-Sim analytical backend format).

One list entry per dimension::

    topology: [ Ring, Switch ]     # Ring | FullyConnected | Switch
    npus_count: [ 4, 2 ]           # >= 1 each (ASTRA-Sim wants > 1); total NPUs = product
    bandwidth: [ 400.0, 50.0 ]     # GB/s per link per direction (x 2^30 / 1e9 -> bytes per ns)
    latency: [ 936.25, 2000 ]      # ns per hop

A scalar is accepted where a one-element list is meant. NPU ``i`` has coordinate
``(i mod n0, (i div n0) mod n1, ...)``: dimension 0 varies fastest.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ._read import load_yaml

TOPOLOGIES = ("Ring", "FullyConnected", "Switch")


@dataclass(frozen=True, slots=True)
class DimSpec:
    """One network dimension: building block, size, link bandwidth (GB/s) and latency (ns)."""

    topology: str
    npus: int
    bandwidth_gbs: float
    latency_ns: float


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    dims: tuple[DimSpec, ...]
    source: str = "<in-process>"

    @property
    def npus_count(self) -> int:
        total = 1
        for d in self.dims:
            total *= d.npus
        return total


def _as_list(data: dict, key: str, where: str) -> list:
    if key not in data:
        raise ConfigError("required key is missing", file=where, key=key)
    v = data[key]
    if not isinstance(v, list):
        v = [v]
    if not v:
        raise ConfigError("must list one entry per dimension, got an empty list", file=where, key=key)
    return v


def _num(v: Any, key: str, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConfigError(f"entries must be numbers, got {v!r}", file=where, key=key)
    return v


def parse_network(data: dict, where: str = "<in-process>") -> NetworkConfig:
    """Validate a network mapping; raises ConfigError naming ``where`` and the key."""
    topos = _as_list(data, "topology", where)
    npus = _as_list(data, "npus_count", where)
    bws = _as_list(data, "bandwidth", where)
    lats = _as_list(data, "latency", where)
    for key, lst in (("npus_count", npus), ("bandwidth", bws), ("latency", lats)):
        if len(lst) != len(topos):
            raise ConfigError(f"has {len(lst)} entries but 'topology' has {len(topos)} dimensions",
                              file=where, key=key)
    dims = []
    for t, n, bw, lat in zip(topos, npus, bws, lats):
        if t not in TOPOLOGIES:
            raise ConfigError(f"unsupported topology {t!r} (use {', '.join(TOPOLOGIES)})",
                              file=where, key="topology")
        n = _num(n, "npus_count", where)
        if int(n) != n or n < 1:
            raise ConfigError(f"entries must be integers >= 1, got {n!r}", file=where, key="npus_count")
        if _num(bw, "bandwidth", where) <= 0:
            raise ConfigError(f"entries must be > 0, got {bw!r}", file=where, key="bandwidth")
        if _num(lat, "latency", where) < 0:
            raise ConfigError(f"entries must be >= 0, got {lat!r}", file=where, key="latency")
        dims.append(DimSpec(t, int(n), float(bw), float(lat)))
    return NetworkConfig(tuple(dims), where)


def load_network_config(path) -> NetworkConfig:
    return parse_network(load_yaml(path), str(path))
