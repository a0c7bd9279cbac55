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

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from astrasim import CollectiveCommType, Node, NodeType, SystemSimulator
from astrasim.config.network import parse_network
from astrasim.config.system import parse_system
from astrasim.network import AnalyticalNetwork, CongestionAwareNetwork

from .errors import ConfigError, astrasim_errors
from .hardware import HOPS, fit_link_bandwidth_gbs
from .overhead_model import Regime, regime_for
from .perf_model import BatchShape, PerformanceModel
from .rank_layout import RankLayout

ATTN_OPS = ("layernorm", "qkv_proj", "rotary_emb", "qk_norm", "o_proj")
MLP_OPS = ("layernorm", "gate_up_proj", "act_fn", "down_proj")


def network_config(device, tp: int, pp: int, busbw_gbs: Optional[float] = None,
                   collective_latency_ns: float = 0.0) -> dict:
    """The TP x PP group's ASTRA-Sim network on the device's intra-node dimension. By default
    the device file's (bandwidth fitted to its measured NCCL bus bandwidth); ``busbw_gbs``
    refits the link bandwidth to another bus bandwidth, and ``collective_latency_ns`` (the
    fixed cost of a 2-GPU all-reduce: 2 messages, each crossing ``hops`` links) sets the
    link latency; a ring over n GPUs pays it n - 1 times."""
    cfg = device.network_for_tp(min(tp * pp, device.gpus_per_node))   # across nodes: dimension 0 (RankLayout)
    if busbw_gbs is not None:
        cfg["bandwidth"] = [round(fit_link_bandwidth_gbs(busbw_gbs, device.memory_bandwidth_gbs), 3)]
    if collective_latency_ns and tp * pp > 1:
        cfg["latency"] = [collective_latency_ns / (2 * HOPS[cfg["topology"][0]])]
    return cfg


def system_simulator(device, tp: int, pp: int, network=None,
                     system_config: Optional[dict] = None, backend: str = "analytical",
                     groups: Optional[dict] = None) -> SystemSimulator:
    """The group's simulator on ``network`` (default: :func:`network_config` of the device)
    and ``system_config`` (default: the device's system JSON). ``network`` is a network dict
    timed by ``backend`` ("analytical" or "congestion-aware"), or a ready network backend
    (a graph network: :func:`llmservingsim.network_choice.graph_network`)."""
    cfg = network if network is not None else network_config(device, tp, pp)
    with astrasim_errors():
        if isinstance(cfg, dict):
            parsed = parse_network(cfg, f"{device.path}:network")
            net = CongestionAwareNetwork(parsed) if backend == "congestion-aware" else AnalyticalNetwork(parsed)
        else:
            net = cfg
        system = device.system_config() if system_config is None else system_config
        if isinstance(cfg, dict) and len(cfg["topology"]) > 1:      # an instance across nodes
            from .inter_node import per_dimension_system
            system = per_dimension_system(system, len(cfg["topology"]))
        system = parse_system(system, f"{device.path}:system")
    return SystemSimulator(net, system, comm_groups=comm_groups(tp, pp) if groups is None else groups)


def comm_groups(tp: int, pp: int) -> dict:
    """The TP communicator groups ("1" .. "pp": stage s's ranks s*tp .. s*tp+tp-1), as the
    step graphs name them (``pg_name``); none without TP."""
    return {str(s + 1): list(range(s * tp, (s + 1) * tp)) for s in range(pp)} if tp > 1 else {}


def upstream_system(system: dict) -> tuple[dict, bool]:
    """``system`` as upstream ASTRA-Sim can run it, and whether it changed: an endpoint delay
    below 1 ns becomes 1 ns (upstream stops on 0: it would schedule an event at the current
    time)."""
    if system.get("endpoint-delay", 10) >= 1:
        return system, False
    return {**system, "endpoint-delay": 1}, True


