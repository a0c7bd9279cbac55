"""KV transfer between a prefill and a decode instance (P/D disaggregation), timed as a
send/recv execution graph by the system simulator.

vLLM's NIXL connector has every decode-instance TP rank read, from the prefill instance's
ranks that hold the same KV heads, the blocks it did not find in its own prefix cache
(``get_unhashed_block_ids``): whole blocks, every layer. Here each such read is one Chakra
``COMM_SEND_NODE`` on the prefill rank and a matching ``COMM_RECV_NODE`` on the decode rank
(a one-sided RDMA read moves the same bytes over the same links as a send); the graph of all
ranks runs on the node's network (``SystemSimulator.run``) and the transfer takes its
makespan.

Bytes of one read: ``blocks x block_size x kv_bytes_per_token`` of the rank that holds the
fewer heads (``ModelSpec.kv_bytes_per_token(tp)``: K and V of every layer for that rank's
share of the KV heads). Rank pairing (vLLM requires one TP size to divide the other):

- equal TP: decode rank j reads from prefill rank j;
- decode TP = r x prefill TP: decode rank j reads its heads from prefill rank j // r;
- prefill TP = r x decode TP: decode rank j reads from prefill ranks j*r .. j*r+r-1.

Network: both instances on one node, on the device's intra-node network (its topology and
fitted link bandwidth, as ``network_config``) whose link latency is set from the device's
measured fixed cost of a tiny collective (``collective_latency_ns`` / (2 messages x hops),
the rule ``execution_graph.network_config`` applies to the TP group), so one message costs
``hops x latency + bytes / bandwidth``.

Between nodes (``inter_node.py``), on the two-level network ``[intra-node, inter-node]`` of
the two nodes (``npus_count [g, 2]``, g the larger ``gpus_per_node``): the prefill node is
position 0, the decode node position 1, NPU = position x g + local GPU. Every read crosses
dimension 1 only, from the prefill GPU to the GPU of the same local index on the decode
node (the sender's rail, as ``RankLayout.rail_peer`` times a pipeline hand-off; the hop to
another local index is NCCL's PXN forwarding, not timed), so one message costs ``hops x
latency_ns + bytes / NIC bandwidth`` of the ``inter_node`` block (Switch: 2 hops). Both
devices need an ``inter_node`` block (``transfer_network`` refuses otherwise). With two
different devices (vLLM's NIXL connector moves KV between different GPUs when the model
and KV layout match) the dimension is the slower NIC's block: the lower ``nic_gbps``, on a
tie the higher ``latency_ns`` (a transfer runs at the pace of its slower end; a NIC's line
rate bounds both its sending and its receiving). Dimension 0 (not crossed) is the prefill
device's intra-node network.

Invariants: the result is a pure function of (prefill instance, decode instance, blocks)
and is memoised by it; 0 blocks (the decode instance hit the whole prompt locally) cost 0 ns
(vLLM then only notifies the prefill instance to free its blocks).
"""
from __future__ import annotations

from dataclasses import dataclass

from astrasim import Node, NodeType

from .errors import ConfigError, astrasim_errors
from .execution_graph import network_config, system_simulator


@dataclass(frozen=True)
class InstancePlace:
    """Where an instance's ranks are and what one rank's KV weighs."""
    node: int
    gpus: tuple              # GPU ids on its node, in rank order
    device: object           # hardware.Device
    kv_bytes_per_token: int  # of one rank (model.kv_bytes_per_token(tp, pp))

    @property
    def tp(self) -> int:
        return len(self.gpus)


