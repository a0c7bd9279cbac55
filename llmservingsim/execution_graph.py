"""Execution-graph generator: one engine step -> per-rank Chakra graphs (issue 3).

The system simulator (``astrasim``) knows nothing about LLMs; everything LLM-specific is
here. For a step of T tokens on TP x PP ranks (rank = stage * tp + t) every rank gets:

    embedding -> for each of its stage's layers:
        attn (norm, qkv, rope, [q/k norm], attention, o_proj) -> all-reduce(T*hidden*dtype)
        mlp  (norm, gate_up, act, down | moe)                 -> all-reduce(T*hidden*dtype)
    -> [recv from the previous stage] ... [send to the next stage]
    -> final norm, lm_head, sampler (last stage)

Each node depends on the previous one (Megatron-style tensor parallelism: every
all-reduce sits on the critical path), collectives run in the stage's TP communicator
group (``pg_name``). Compute nodes carry the performance model's durations.

Step time: the engine adds the exposed communication of this graph to the compute time.
Because the graph is a dependency chain, its exposed communication is the sum of its
collectives and point-to-point transfers, each timed by the system simulator, and it
depends only on the token count: ``GraphCommModel`` memoises it by that graph shape
(tests check it against full graph runs of :meth:`SystemSimulator.run`).
"""
from __future__ import annotations

from typing import Optional

from astrasim import CollectiveCommType, Node, NodeType, SystemSimulator
from astrasim.config.network import parse_network
from astrasim.config.system import parse_system
from astrasim.network import AnalyticalNetwork

from .perf_model import BatchShape, PerformanceModel

ATTN_OPS = ("layernorm", "qkv_proj", "rotary_emb", "qk_norm", "o_proj")
MLP_OPS = ("layernorm", "gate_up_proj", "act_fn", "down_proj")


def system_simulator(device, tp: int, pp: int, with_fixed_latency: bool = False) -> SystemSimulator:
    """The TP x PP group's simulator. The device networks are bandwidth-only (latency 0) because
    measured step residuals already contain each collective's fixed cost; ``with_fixed_latency``
    (for bundles without a residual table) sets the link latency so that a tiny 2-GPU ring
    all-reduce (2 messages x hops links) costs the device's measured ``collective_latency_ns``."""
    n = tp * pp
    cfg = device.network_for_tp(n)
    if with_fixed_latency and device.collective_latency_ns:
        hops = 2 if cfg["topology"][0] == "Switch" else 1
        cfg["latency"] = [device.collective_latency_ns / (2 * hops)]
    net = AnalyticalNetwork(parse_network(cfg, f"{device.path}:network"))
    system = parse_system(device.system_config(), f"{device.path}:system")
    groups = {str(s + 1): list(range(s * tp, (s + 1) * tp)) for s in range(pp)} if tp > 1 else {}
    return SystemSimulator(net, system, comm_groups=groups)


class GraphCommModel:
    """Exposed communication of a step's graph, memoised by token count."""

    def __init__(self, model, device, tp: int, pp: int, residual_table: bool = True):
        self.model = model
        self.tp = tp
        self.pp = pp
        self.sim = system_simulator(device, tp, pp, with_fixed_latency=not residual_table)
        self.layers_per_stage = -(-model.num_layers // pp)
        self._memo: dict[int, int] = {}

    def activation_bytes(self, tokens: int) -> int:
        return tokens * self.model.hidden_size * self.model.dtype_bytes

    def exposed_comm_ns(self, shape: BatchShape) -> int:
        t = shape.num_tokens
        v = self._memo.get(t)
        if v is None:
            size = self.activation_bytes(t)
            v = 0
            if self.tp > 1:
                ar = self.sim.collective_time_ns("all_reduce", size, list(range(self.tp)))
                v += 2 * self.layers_per_stage * self.pp * ar
            if self.pp > 1:
                v += (self.pp - 1) * self.sim.network.send_ns(0, self.tp, size)
            self._memo[t] = v
        return v


def _us(x: float) -> int:
    return max(int(round(x)), 0)


def step_graphs(perf: PerformanceModel, shape: BatchShape, tp: int, pp: int,
                comm: Optional[GraphCommModel] = None) -> list[list[Node]]:
    """The per-rank Chakra graphs of one step (durations in whole µs, as Chakra stores them)."""
    b = perf.bundle
    T = shape.num_tokens
    dense = {name: tab(T) for name, tab in b.dense.items()}
    attn_us = perf.attention_us(shape)
    attn_block = sum(dense.get(op, 0.0) for op in ATTN_OPS) + attn_us
    mlp_block = sum(dense.get(op, 0.0) for op in MLP_OPS)
    if b.moe is not None and perf.model.is_moe:
        mlp_block += perf.moe_us(T)
    known = set(ATTN_OPS) | set(MLP_OPS) | {"embedding", "final_layernorm"}
    mlp_block += sum(v for name, v in dense.items() if name not in known)   # ops of other models
    size = T * perf.model.hidden_size * perf.model.dtype_bytes
    L = perf.layers_per_stage
    graphs = []
    for stage in range(pp):
        for t in range(tp):
            rank = stage * tp + t
            nodes: list[Node] = []

            def add(kind, name, **kw):
                node = Node.make(len(nodes), kind, name, data_deps=[len(nodes) - 1] if nodes else [], **kw)
                nodes.append(node)

            if stage == 0:
                add(NodeType.COMP_NODE, "embedding", duration_micros=_us(dense.get("embedding", 0.0)),
                    is_cpu_op=False)
            else:
                add(NodeType.COMM_RECV_NODE, f"recv_stage{stage - 1}", comm_src=rank - tp, comm_dst=rank,
                    comm_size=size, comm_tag=stage, is_cpu_op=False)
            for layer in range(L):
                add(NodeType.COMP_NODE, f"layer{layer}.attn", duration_micros=_us(attn_block), is_cpu_op=False)
                if tp > 1:
                    add(NodeType.COMM_COLL_NODE, f"layer{layer}.attn.all_reduce", is_cpu_op=False,
                        comm_type=int(CollectiveCommType.ALL_REDUCE), comm_size=size, pg_name=str(stage + 1))
                add(NodeType.COMP_NODE, f"layer{layer}.mlp", duration_micros=_us(mlp_block), is_cpu_op=False)
                if tp > 1:
                    add(NodeType.COMM_COLL_NODE, f"layer{layer}.mlp.all_reduce", is_cpu_op=False,
                        comm_type=int(CollectiveCommType.ALL_REDUCE), comm_size=size, pg_name=str(stage + 1))
            if stage < pp - 1:
                add(NodeType.COMM_SEND_NODE, f"send_stage{stage}", comm_src=rank, comm_dst=rank + tp,
                    comm_size=size, comm_tag=stage + 1, is_cpu_op=False)
            else:
                tail = dense.get("final_layernorm", 0.0) + perf.per_sequence_us(shape.num_seqs)
                add(NodeType.COMP_NODE, "final_norm.lm_head.sampler", duration_micros=_us(tail), is_cpu_op=False)
            graphs.append(nodes)
    return graphs
