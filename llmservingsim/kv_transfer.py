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
``hops x latency + bytes / bandwidth``. A transfer between nodes needs an inter-node
network, which a device file does not describe: the builder refuses such a layout.

Invariants: the result is a pure function of (prefill instance, decode instance, blocks)
and is memoised by it; 0 blocks (the decode instance hit the whole prompt locally) cost 0 ns
(vLLM then only notifies the prefill instance to free its blocks).
"""
from __future__ import annotations

from dataclasses import dataclass

from astrasim import Node, NodeType

from .errors import astrasim_errors
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

    def graphs(self, p: int, d: int, num_blocks: int) -> list:
        """The per-GPU Chakra graphs of one transfer on its node (index = GPU id)."""
        a, b = self.places[p], self.places[d]
        size = self.read_bytes(p, d, num_blocks)
        graphs: list = [[] for _ in range(a.device.gpus_per_node)]
        for tag, (i, j) in enumerate(rank_reads(a.tp, b.tp)):
            src, dst = a.gpus[i], b.gpus[j]
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
                a = self.places[p]
                with astrasim_errors():
                    v = self._simulator(a.node, a.device).run(self.graphs(p, d, num_blocks)).makespan_ns
            self._memo[key] = v
        return v
