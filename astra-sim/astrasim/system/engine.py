"""The event loop of one simulation run (ASTRA-Sim's workload + system layers, in-process).

Semantics (observed behaviour of ASTRA-Sim's ``Workload``/``HardwareResource``):

- A node becomes ready when all its ``data_deps`` and ``ctrl_deps`` have finished.
- Each rank has three slots: GPU compute, GPU communication, CPU. A node with ``is_cpu_op``
  true takes the CPU slot; a GPU ``COMP_NODE`` the compute slot; collectives, sends and
  memory loads/stores the communication slot; receives take no slot. Whenever something
  finishes (and at time 0) the rank issues ready nodes in node-id order into free slots, so at
  most one node per slot is in flight and compute overlaps communication.
- Compute replays ``duration_micros * 1000`` ns (1 ns when 0), or in roofline mode (GPU nodes
  only) ``int(num_ops / min(peak, local_mem_bw * num_ops / tensor_size) * 1e9)`` ns; a roofline
  node with ``tensor_size`` 0 is skipped in zero time.
- Collectives of one communicator group are matched by their per-rank issue order. A
  single-phase collective (one-dimensional network, ``one*`` algorithm, or a group smaller
  than the system) runs on every member's own clock from its issue time, so members that
  issued early wait for the others' messages and members may finish at different times (as
  upstream). A multi-phase collective starts when its last member has issued it and all
  members finish together.
- A send finishes ``send_ns(src, dst, size)`` after it is issued (eager, as the analytical
  frontend); the matching receive finishes at the later of its own
  issue time and the message's arrival. Sends and receives match on (src, dst, tag, size),
  first come first served, as upstream (a size mismatch never matches and is reported as stuck).
- METADATA/INVALID nodes take their slot for zero time (upstream leaves their children for the
  next issue round; here the children are considered in the same instant).

Per rank we report the time of the last completion and two communication measures:
``exposed_comm_ns`` = finish - GPU compute time (exactly what upstream prints as "exposed
communication"), and ``comm_only_ns`` = time with a communication node (collective, send or
receive) in flight and no GPU compute node in flight.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Optional, Sequence

from ..chakra.schema import Node, NodeType
from ..config.memory import RemoteMemoryConfig
from ..config.system import SystemConfig
from ..errors import StuckError, WorkloadError
from ..collectives.planner import CollectivePlanner
from ..network.base import NetworkBackend
from .workload import (OP_COLL, OP_COMPUTE, OP_MEM, OP_RECV, OP_REPLAY, OP_SEND,
                       SLOT_COMP, SLOT_NONE, RankGraph, build_rank_graph, coll_kind)

_COMM_TYPES = (NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE)

#: remote memories one rank's accesses delay another's on (they break the symmetry)
SHARED_MEMORIES = ("MEMORY_POOL", "PER_NODE_MEMORY_EXPANSION")


class NotSymmetric(Exception):
    """An exact symmetric run met something that identical ranks do not do in lockstep."""


@dataclass(frozen=True, slots=True)
class RunResult:
    """Per-rank results of one run, in integer ns (index = rank)."""

    finish_ns: list[int]
    exposed_comm_ns: list[int]
    comm_only_ns: list[int]
    gpu_compute_ns: list[int]

    @property
    def makespan_ns(self) -> int:
        return max(self.finish_ns, default=0)


class _Rank:
    """Mutable state of one rank during a run (owned by :class:`Run` only)."""

    __slots__ = ("g", "left", "ready", "busy", "remaining", "finish", "gpu", "comm_n",
                 "comp_busy", "last_t", "comm_only", "is_comm", "coll_seq", "issued")

    def __init__(self, g: RankGraph):
        self.g = g
        self.left = list(g.ndeps)
        self.ready: list[tuple[int, int]] = []   # heap of (node id, position)
        self.busy = [False, False, False, False]
        self.remaining = len(g.nodes)
        self.finish = 0
        self.gpu = 0
        self.comm_n = 0
        self.comp_busy = False
        self.last_t = 0
        self.comm_only = 0
        self.is_comm = [n.type in _COMM_TYPES for n in g.nodes]
        self.coll_seq: dict[int, int] = {}
        self.issued = [False] * len(g.nodes)


class _Coll:
    __slots__ = ("kind", "size", "members", "arrived", "issued", "involved", "first")

    def __init__(self, kind, size, members, involved, first):
        self.kind, self.size, self.members, self.involved, self.first = kind, size, members, involved, first
        self.arrived: dict[int, int] = {}   # rank -> node position
        self.issued: dict[int, int] = {}    # rank -> issue time


class Run:
    """One simulation run over all ranks. Owns the clock (event heap) and all run state."""

    def __init__(self, per_rank_nodes: Sequence[Sequence[Node]], network: NetworkBackend,
                 system: SystemConfig, planner: CollectivePlanner,
                 comm_groups: dict[int, tuple[int, ...]], memory: Optional[RemoteMemoryConfig],
                 symmetric: bool = False, exact: bool = False):
        # symmetric: one graph stands for every rank (all ranks identical), see run_symmetric;
        # exact: raise NotSymmetric where that would differ from run() on identical graphs
        self.symmetric = symmetric
        self.exact = exact
        if symmetric and memory is not None and memory.memory_type in SHARED_MEMORIES:
            raise WorkloadError("run_symmetric cannot model a remote memory shared between ranks "
                                f"({memory.memory_type}); use run()")
        if not symmetric and len(per_rank_nodes) != network.npus_count:
            raise WorkloadError(f"workload has {len(per_rank_nodes)} rank(s) but the network has "
                                f"{network.npus_count} NPU(s)")
        self.net, self.sys, self.planner = network, system, planner
        self.groups, self.memory = comm_groups, memory
        self.ranks = [_Rank(build_rank_graph(r, nodes, system.replay_only))
                      for r, nodes in enumerate(per_rank_nodes)]
        self.events: list[tuple[int, int, int, int]] = []   # (time, seq, rank, position)
        self.seq = 0
        self.colls: dict[tuple[int, int], _Coll] = {}
        self.sends: dict[tuple, list[int]] = {}             # (src,dst,tag,size) -> arrival times
        self.recvs: dict[tuple, list[tuple[int, int, int]]] = {}  # -> (rank, pos, issue time)
        self.channel_free: dict[int, int] = {}
        self.link_free: dict = {}                           # congestion-aware: link -> next free
        self.all_ranks = tuple(range(network.npus_count))

    # ------------------------------------------------------------------ driver
    def execute(self) -> RunResult:
        for rs in self.ranks:
            for i, n in enumerate(rs.left):
                if n == 0:
                    heapq.heappush(rs.ready, (rs.g.ids[i], i))
        for rank in range(len(self.ranks)):
            self._issue(rank, 0)
        events, ranks = self.events, self.ranks
        while events:
            now, _, rank, pos = heapq.heappop(events)
            self._complete(ranks[rank], rank, pos, now)
        if any(rs.remaining for rs in ranks):
            raise StuckError(self._stuck_report())
        return RunResult(
            finish_ns=[rs.finish for rs in ranks],
            exposed_comm_ns=[rs.finish - rs.gpu for rs in ranks],
            comm_only_ns=[rs.comm_only for rs in ranks],
            gpu_compute_ns=[rs.gpu for rs in ranks])

    def _push(self, t: int, rank: int, pos: int) -> None:
        heapq.heappush(self.events, (t, self.seq, rank, pos))
        self.seq += 1

    @staticmethod
    def _account(rs: _Rank, now: int) -> None:
        if rs.comm_n and not rs.comp_busy:
            rs.comm_only += now - rs.last_t
        rs.last_t = now

    def _complete(self, rs: _Rank, rank: int, pos: int, now: int) -> None:
        g = rs.g
        slot = g.slot[pos]
        if slot == SLOT_COMP or rs.is_comm[pos]:
            self._account(rs, now)
            if slot == SLOT_COMP:
                rs.comp_busy = False
            if rs.is_comm[pos]:
                rs.comm_n -= 1
        if slot != SLOT_NONE:
            rs.busy[slot] = False
        rs.remaining -= 1
        rs.finish = now
        left = rs.left
        for c in g.children[pos]:
            left[c] -= 1
            if left[c] == 0:
                heapq.heappush(rs.ready, (g.ids[c], c))
        self._issue(rank, now)

    # ------------------------------------------------------------------ issuing
    def _issue(self, rank: int, now: int) -> None:
        """Issue ready nodes in id order into free slots (upstream ``issue_dep_free_nodes``)."""
        rs = self.ranks[rank]
        ready, busy, slots = rs.ready, rs.busy, rs.g.slot
        if not ready:
            return
        skipped = []
        while ready:
            item = heapq.heappop(ready)
            pos = item[1]
            slot = slots[pos]
            if slot != SLOT_NONE and busy[slot]:
                skipped.append(item)
                continue
            if slot != SLOT_NONE:
                busy[slot] = True
            self._start(rs, rank, pos, now)
        for item in skipped:
            heapq.heappush(ready, item)

    def _start(self, rs: _Rank, rank: int, pos: int, now: int) -> None:
        g = rs.g
        node = g.nodes[pos]
        op = g.op[pos]
        rs.issued[pos] = True
        if g.slot[pos] == SLOT_COMP or rs.is_comm[pos]:
            self._account(rs, now)
            if g.slot[pos] == SLOT_COMP:
                rs.comp_busy = True
            if rs.is_comm[pos]:
                rs.comm_n += 1
        if op == OP_COMPUTE:
            dur = self._compute_ns(node)
            if dur is None:
                self._push(now, rank, pos)
                return
            if g.slot[pos] == SLOT_COMP:
                rs.gpu += dur
            self._push(now + dur, rank, pos)
        elif op == OP_REPLAY:
            dur = node.duration_micros * 1000 or 1
            if g.slot[pos] != 2:  # not a CPU op
                rs.gpu += dur
            self._push(now + dur, rank, pos)
        elif op == OP_COLL:
            self._start_collective(rank, pos, node, now)
        elif op == OP_SEND:
            self._start_send(rank, pos, node, now)
        elif op == OP_RECV:
            self._start_recv(rank, pos, node, now)
        elif op == OP_MEM:
            self._push(self._memory_done(rank, node, now), rank, pos)
        else:  # OP_SKIP
            self._push(now, rank, pos)

    def _compute_ns(self, node: Node) -> Optional[int]:
        """Replay or roofline time; ``None`` means "skip in zero time" (roofline, no tensor)."""
        s = self.sys
        if not s.roofline_enabled or node.get("is_cpu_op", False):
            return node.duration_micros * 1000 or 1
        num_ops = float(node.get("num_ops", 0))
        tensor = float(node.get("tensor_size", 0))
        if tensor == 0:
            return None
        if num_ops == 0:
            return 0
        perf = min(s.local_mem_bw_gbs * 1e9 * (num_ops / tensor), s.peak_perf_tflops * 1e12)
        return int(num_ops / perf * 1e9)

    def _memory_done(self, rank: int, node: Node, now: int) -> int:
        mem = self.memory
        if mem is None or mem.memory_type == "NO_MEMORY_EXPANSION":
            where = mem.source if mem is not None else "no remote-memory configuration"
            raise WorkloadError(f"rank {rank} node {node.id}: memory load/store needs a remote memory "
                                f"(memory-type is NO_MEMORY_EXPANSION in {where})")
        cost = mem.access_ns(int(node.get("tensor_size", 0)))
        if mem.memory_type == "PER_NPU_MEMORY_EXPANSION":
            return now + cost
        channel = rank // mem.num_npus_per_node if mem.memory_type == "PER_NODE_MEMORY_EXPANSION" else 0
        end = max(now, self.channel_free.get(channel, 0)) + cost
        self.channel_free[channel] = end
        return end

    # ------------------------------------------------------------------ communication
    def _group_of(self, rank: int, node: Node) -> tuple[int, tuple[int, ...]]:
        pg = node.get("pg_name", "")
        pg = "" if pg is None else str(pg)
        if pg in ("", "0"):
            return 0, self.all_ranks
        try:
            gid = int(pg)
        except ValueError:
            raise WorkloadError(f"rank {rank} node {node.id}: pg_name {pg!r} is not a group id") from None
        members = self.groups.get(gid)
        if members is None:
            raise WorkloadError(f"rank {rank} node {node.id}: communicator group {gid} is not defined "
                                "(pass a comm-group configuration)")
        if rank not in members:
            raise WorkloadError(f"rank {rank} node {node.id}: rank is not a member of group {gid} {list(members)}")
        return gid, members

    def _start_collective(self, rank: int, pos: int, node: Node, now: int) -> None:
        gid, members = self._group_of(rank, node)
        rs = self.ranks[rank]
        k = rs.coll_seq.get(gid, 0)
        rs.coll_seq[gid] = k + 1
        kind, size = coll_kind(node), int(node.get("comm_size", 0))
        c = self.colls.get((gid, k))
        if c is None:
            inv = node.get("involved_dim")
            c = self.colls[(gid, k)] = _Coll(kind, size, members, None if inv is None else tuple(inv), (rank, node.id))
        elif c.kind != kind or c.size != size:
            raise WorkloadError(
                f"rank {rank} node {node.id}: {kind} of {size} B does not match rank {c.first[0]} node "
                f"{c.first[1]} ({c.kind} of {c.size} B), collective #{k} of group {gid}")
        c.arrived[rank] = pos
        c.issued[rank] = now
        if self.symmetric:
            # every rank issues this collective at this same instant (identical graphs)
            del self.colls[(gid, k)]
            group = None if gid == 0 else members
            if self.exact:
                # exact only if every NPU is a member (else non-members would fail in run())
                # and all members finish together (else the ranks' clocks part)
                if len(set(members)) != len(self.all_ranks):
                    raise NotSymmetric(f"node {node.id}: group {gid} is not every NPU")
                fin = self.planner.collective_finish(kind, size, group, c.involved)
                if min(fin) != max(fin):
                    raise NotSymmetric(f"node {node.id}: members of group {gid} finish apart")
            self._push(now + self.planner.collective_ns(kind, size, group, c.involved), rank, pos)
            return
        if len(c.arrived) < len(members):
            return
        del self.colls[(gid, k)]
        group = None if gid == 0 else members
        if self.net.congestion_aware:
            # its messages share links with every collective and send timed before it
            fin = self.planner.collective_finish(kind, size, group, c.involved,
                                                 [c.issued[r] for r in members], self.link_free)
            for r, f in zip(members, fin):
                self._push(max(now, f), r, c.arrived[r])
            return
        base = min(c.issued.values())
        starts = [c.issued[r] - base for r in members]
        fin = self.planner.collective_finish(kind, size, group, c.involved, starts)
        for r, f in zip(members, fin):
            self._push(max(now, base + f), r, c.arrived[r])

    def _start_send(self, rank: int, pos: int, node: Node, now: int) -> None:
        if self.symmetric:
            if self.exact:
                raise NotSymmetric(f"node {node.id}: send/recv")
            raise WorkloadError(f"node {node.id}: run_symmetric does not support send/recv; use run()")
        src = int(node.get("comm_src", rank))
        if src != rank:
            raise WorkloadError(f"rank {rank} node {node.id}: send with comm_src {src} must be issued by rank {src}")
        if node.get("comm_dst") is None:
            raise WorkloadError(f"rank {rank} node {node.id}: send without 'comm_dst'")
        dst, tag, size = int(node.get("comm_dst")), int(node.get("comm_tag", 0)), int(node.get("comm_size", 0))
        arrival = self._deliver(src, dst, size, now)
        self._push(arrival, rank, pos)
        key = (src, dst, tag, size)
        waiting = self.recvs.get(key)
        if waiting:
            r, p, _t = waiting.pop(0)
            self._push(arrival, r, p)
        else:
            self.sends.setdefault(key, []).append(arrival)

    def _deliver(self, src: int, dst: int, size: int, now: int) -> int:
        """Arrival time of a point-to-point message; on a congestion-aware network it queues
        behind earlier sends and collectives on each link (links reserved hop by hop at issue time)."""
        if not self.net.congestion_aware:
            return now + self.net.send_ns(src, dst, size)
        t = now
        for link, busy, transit in self.net.hop_times(src, dst, size):
            start = max(t, self.link_free.get(link, 0))
            self.link_free[link] = start + busy
            t = start + transit
        return t

    def _start_recv(self, rank: int, pos: int, node: Node, now: int) -> None:
        if self.symmetric:
            if self.exact:
                raise NotSymmetric(f"node {node.id}: send/recv")
            raise WorkloadError(f"node {node.id}: run_symmetric does not support send/recv; use run()")
        dst = int(node.get("comm_dst", rank))
        if dst != rank:
            raise WorkloadError(f"rank {rank} node {node.id}: recv with comm_dst {dst} must be issued by rank {dst}")
        if node.get("comm_src") is None:
            raise WorkloadError(f"rank {rank} node {node.id}: recv without 'comm_src'")
        key = (int(node.get("comm_src")), dst, int(node.get("comm_tag", 0)), int(node.get("comm_size", 0)))
        pending = self.sends.get(key)
        if pending:
            self._push(max(now, pending.pop(0)), rank, pos)
        else:
            self.recvs.setdefault(key, []).append((rank, pos, now))

    # ------------------------------------------------------------------ diagnostics
    def _stuck_report(self) -> str:
        lines = []
        for (gid, k), c in sorted(self.colls.items()):
            missing = [r for r in c.members if r not in c.arrived]
            lines.append(f"collective #{k} of group {gid} ({c.kind}, {c.size} B) waits for rank(s) {missing}")
        for key, waiting in sorted(self.recvs.items()):
            for r, p, _t in waiting:
                lines.append(f"rank {r} node {self.ranks[r].g.ids[p]} waits for a send "
                             f"(src {key[0]}, dst {key[1]}, tag {key[2]}, {key[3]} B) that never comes")
        for rs in self.ranks:
            never = [rs.g.ids[i] for i, done in enumerate(rs.issued) if not done]
            if never:
                lines.append(f"rank {rs.g.rank}: node(s) {never[:8]}{'...' if len(never) > 8 else ''} "
                             "never became ready (dependency cycle or an unfinished dependency)")
        return "simulation cannot finish: " + "; ".join(lines)
