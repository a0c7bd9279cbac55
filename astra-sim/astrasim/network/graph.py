"""Link-level network over an arbitrary topology graph (networkx): hosts (GPUs), switches, links.

A graph network is one flat group of ``N`` NPUs (the graph's GPUs, numbered by their ``npu``
attribute 0..N-1) for the system layer: a collective over all of them is one phase on a
logical ring in NPU order, as on a one-dimensional ASTRA-Sim network. Messages follow routes
through the graph and are stored and forwarded link by link exactly as on the congestion-aware
analytical backend (``congestion_aware.py``): a directed link serves one message at a time in
arrival order, is busy ``floor(bytes / B)`` ns and delivers ``floor(L + bytes / B)`` ns after
the message starts on it (``B``: the link's GB/s as bytes per ns, ``L``: its latency in ns).
An undirected edge is two directed links, one per direction, each with the edge's bandwidth
(ASTRA-Sim's "bandwidth per link per direction").

Store-and-forward per message, not max-min fair sharing: it is what upstream's
congestion-aware backend does, so on the topologies that backend knows (Ring, Switch,
FullyConnected) this backend gives its results exactly (a property test checks it).

Routes: shortest paths by hop count. Where several exist (ECMP) a message from GPU ``s`` takes
the one whose nodes, each numbered within its class (GPUs; switches of one ``tier``) counting
up from ``s`` modulo the class size (switches numbered in the graph's node order), are
lexicographically smallest. On a ring this is the
clockwise way (as ASTRA-Sim's Ring); in a leaf-spine fabric GPU ``s`` goes up through spine
``s mod spines``, so the GPUs of one leaf spread over all spines. Routes are deterministic, so
runs are reproducible.
"""
from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from ..config.network import DimSpec
from ..errors import WorkloadError
from .analytical import bandwidth_bytes_per_ns
from .base import NetworkBackend


@dataclass(frozen=True, slots=True)
class Link:
    """One directed link: bandwidth (GB/s per direction) and latency (ns)."""

    bandwidth_gbs: float
    latency_ns: float


class GraphNetwork(NetworkBackend):
    """Store-and-forward FIFO links over a validated topology graph (see :func:`check_graph`:
    GPUs have ``kind: gpu`` and ``npu`` 0..N-1, switches ``kind: switch``, every edge
    ``bandwidth`` > 0 and ``latency`` >= 0, all GPUs connected). Owns immutable facts only;
    routes are computed on first use and cached."""

    congestion_aware = True

    def __init__(self, graph: nx.Graph, name: str = "graph", npus=None):
        """``npus``: the graph GPUs (their ``npu`` numbers) that are this network's NPUs 0..k-1,
        in that order (default: all of them); the other GPUs and all switches still carry
        traffic along routes, they just run no collective."""
        self.graph = graph
        self.name = name
        gpus = sorted((d["npu"], v) for v, d in graph.nodes(data=True) if d.get("kind") == "gpu")
        all_gpus = [v for _, v in gpus]
        if npus is not None:
            by_npu = dict(gpus)
            bad = [x for x in npus if x not in by_npu]
            if bad or len(set(npus)) != len(npus) or len(npus) < 1:
                raise ValueError(f"npus {list(npus)} must be distinct GPUs of the graph (0..{len(gpus) - 1})")
            gpus = [(i, by_npu[x]) for i, x in enumerate(npus)]
        self._gpu = [v for _, v in gpus]
        classes: dict = {}
        for v in graph.nodes:        # insertion order: the file's node list, a generator's order
            d = graph.nodes[v]
            cls = "gpu" if d.get("kind") == "gpu" else ("switch", str(d.get("tier", "")))
            classes.setdefault(cls, []).append(v)
        classes["gpu"] = all_gpus
        self._class_of = {v: (cls, i, len(members)) for cls, members in classes.items()
                          for i, v in enumerate(members)}
        self._links: dict = {}
        for u, v, d in graph.edges(data=True):
            link = Link(float(d["bandwidth"]), float(d["latency"]))
            self._links[(u, v)] = link
            if not graph.is_directed():
                self._links[(v, u)] = link
        bws = [lk.bandwidth_gbs for lk in self._links.values()] or [1.0]
        lats = [lk.latency_ns for lk in self._links.values()] or [0.0]
        # what the system layer sees: one flat dimension (its link numbers are informative only)
        self._dims = (DimSpec("Graph", len(self._gpu), min(bws), min(lats)),)
        self._routes: dict = {}
        self._bpns = {k: bandwidth_bytes_per_ns(lk.bandwidth_gbs) for k, lk in self._links.items()}

    @property
    def dims(self) -> tuple[DimSpec, ...]:
        return self._dims

    @property
    def npus_count(self) -> int:
        return len(self._gpu)

    def gpu_node(self, npu: int):
        """The graph node of NPU ``npu``."""
        return self._gpu[npu]

    def route(self, src: int, dst: int) -> list[tuple[object, object]]:
        """Directed links (graph node, graph node) from NPU ``src`` to NPU ``dst``."""
        hit = self._routes.get((src, dst))
        if hit is not None:
            return hit
        n = len(self._gpu)
        if not (0 <= src < n and 0 <= dst < n):
            raise WorkloadError(f"message {src}->{dst} names an NPU outside 0..{n - 1}")
        if src == dst:
            raise WorkloadError(f"message from NPU {src} to itself")
        paths = nx.all_shortest_paths(self.graph, self._gpu[src], self._gpu[dst])
        best = min(paths, key=lambda p: self._ecmp_key(src, p))
        hit = self._routes[(src, dst)] = list(zip(best, best[1:]))
        return hit

    def _ecmp_key(self, src: int, path) -> tuple:
        origin = self._class_of[path[0]][1]      # the source GPU's number in the whole graph
        return tuple((i - origin) % size for _cls, i, size in (self._class_of[v] for v in path[1:]))

    def hop_times(self, src: int, dst: int, size: int) -> list[tuple[object, int, int]]:
        out = []
        for link in self.route(src, dst):
            b = self._bpns[link]
            out.append((link, int(float(size) / b), int(self._links[link].latency_ns + float(size) / b)))
        return out

    def hops(self, src: int, dst: int) -> int:
        return len(self.route(src, dst))

    def send_ns(self, src: int, dst: int, size: int) -> int:
        return sum(t for _link, _busy, t in self.hop_times(src, dst, size))