@dataclass(frozen=True, slots=True)
class StageComm:
    """One step's communication by pipeline stage (ns): ``allreduce_ns[s]`` the TP all-reduces
    of stage s, ``send_ns[s]`` the activations stage s sends to s + 1 and ``inter_node[s]``
    whether that transfer crosses nodes."""
    allreduce_ns: tuple
    send_ns: tuple
    inter_node: tuple


class GraphCommModel:
    """Exposed communication of a step's graph, memoised by token count.

    Each all-reduce is timed on a simulator whose network reproduces the collective regime
    vLLM dispatches its size to (``overhead_model.Regime``: custom all-reduce below its
    buffer, NCCL above) when the device has a fitted model for this TP size; otherwise on the
    device network with its measured NCCL bandwidth and fixed per-collective cost."""

    def __init__(self, model, device, tp: int, pp: int, regimes: Optional[tuple] = None, choice=None,
                 layout=None):
        """``choice``: the run's ``network`` (``network_choice.NetworkChoice``); None or the
        analytical backend keeps the device network as described above. "congestion-aware"
        times the same networks link by link; "graph" times every collective on the chosen
        topology graph (its links, not the regimes' fitted bandwidths)."""
        self.model = model
        self.tp = tp
        self.pp = pp
        self.backend = "analytical" if choice is None else choice.backend
        self.regimes = regimes or (Regime(device.collective_latency_ns / 1000.0, device.nccl_allreduce_busbw_gbs),)
        if self.backend == "graph":
            self.regimes = (Regime(0.0, device.nccl_allreduce_busbw_gbs),)
            self.networks = [choice.graph_network(tp * pp)]
        elif regimes:
            self.networks = [network_config(device, tp, pp, *r.ring_network(tp)) for r in regimes]
        else:       # the device file's network as written, plus its measured fixed cost
            self.networks = [network_config(device, tp, pp, None, device.collective_latency_ns)]
        # ``layout`` (rank_layout.RankLayout): the NPUs of the ranks; an instance spanning nodes
        # gets the two-level network [intra-node, inter-node] (docs/clusters.md)
        self.layout = layout if layout is not None else RankLayout.single(tp * pp)
        if self.layout.multi_node:
            if self.backend == "graph":
                raise ConfigError("the graph backend times one node's topology graph; an instance whose stages "
                                  "span nodes needs backend analytical or congestion-aware", key="network.backend")
            self.networks = [self.layout.network(net) for net in self.networks]
        backend = "congestion-aware" if self.backend == "congestion-aware" else "analytical"
        groups = self.layout.groups(tp, pp) if self.layout.multi_node else None
        self._sims = [system_simulator(device, tp, pp, net, backend=backend, groups=groups) for net in self.networks]
        self.layers_per_stage = -(-model.num_layers // pp)
        self._memo: dict[int, int] = {}
        self._stage_memo: dict[int, StageComm] = {}

    def _index(self, size_bytes: int) -> int:
        return self.regimes.index(regime_for(self.regimes, size_bytes))

    def simulator_for(self, tokens: int) -> SystemSimulator:
        """The simulator that times this step's collectives (by their message size)."""
        return self._sims[self._index(self.activation_bytes(tokens))]

    def network_for(self, tokens: int) -> dict:
        return self.networks[self._index(self.activation_bytes(tokens))]

    def activation_bytes(self, tokens: int) -> int:
        return tokens * self.model.hidden_size * self.model.dtype_bytes

    def stage_comm(self, tokens: int) -> "StageComm":
        """The communication of a step of ``tokens`` tokens, stage by stage (pipeline timing,
        ``llmservingsim.pipeline``): each stage's TP all-reduces, and each stage boundary's
        activation transfer with whether it leaves the node. Memoised by token count."""
        v = self._stage_memo.get(tokens)
        if v is None:
            size = self.activation_bytes(tokens)
            sim = self.simulator_for(tokens)
            lay, tp, pp = self.layout, self.tp, self.pp
            allreduce, sends, crosses = [], [], []
            with astrasim_errors():
                for s in range(pp):
                    group = [lay.npus[r] for r in range(s * tp, (s + 1) * tp)]
                    if tp == 1:
                        allreduce.append(0)
                    elif s and not sim.network.congestion_aware:
                        allreduce.append(allreduce[0])       # every stage's group costs the same
                    else:
                        allreduce.append(2 * self.layers_per_stage * sim.collective_time_ns("all_reduce", size, group))
                    if s + 1 < pp:
                        src, dst = s * tp, (s + 1) * tp
                        sends.append(sim.network.send_ns(lay.npus[src], lay.rail_peer(src, dst), size))
                        crosses.append(lay.node_of(src) != lay.node_of(dst))
            v = self._stage_memo[tokens] = StageComm(tuple(allreduce), tuple(sends), tuple(crosses))
        return v

    def exposed_comm_ns(self, shape: BatchShape) -> int:
        t = shape.num_tokens
        v = self._memo.get(t)
        if v is None and self.layout.multi_node:      # one batch alone: every stage's comm in turn
            c = self.stage_comm(t)
            v = self._memo[t] = sum(c.allreduce_ns) + sum(c.send_ns)
        if v is None:
            size = self.activation_bytes(t)
            v = 0
            sim = self.simulator_for(t)
            with astrasim_errors():
                if not sim.network.congestion_aware:     # every stage's group costs the same
                    if self.tp > 1:
                        ar = sim.collective_time_ns("all_reduce", size, list(range(self.tp)))
                        v += 2 * self.layers_per_stage * self.pp * ar
                    if self.pp > 1:
                        v += (self.pp - 1) * sim.network.send_ns(0, self.tp, size)
                else:
                    # Link-level networks: a stage's group and a transfer cost what their own
                    # links give (placement matters). The memo by token count still holds: the
                    # step is a dependency chain, so one collective or transfer is in flight at
                    # a time and none shares a link with another.
                    tp = self.tp
                    for s in range(self.pp):
                        if tp > 1:
                            group = list(range(s * tp, (s + 1) * tp))
                            v += 2 * self.layers_per_stage * sim.collective_time_ns("all_reduce", size, group)
                        if s + 1 < self.pp:
                            v += sim.network.send_ns(s * tp, (s + 1) * tp, size)
            self._memo[t] = v
        return v


def write_step_folder(d: Path, graphs: list, system: dict, network: dict, groups: Optional[dict]) -> list[str]:
    """Write one step's upstream ASTRA-Sim inputs into ``d``: ``step.<rank>.et``, system.json,
    network.yml, remote_memory.json and (with TP/PP groups) comm_group.json. Returns the
    binary's arguments for them (paths relative to ``d``)."""
    from astrasim import write_workload

    from .hardware import network_yaml
    write_workload(str(d / "step"), graphs)
    (d / "system.json").write_text(json.dumps(system, indent=2) + "\n")
    (d / "network.yml").write_text(network_yaml(network))
    (d / "remote_memory.json").write_text(json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}) + "\n")
    args = ["--workload-configuration=step", "--system-configuration=system.json",
            "--network-configuration=network.yml", "--remote-memory-configuration=remote_memory.json"]
    if groups:
        (d / "comm_group.json").write_text(json.dumps(groups) + "\n")
        args.append("--comm-group-configuration=comm_group.json")
    return args


