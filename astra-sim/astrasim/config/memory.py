"""Remote-memory JSON reader (ASTRA-Sim analytical remote memory).

``memory-type``: NO_MEMORY_EXPANSION (default; a MEM_LOAD/MEM_STORE node is then an error),
PER_NPU_MEMORY_EXPANSION (each NPU has its own remote memory, requests overlap freely),
PER_NODE_MEMORY_EXPANSION (``num-npus-per-node`` NPUs share one FIFO channel; ``num-nodes``),
MEMORY_POOL (one FIFO channel for all NPUs).
A request for ``tensor_size`` bytes holds its channel for
``remote-mem-latency + floor(tensor_size / (remote-mem-bw * 1e9) * 1e9)`` ns
(``remote-mem-bw`` in decimal GB/s, ``remote-mem-latency`` in ns).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from ._read import get_choice, get_number, load_json

MEMORY_TYPES = ("NO_MEMORY_EXPANSION", "PER_NODE_MEMORY_EXPANSION", "PER_NPU_MEMORY_EXPANSION",
                "MEMORY_POOL")


@dataclass(frozen=True, slots=True)
class RemoteMemoryConfig:
    memory_type: str = "NO_MEMORY_EXPANSION"
    latency_ns: int = 0
    bandwidth_gbs: float = 0.0
    num_nodes: int = 0
    num_npus_per_node: int = 0
    source: str = "<in-process>"

    def access_ns(self, tensor_size: int) -> int:
        """Channel holding time of one request (ASTRA-Sim's double arithmetic, truncated)."""
        return self.latency_ns + int(float(tensor_size) / (self.bandwidth_gbs * 1e9) * 1e9)


def parse_remote_memory(data: dict, where: str = "<in-process>") -> RemoteMemoryConfig:
    mtype = get_choice(data, "memory-type", where, MEMORY_TYPES, "NO_MEMORY_EXPANSION")
    cfg = RemoteMemoryConfig(
        memory_type=mtype,
        latency_ns=get_number(data, "remote-mem-latency", where, default=0, integer=True, minimum=0),
        bandwidth_gbs=float(get_number(data, "remote-mem-bw", where, default=0.0, minimum=0)),
        num_nodes=get_number(data, "num-nodes", where, default=0, integer=True, minimum=0),
        num_npus_per_node=get_number(data, "num-npus-per-node", where, default=0, integer=True, minimum=0),
        source=where,
    )
    if mtype != "NO_MEMORY_EXPANSION" and cfg.bandwidth_gbs <= 0:
        raise ConfigError(f"{mtype} needs remote-mem-bw > 0", file=where, key="remote-mem-bw")
    if mtype == "PER_NODE_MEMORY_EXPANSION" and cfg.num_npus_per_node <= 0:
        raise ConfigError("PER_NODE_MEMORY_EXPANSION needs num-npus-per-node > 0", file=where,
                          key="num-npus-per-node")
    return cfg


def load_remote_memory(path) -> RemoteMemoryConfig:
    return parse_remote_memory(load_json(path), str(path))
