"""Congestion-aware analytical network, one dimension (ASTRA-Sim ``analytical/congestion_aware``).

Messages are stored and forwarded link by link. A link serves one message at a time, in the
order messages reach it (FIFO, ties by arrival order); it stays busy ``floor(size / B)`` ns and
the message reaches the next device ``floor(L + size / B)`` ns after starting on the link.
Topologies: Ring (links between neighbours in both directions; a message goes the shorter way,
clockwise on a tie), FullyConnected (a dedicated link per ordered pair), Switch (NPU -> switch ->
NPU: two links, so an idle path costs ``2 * floor(L + size / B)``).

``send_ns`` is the idle-network delay; contention is modelled by callers that walk
:meth:`hop_times` in time order (the collective phase simulation and the run's send/recv).
"""
from __future__ import annotations

from ..config.network import DimSpec, NetworkConfig
from ..errors import ConfigError, WorkloadError
from .analytical import bandwidth_bytes_per_ns
from .base import NetworkBackend


class CongestionAwareNetwork(NetworkBackend):
    """Link-level model of one network dimension. Owns only immutable topology facts."""

    congestion_aware = True

    def __init__(self, config: NetworkConfig):
        if len(config.dims) != 1:
            raise ConfigError("the congestion-aware backend supports one dimension only",
                              file=config.source, key="topology")
        self.config = config
        self._dim = config.dims[0]
        self._bpns = bandwidth_bytes_per_ns(self._dim.bandwidth_gbs)

    @property
    def dims(self) -> tuple[DimSpec, ...]:
        return self.config.dims

    @property
    def npus_count(self) -> int:
        return self._dim.npus

    def _check(self, src: int, dst: int) -> None:
        n = self._dim.npus
        if not (0 <= src < n and 0 <= dst < n):
            raise WorkloadError(f"message {src}->{dst} names an NPU outside 0..{n - 1}")
        if src == dst:
            raise WorkloadError(f"message from NPU {src} to itself")

    def route(self, src: int, dst: int) -> list[tuple[int, int]]:
        """Directed links ``(from device, to device)``; the switch is device ``npus``."""
        self._check(src, dst)
        n, topo = self._dim.npus, self._dim.topology
        if topo == "FullyConnected":
            return [(src, dst)]
        if topo == "Switch":
            return [(src, n), (n, dst)]
        cw = (dst - src) % n
        step = -1 if n - cw < cw else 1
        links, cur = [], src
        while cur != dst:
            nxt = (cur + step) % n
            links.append((cur, nxt))
            cur = nxt
        return links

    def hop_times(self, src: int, dst: int, size: int) -> list[tuple[object, int, int]]:
        busy = int(float(size) / self._bpns)
        transit = int(self._dim.latency_ns + float(size) / self._bpns)
        return [(link, busy, transit) for link in self.route(src, dst)]

    def hops(self, src: int, dst: int) -> int:
        return len(self.route(src, dst))

    def send_ns(self, src: int, dst: int, size: int) -> int:
        return sum(t for _link, _busy, t in self.hop_times(src, dst, size))