def _us(x: float) -> int:
    return max(int(round(x)), 0)


@dataclass(frozen=True, slots=True)
class LockstepRank:
    """What one data-parallel rank of a lockstep MoE step adds to its graphs
    (:func:`lockstep_step_graphs`): every MoE layer's experts take ``moe_us`` (the rank's
    share of the gathered tokens, ``expert_parallel.MoERankTimer``) between the dispatch
    all-gather (``all_gather_bytes`` per member) and the combine reduce-scatter
    (``reduce_scatter_bytes``, the whole buffer), both on the group named
    ``dispatch_group(t)`` for TP index t; TP groups are named from ``tp_group_base + 1``; a
    ``dummy`` rank samples nothing."""
    moe_us: float
    all_gather_bytes: int
    reduce_scatter_bytes: int
    dispatch_groups: tuple          # group id of TP index t's dispatch group
    tp_group_base: int
    dummy: bool = False


def step_graphs(perf: PerformanceModel, shape: BatchShape, tp: int, pp: int,
                comm: Optional[GraphCommModel] = None, lockstep: Optional[LockstepRank] = None) -> list[list[Node]]:
    """The Chakra graphs of one step, one per NPU (durations in whole µs, as Chakra stores them):
    on one node NPU r is rank r; across nodes the NPUs of ``comm.layout`` (the others idle).
    ``lockstep``: the graphs of one data-parallel rank of a lockstep MoE step (pp = 1), its
    MoE layers split into the dense part, the dispatch all-gather, the experts and the
    combine reduce-scatter; the list then holds that rank's ``tp`` NPUs only."""
    b = perf.bundle
    T = shape.num_tokens
    dense = {name: tab(T) for name, tab in b.dense.items()}
    attn_us = perf.attention_us(shape)
    attn_block = sum(dense.get(op, 0.0) for op in ATTN_OPS) + attn_us
    mlp_block = sum(dense.get(op, 0.0) for op in MLP_OPS)
    moe_block = 0.0
    if b.moe is not None and perf.model.is_moe:
        moe_block = perf.moe_us(T) if lockstep is None else lockstep.moe_us
    known = set(ATTN_OPS) | set(MLP_OPS) | {"embedding", "final_layernorm"}
    mlp_block += sum(v for name, v in dense.items() if name not in known)   # ops of other models
    if lockstep is None:
        mlp_block += moe_block
    size = T * perf.model.hidden_size * perf.model.dtype_bytes
    L = perf.layers_per_stage
    lay = comm.layout if comm is not None and lockstep is None else RankLayout.single(tp * pp)
    npu = lay.npus
    graphs = [[] for _ in range(lay.npus_count)]     # by NPU; on several nodes, the unused NPUs idle
    base = 0 if lockstep is None else lockstep.tp_group_base
    for stage in range(pp):
        for t in range(tp):
            rank = stage * tp + t
            nodes: list[Node] = graphs[npu[rank]]
            tp_group = str(base + stage + 1)

            def add(kind, name, **kw):
                node = Node.make(len(nodes), kind, name, data_deps=[len(nodes) - 1] if nodes else [], **kw)
                nodes.append(node)

            if stage == 0:
                add(NodeType.COMP_NODE, "embedding", duration_micros=_us(dense.get("embedding", 0.0)),
                    is_cpu_op=False)
            else:
                add(NodeType.COMM_RECV_NODE, f"recv_stage{stage - 1}", comm_src=npu[rank - tp], comm_dst=npu[rank],
                    comm_size=size, comm_tag=stage, is_cpu_op=False)
            for layer in range(L):
                add(NodeType.COMP_NODE, f"layer{layer}.attn", duration_micros=_us(attn_block), is_cpu_op=False)
                if tp > 1:
                    add(NodeType.COMM_COLL_NODE, f"layer{layer}.attn.all_reduce", is_cpu_op=False,
                        comm_type=int(CollectiveCommType.ALL_REDUCE), comm_size=size, pg_name=tp_group)
                add(NodeType.COMP_NODE, f"layer{layer}.mlp", duration_micros=_us(mlp_block), is_cpu_op=False)
                if lockstep is not None:    # dispatch, the held experts on the gathered tokens, combine
                    group = str(lockstep.dispatch_groups[t])
                    add(NodeType.COMM_COLL_NODE, f"layer{layer}.moe.all_gather", is_cpu_op=False,
                        comm_type=int(CollectiveCommType.ALL_GATHER), comm_size=lockstep.all_gather_bytes,
                        pg_name=group)
                    add(NodeType.COMP_NODE, f"layer{layer}.moe.experts", duration_micros=_us(moe_block),
                        is_cpu_op=False)
                    add(NodeType.COMM_COLL_NODE, f"layer{layer}.moe.reduce_scatter", is_cpu_op=False,
                        comm_type=int(CollectiveCommType.REDUCE_SCATTER), comm_size=lockstep.reduce_scatter_bytes,
                        pg_name=group)
                if tp > 1:
                    add(NodeType.COMM_COLL_NODE, f"layer{layer}.mlp.all_reduce", is_cpu_op=False,
                        comm_type=int(CollectiveCommType.ALL_REDUCE), comm_size=size, pg_name=tp_group)
            if stage < pp - 1:
                add(NodeType.COMM_SEND_NODE, f"send_stage{stage}", comm_src=npu[rank], comm_dst=npu[rank + tp],
                    comm_size=size, comm_tag=stage + 1, is_cpu_op=False)
            else:
                tail = dense.get("final_layernorm", 0.0)
                if lockstep is None or not lockstep.dummy:      # a dummy forward samples nothing
                    tail += perf.per_sequence_us(shape.num_seqs)
                add(NodeType.COMP_NODE, "final_norm.lm_head.sampler", duration_micros=_us(tail), is_cpu_op=False)
    return graphs