def rank_reads(tp_p: int, tp_d: int) -> list[tuple[int, int]]:
    """(prefill rank, decode rank) of every read (module docstring)."""
    if tp_p == tp_d:
        return [(j, j) for j in range(tp_d)]
    if tp_d > tp_p:
        r = tp_d // tp_p
        return [(j // r, j) for j in range(tp_d)]
    r = tp_p // tp_d
    return [(j * r + k, j) for j in range(tp_d) for k in range(r)]


def slower_inter_node(a, b):
    """The ``inter_node`` block of the slower NIC of devices ``a`` and ``b`` (module docstring);
    ConfigError naming ``instances`` unless both have one."""
    for dev in (a, b):
        if dev.inter_node is None:
            raise ConfigError(f"a KV transfer between nodes crosses the network between them, but device "
                              f"{dev.name} ({dev.path}) has no inter_node block: add one, or put the "
                              f"prefill and decode instances on one node", key="instances")
    x, y = a.inter_node, b.inter_node
    return min((x, y), key=lambda n: (n.nic_gbps, -n.latency_ns))


def cross_node_network(a, b) -> tuple:
    """(network, g) of a transfer from a node of device ``a`` to one of device ``b``."""
    from .inter_node import two_level_network
    g = max(a.gpus_per_node, b.gpus_per_node)
    intra = network_config(a, a.gpus_per_node, 1, None, a.collective_latency_ns)
    return two_level_network(intra, slower_inter_node(a, b), g, 2), g


class KVTransferModel:
    def __init__(self, places: list, block_size: int):
        self.places = places
        self.block_size = block_size
        self._sims: dict = {}
        self._memo: dict = {}

    def read_bytes(self, p: int, d: int, num_blocks: int) -> int:
        """Bytes of one rank-to-rank read (every read of a transfer moves the same)."""
        a, b = self.places[p], self.places[d]
        per_token = min(a.kv_bytes_per_token, b.kv_bytes_per_token)
        return num_blocks * self.block_size * per_token

    def total_bytes(self, p: int, d: int, num_blocks: int) -> int:
        return self.read_bytes(p, d, num_blocks) * len(rank_reads(self.places[p].tp, self.places[d].tp))

    def _simulator(self, node: int, device):
        sim = self._sims.get(node)
        if sim is None:
            n = device.gpus_per_node
            net = network_config(device, n, 1, None, device.collective_latency_ns)
            sim = self._sims[node] = system_simulator(device, n, 1, net)
        return sim

    def _cross_simulator(self, a, b):
        key = ("nodes", a.device.name, b.device.name)
        sim = self._sims.get(key)
        if sim is None:
            net, g = cross_node_network(a.device, b.device)
            sim = self._sims[key] = system_simulator(a.device, 2 * g, 1, net, groups={})
        return sim

    def graphs(self, p: int, d: int, num_blocks: int) -> list:
        """The per-NPU Chakra graphs of one transfer: on one node, index = GPU id; between
        nodes, the two-level network's NPUs (module docstring)."""
        a, b = self.places[p], self.places[d]
        size = self.read_bytes(p, d, num_blocks)
        if a.node == b.node:
            n, base, rail = a.device.gpus_per_node, 0, None
        else:
            g = max(a.device.gpus_per_node, b.device.gpus_per_node)
            n, base, rail = 2 * g, g, g
        graphs: list = [[] for _ in range(n)]
        for tag, (i, j) in enumerate(rank_reads(a.tp, b.tp)):
            src = a.gpus[i]
            dst = b.gpus[j] if rail is None else base + src      # the sender's rail on the decode node
            g = graphs[src]
            g.append(Node.make(len(g), NodeType.COMM_SEND_NODE, f"kv_send_{tag}", comm_src=src, comm_dst=dst,
                               comm_size=size, comm_tag=tag, is_cpu_op=False))
            g = graphs[dst]
            g.append(Node.make(len(g), NodeType.COMM_RECV_NODE, f"kv_recv_{tag}", comm_src=src, comm_dst=dst,
                               comm_size=size, comm_tag=tag, is_cpu_op=False))
        return graphs

    def transfer_ns(self, p: int, d: int, num_blocks: int) -> int:
        key = (p, d, num_blocks)
        v = self._memo.get(key)
        if v is None:
            if num_blocks <= 0:
                v = 0
            else:
                a, b = self.places[p], self.places[d]
                sim = self._simulator(a.node, a.device) if a.node == b.node else self._cross_simulator(a, b)
                with astrasim_errors():
                    v = sim.run(self.graphs(p, d, num_blocks)).makespan_ns
            self._memo[key] = v
        return v
