"""Which ASTRA-Sim NPU each rank of an instance is, and on which network.

An instance on one node keeps the network it always had: the device's intra-node dimension
with ``tp x pp`` NPUs, rank r = NPU r (``RankLayout.single``). An instance whose stages span
k nodes runs on the two-dimensional network ``[gpus_per_node, k]``
(``inter_node.two_level_network``), rank r on NPU ``node position x gpus_per_node + local GPU``
of its placement. Invariant: ``npus`` has one distinct NPU per rank, below ``npus_count``.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import ConfigError


@dataclass(frozen=True)
class RankLayout:
    """Where an instance's ranks are: NPU ids, and the node split when it spans nodes."""
    npus: tuple                 # NPU id of rank r
    nodes: int = 1              # nodes the instance spans (1: the single-dimension network)
    gpus_per_node: int = 0      # dimension 0's size when nodes > 1
    inter: object = None        # inter_node.InterNode when nodes > 1

    @staticmethod
    def single(ranks: int) -> "RankLayout":
        return RankLayout(tuple(range(ranks)))

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1

    @property
    def npus_count(self) -> int:
        return self.gpus_per_node * self.nodes if self.multi_node else len(self.npus)

    def node_of(self, rank: int) -> int:
        return self.npus[rank] // self.gpus_per_node if self.multi_node else 0

    def rail_peer(self, src_rank: int, dst_rank: int) -> int:
        """The NPU a transfer from ``src_rank`` to ``dst_rank`` is timed to: the destination
        itself on one node; across nodes, the GPU of the sender's local index on the
        destination's node (the sender's rail, dimension 1 only: inter_node.py)."""
        s, d = self.npus[src_rank], self.npus[dst_rank]
        if not self.multi_node or s // self.gpus_per_node == d // self.gpus_per_node:
            return d
        return (d // self.gpus_per_node) * self.gpus_per_node + s % self.gpus_per_node

    def network(self, intra: dict) -> dict:
        """``intra`` (the instance's one-dimension network) on this layout."""
        if not self.multi_node:
            return intra
        from .inter_node import two_level_network
        return two_level_network(intra, self.inter, self.gpus_per_node, self.nodes)

    def groups(self, tp: int, pp: int) -> dict:
        """The TP communicator groups by NPU id ("1" .. "pp", as the step graphs name them)."""
        if tp == 1:
            return {}
        return {str(s + 1): [self.npus[r] for r in range(s * tp, (s + 1) * tp)] for s in range(pp)}


def layout_for(placement, device, *, key: str = "cluster.nodes", replica: int = 0) -> RankLayout:
    """The layout of an instance placed by ``placement.InstancePlacement`` (data-parallel
    rank ``replica``'s stages: the ranks one step graph has).

    NPU slots within a node need not be the physical GPU indices (the node's network is one
    switch: every slot is alike): a stage that receives from another node takes the slots its
    sender has there, so every transfer between nodes runs on one inter-node rail (dimension 1
    only, as NCCL's PXN routes it) and a step graph replayed by ASTRA-Sim times it as the
    engine does. A placement whose stages return to a node they left may not allow that; it is
    refused with a ConfigError."""
    return _chain_layout(placement.index, placement.rank_groups(replica), placement.tp, device, key,
                         "pipeline stages", "stage")


def dp_layout(placement, device, *, key: str = "cluster.nodes") -> RankLayout:
    """The layout of a lockstep data-parallel server (pp = 1): its ``dp`` TP groups in rank
    order, DP rank d's TP index t at ``npus[d x tp + t]``. On one node that is NPU d x tp + t
    (the network the EP collectives always had). Across nodes the ranks are laid out as
    pipeline stages are (:func:`layout_for`): a rank on another node than the rank before it
    takes that rank's NPU slots there, so the DP group's ring (rank order) crosses between
    nodes on one rail, dimension 1 only, and steps inside a node on dimension 0."""
    return _chain_layout(placement.index, placement.groups, placement.tp, device, key,
                         "data-parallel ranks", "rank")


def _chain_layout(index: int, groups: tuple, tp: int, device, key: str, what: str, unit: str) -> RankLayout:
    nodes = sorted({n for n, _ in groups})
    if len(nodes) == 1:
        return RankLayout.single(tp * len(groups))
    if device.inter_node is None:
        raise ConfigError(f"the instance's {what} span nodes {nodes}, but device {device.name} "
                          f"({device.path}) has no inter_node block (the network between nodes): add one, "
                          f"or place the instance on one node", key=key)
    g = device.gpus_per_node
    pos = {n: i for i, n in enumerate(nodes)}
    free = {n: list(range(g)) for n in nodes}
    slots = []
    for s, (node, _) in enumerate(groups):
        want = slots[s - 1] if s and groups[s - 1][0] != node else None
        if want is not None and all(x in free[node] for x in want):
            mine = want
        elif want is not None:
            raise ConfigError(f"instance {index}: {unit} {s} returns to node {node} after leaving it; "
                              f"{what} must visit each node once, in order", key="cluster.placement")
        else:
            mine = free[node][:tp]
        for x in mine:
            free[node].remove(x)
        slots.append(mine)
    npus = tuple(pos[n] * g + x for (n, _), mine in zip(groups, slots) for x in mine)
    return RankLayout(npus, len(nodes), g, device.inter_node)