def lockstep_groups(dp: int, tp: int, layout: Optional[RankLayout] = None) -> dict:
    """The communicator groups of a lockstep MoE server's ``dp x tp`` NPUs (DP rank d's TP
    index t is NPU d x tp + t, or ``layout.npus[d x tp + t]`` for a server across nodes): DP
    rank d's TP group is "d + 1" (none without TP), TP index t's dispatch group (the DP group
    vLLM's all-gather / reduce-scatter run on) is "dp + t + 1" with TP, "1" without (then it
    is every rank of the server: the EP group)."""
    npu = layout.npus if layout is not None else range(dp * tp)
    groups = {str(d + 1): [npu[r] for r in range(d * tp, (d + 1) * tp)] for d in range(dp)} if tp > 1 else {}
    first = dp + 1 if tp > 1 else 1
    groups.update({str(first + t): [npu[d * tp + t] for d in range(dp)] for t in range(tp)})
    return groups


def lockstep_step_graphs(timer, shapes: list, dummies: list) -> list[list[Node]]:
    """The Chakra graphs of one lockstep step of a MoE server (``data_parallel.LockstepTimer``
    ``timer``; ``shapes[d]`` is DP rank d's batch, ``dummies[d]`` whether it is a dummy
    step), one per NPU, DP rank d's ``tp`` NPUs at d x tp (:func:`lockstep_groups`; a server
    across nodes: at its layout's NPUs of the two-level network, the other NPUs idle). Each
    rank computes its own batch; every MoE layer all-gathers and reduce-scatters on the
    dispatch group with the sizes ``EPCommModel.sizes`` gives for the largest rank, and
    runs the held experts on the gathered tokens (``MoERankTimer.us(own, gathered)``), so the
    graph reproduces what ``LockstepTimer.rank_ns`` charges (docs/data-expert-parallel.md)."""
    ep = timer.ep_comm
    dp, tp = ep.dp, ep.tp
    if timer.timer.pp != 1:
        raise ConfigError("the execution graph of a lockstep data-parallel step is built for pp = 1 only",
                          key="parallelism.pp")
    gathered = sum(s.num_tokens for s in shapes)
    ag, rs = ep.sizes(max(s.num_tokens for s in shapes))
    first = dp + 1 if tp > 1 else 1
    out: list[list[Node]] = []
    for d, (shape, dummy) in enumerate(zip(shapes, dummies)):
        part = LockstepRank(timer.moe.us(shape.num_tokens, gathered), ag, rs,
                            tuple(first + t for t in range(tp)), d, dummy)
        out.extend(step_graphs(timer.timer.perf, shape, tp, 1, None, part))
    lay = ep.layout
    if lay is not None and lay.multi_node:
        placed: list[list[Node]] = [[] for _ in range(lay.npus_count)]
        for r, nodes in enumerate(out):
            placed[lay.npus[r]] = nodes
        return placed
    return out
