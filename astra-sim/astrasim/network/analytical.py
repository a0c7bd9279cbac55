"""Congestion-unaware analytical network (ASTRA-Sim ``analytical/congestion_unaware``).

A message costs ``floor(hops * latency + size / B)`` ns with ``B = bandwidth * 2^30 / 1e9``
bytes per ns (the same double arithmetic as the C++ backend, then truncated). Links are never
shared, so concurrent messages do not slow each other down.

Hops inside one dimension: Ring - shortest way round the (bidirectional) ring; FullyConnected - 1;
Switch - 2 (up to the switch and down). In a multi-dimensional network a message travels only
in the first (innermost) dimension where source and destination coordinates differ, using that
dimension's link parameters; this matches the upstream backend, which never routes over two
dimensions for one message.
"""
from __future__ import annotations

from ..config.network import DimSpec, NetworkConfig
from ..errors import WorkloadError
from .base import NetworkBackend


def bandwidth_bytes_per_ns(bandwidth_gbs: float) -> float:
    """GB/s (binary giga, as upstream) -> bytes per ns."""
    return bandwidth_gbs * (1 << 30) / 1_000_000_000


def dim_hops(topology: str, npus: int, a: int, b: int) -> int:
    """Hops between local ids ``a != b`` inside one dimension."""
    if topology == "FullyConnected":
        return 1
    if topology == "Switch":
        return 2
    cw = (b - a) % npus
    return min(cw, npus - cw)


class AnalyticalNetwork(NetworkBackend):
    """Congestion-unaware model over one or more dimensions. Owns only immutable topology facts."""

    def __init__(self, config: NetworkConfig):
        self.config = config
        self._dims = config.dims
        self._npus = config.npus_count
        self._bpns = [bandwidth_bytes_per_ns(d.bandwidth_gbs) for d in self._dims]
        self._addr = [self._compute_address(i) for i in range(self._npus)]
        # (src, dst) -> (hops * latency, bytes per ns) of a valid pair: a collective's phase
        # asks for the same pairs at every new message size, and the route does not depend on it
        self._pair: dict = {}

    @property
    def dims(self) -> tuple[DimSpec, ...]:
        return self._dims

    @property
    def npus_count(self) -> int:
        return self._npus

    def _compute_address(self, npu: int) -> tuple[int, ...]:
        out = []
        for d in self._dims:
            out.append(npu % d.npus)
            npu //= d.npus
        return tuple(out)

    def address(self, npu: int) -> tuple[int, ...]:
        return self._addr[npu]

    def _route(self, src: int, dst: int) -> tuple[int, int]:
        """(dimension, hops) of a message; raises WorkloadError for an invalid pair."""
        if not (0 <= src < self._npus and 0 <= dst < self._npus):
            raise WorkloadError(f"message {src}->{dst} names an NPU outside 0..{self._npus - 1}")
        if src == dst:
            raise WorkloadError(f"message from NPU {src} to itself")
        a, b = self._addr[src], self._addr[dst]
        for dim, (x, y) in enumerate(zip(a, b)):
            if x != y:
                d = self._dims[dim]
                return dim, dim_hops(d.topology, d.npus, x, y)
        raise AssertionError("distinct NPUs share an address")

    def hops(self, src: int, dst: int) -> int:
        return self._route(src, dst)[1]

    def send_ns(self, src: int, dst: int, size: int) -> int:
        hit = self._pair.get((src, dst))
        if hit is None:
            dim, hops = self._route(src, dst)
            hit = self._pair[(src, dst)] = (hops * self._dims[dim].latency_ns, self._bpns[dim])
        return int(hit[0] + float(size) / hit[1])


def analytical_network_from_link(topology: str, npus: int, bandwidth_gbs: float,
                                 latency_ns: float) -> AnalyticalNetwork:
    """A one-dimensional congestion-unaware network, e.g. ``("FullyConnected", 8, 400.0, 936.25)``."""
    from ..config.network import parse_network

    cfg = parse_network({"topology": [topology], "npus_count": [npus], "bandwidth": [bandwidth_gbs],
                         "latency": [latency_ns]}, "analytical_network_from_link")
    return AnalyticalNetwork(cfg)
