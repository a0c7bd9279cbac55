"""The network between nodes: a device YAML's ``inter_node`` block, and the ASTRA-Sim
multi-dimensional network ``[intra-node, inter-node]`` of an instance that spans nodes.

    inter_node:
      fabric: "InfiniBand NDR, 8 x ConnectX-7 per node"   # descriptive
      topology: Switch        # rail-optimised: GPU i of every node on rail switch i (2 hops)
      nic_gbps: 400           # per-GPU NIC line rate, Gb/s (decimal)
      latency_ns: 1000        # per link hop (NIC -> switch, switch -> NIC)

Invariants: ``topology`` is an ASTRA-Sim topology name (Ring, FullyConnected, Switch);
``nic_gbps > 0``; ``latency_ns >= 0``; no other key. An instance on k nodes of g GPUs is the
network ``npus_count: [g, k]``: NPU id = node position x g + node-local GPU, so dimension 0 is
the node's own network (as the device file gives it) and dimension 1 joins GPU i of every node
(one NIC per GPU). A transfer between two nodes is timed on dimension 1 from the sender to
the GPU of the same local index on the receiving node (its rail); a change of local index on
the way is an intra-node hop NCCL pipelines behind the network transfer (PXN), not timed.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .device_keys import GIB_PER_GB, check_keys
from .errors import ProfileError

INTER_NODE_KEYS = ("fabric", "topology", "nic_gbps", "latency_ns")
_TOPOLOGIES = ("Ring", "FullyConnected", "Switch")


@dataclass(frozen=True)
class InterNode:
    fabric: str
    topology: str
    nic_gbps: float
    latency_ns: float

    @property
    def bandwidth_gbs(self) -> float:
        """The NIC line rate as an ASTRA-Sim network ``bandwidth`` (its "GB/s" unit)."""
        return round(self.nic_gbps / 8 / GIB_PER_GB, 3)


def parse_inter_node(raw, path: Path) -> InterNode:
    """The device file's ``inter_node`` block; ProfileError naming the file and key otherwise."""
    check_keys(raw, INTER_NODE_KEYS, path, prefix="inter_node.")
    if not isinstance(raw["fabric"], str):
        raise ProfileError(f"expected a string, got {raw['fabric']!r}", file=str(path), key="inter_node.fabric")
    if raw["topology"] not in _TOPOLOGIES:
        raise ProfileError(f"topology {raw['topology']!r} is not one of {', '.join(_TOPOLOGIES)}",
                           file=str(path), key="inter_node.topology")
    nums = {}
    for key in ("nic_gbps", "latency_ns"):
        v = raw[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < 0 or (key == "nic_gbps" and v == 0):
            raise ProfileError(f"must be a number {'> 0' if key == 'nic_gbps' else '>= 0'}, got {v!r}",
                               file=str(path), key=f"inter_node.{key}")
        nums[key] = float(v)
    return InterNode(raw["fabric"], raw["topology"], nums["nic_gbps"], nums["latency_ns"])


def two_level_network(intra: dict, inter: InterNode, gpus_per_node: int, nodes: int) -> dict:
    """``intra`` (a one-dimension network of the node) with the inter-node dimension added:
    ``npus_count [gpus_per_node, nodes]``."""
    return {"topology": [intra["topology"][0], inter.topology], "npus_count": [gpus_per_node, nodes],
            "bandwidth": [intra["bandwidth"][0], inter.bandwidth_gbs],
            "latency": [intra["latency"][0], inter.latency_ns]}


IMPLEMENTATION_KEYS = ("all-reduce-implementation", "all-gather-implementation",
                       "reduce-scatter-implementation", "all-to-all-implementation")


def per_dimension_system(system: dict, ndims: int) -> dict:
    """``system`` with one collective implementation per network dimension (ASTRA-Sim wants
    one entry per dimension): a device's one-entry list is repeated for the inter-node
    dimension (a ring per dimension for the devices shipped). A system that already lists
    ``ndims`` entries is returned as it is."""
    out = dict(system)
    for key in IMPLEMENTATION_KEYS:
        impl = list(out.get(key) or [])
        if impl and len(impl) < ndims:
            out[key] = impl + [impl[-1]] * (ndims - len(impl))
    return out
