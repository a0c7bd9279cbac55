"""Per-rank graph preparation: classify nodes, index dependencies, validate references.

A :class:`RankGraph` is the immutable, pre-digested form of one rank's Chakra nodes that the
event loop walks. Building it is where workload errors are found (duplicate ids, dependencies
on ids that do not exist, communication nodes marked as CPU ops, unsupported collectives).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..chakra.schema import CollectiveCommType, Node, NodeType
from ..errors import WorkloadError

# what a node does when issued
OP_COMPUTE, OP_COLL, OP_SEND, OP_RECV, OP_MEM, OP_SKIP, OP_REPLAY = range(7)
# which per-rank slot it holds while in flight (ASTRA-Sim HardwareResource)
SLOT_COMP, SLOT_COMM, SLOT_CPU, SLOT_NONE = 0, 1, 2, 3

_COLL_KINDS = {
    int(CollectiveCommType.ALL_REDUCE): "all-reduce", int(CollectiveCommType.ALL_GATHER): "all-gather",
    int(CollectiveCommType.REDUCE_SCATTER): "reduce-scatter", int(CollectiveCommType.ALL_TO_ALL): "all-to-all",
}


@dataclass(slots=True)
class RankGraph:
    """One rank's nodes in file order plus derived arrays (all indexed by position)."""

    rank: int
    nodes: list[Node]
    ids: list[int]
    op: list[int]
    slot: list[int]
    ndeps: list[int]            # number of distinct dependencies
    children: list[list[int]]   # positions that depend on this one


def _slot_and_op(node: Node, rank: int, replay_only: bool) -> tuple[int, int]:
    is_cpu = bool(node.get("is_cpu_op", False))
    t = node.type
    if t in (NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE) and is_cpu:
        raise WorkloadError(f"rank {rank} node {node.id}: a communication node cannot be a CPU op (is_cpu_op)")
    if is_cpu:
        slot = SLOT_CPU
    elif t == NodeType.COMP_NODE:
        slot = SLOT_COMP
    elif t == NodeType.COMM_RECV_NODE:
        slot = SLOT_NONE
    else:
        slot = SLOT_COMM
    if t in (NodeType.INVALID_NODE, NodeType.METADATA_NODE):
        return slot, OP_SKIP
    if replay_only:
        return slot, OP_REPLAY
    if t == NodeType.COMP_NODE:
        return slot, OP_COMPUTE
    if t in (NodeType.MEM_LOAD_NODE, NodeType.MEM_STORE_NODE):
        return slot, OP_MEM
    if t == NodeType.COMM_SEND_NODE:
        return slot, OP_SEND
    if t == NodeType.COMM_RECV_NODE:
        return slot, OP_RECV
    ctype = node.get("comm_type")
    if ctype is None:
        raise WorkloadError(f"rank {rank} node {node.id}: collective without a 'comm_type' attribute")
    ctype = int(ctype)
    if ctype == CollectiveCommType.BROADCAST:
        return slot, OP_REPLAY  # upstream replays broadcasts from duration_micros
    if ctype not in _COLL_KINDS:
        name = CollectiveCommType(ctype).name if ctype in CollectiveCommType._value2member_map_ else str(ctype)
        raise WorkloadError(f"rank {rank} node {node.id}: collective {name} is not supported "
                            "(ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, BROADCAST)")
    return slot, OP_COLL


def coll_kind(node: Node) -> str:
    return _COLL_KINDS[int(node.get("comm_type"))]


def build_rank_graph(rank: int, nodes: Sequence[Node], replay_only: bool) -> RankGraph:
    """Digest one rank's nodes; raises WorkloadError naming rank and node id on bad input."""
    nodes = list(nodes)
    pos: dict[int, int] = {}
    for i, n in enumerate(nodes):
        if n.id in pos:
            raise WorkloadError(f"rank {rank}: node id {n.id} appears twice")
        pos[n.id] = i
    op, slot, ndeps = [], [], []
    children: list[list[int]] = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        s, o = _slot_and_op(n, rank, replay_only)
        slot.append(s)
        op.append(o)
        deps = set(n.data_deps)
        deps.update(n.ctrl_deps)
        for d in sorted(deps):
            j = pos.get(d)
            if j is None:
                raise WorkloadError(f"rank {rank} node {n.id}: depends on node {d}, which does not exist")
            if j == i:
                raise WorkloadError(f"rank {rank} node {n.id}: depends on itself")
            children[j].append(i)
        ndeps.append(len(deps))
    return RankGraph(rank, nodes, [n.id for n in nodes], op, slot, ndeps, children)
