"""Topology generators: the shapes people build, as graphs for :class:`GraphNetwork`.

Every generator returns an undirected ``networkx.Graph`` whose GPU nodes are ``("gpu", i)``
with ``kind: gpu`` and ``npu: i`` (0..N-1, in the order the docstring gives), switch nodes
``(tier, i)`` with ``kind: switch`` and ``tier``, and edges with ``bandwidth`` (GB/s per
direction) and ``latency`` (ns). Parameters are keyword-only with the defaults shown; the
run-config form is ``{generator: <name>, <parameter>: <value>, ...}`` (``GENERATORS``).
"""
from __future__ import annotations

import itertools

import networkx as nx


def _gpu(g: nx.Graph, i: int) -> tuple:
    g.add_node(("gpu", i), kind="gpu", npu=i)
    return ("gpu", i)


def _switch(g: nx.Graph, tier: str, i: int) -> tuple:
    g.add_node((tier, i), kind="switch", tier=tier)
    return (tier, i)


def _link(g: nx.Graph, a, b, bandwidth: float, latency: float) -> None:
    g.add_edge(a, b, bandwidth=float(bandwidth), latency=float(latency))


def ring(*, gpus: int = 8, bandwidth: float = 50.0, latency: float = 0.0) -> nx.Graph:
    """GPUs in a bidirectional ring, GPU i linked to GPU i+1 mod n (ASTRA-Sim's Ring)."""
    g = nx.Graph()
    for i in range(gpus):
        _gpu(g, i)
    for i in range(gpus):
        if not g.has_edge(("gpu", i), ("gpu", (i + 1) % gpus)):
            _link(g, ("gpu", i), ("gpu", (i + 1) % gpus), bandwidth, latency)
    return g


def fully_connected(*, gpus: int = 8, bandwidth: float = 50.0, latency: float = 0.0) -> nx.Graph:
    """A link between every pair of GPUs (ASTRA-Sim's FullyConnected)."""
    g = nx.Graph()
    for i in range(gpus):
        _gpu(g, i)
    for i, j in itertools.combinations(range(gpus), 2):
        _link(g, ("gpu", i), ("gpu", j), bandwidth, latency)
    return g


def nvswitch(*, gpus: int = 8, bandwidth: float = 450.0, latency: float = 0.0) -> nx.Graph:
    """One node: every GPU has one link to one NVSwitch (ASTRA-Sim's Switch)."""
    g = nx.Graph()
    sw = _switch(g, "nvswitch", 0)
    for i in range(gpus):
        _link(g, _gpu(g, i), sw, bandwidth, latency)
    return g


def pcie_tree(*, gpus: int = 8, switches: int = 2, bandwidth: float = 32.0, uplink_bandwidth: float = 32.0,
              latency: float = 0.0) -> nx.Graph:
    """GPUs under PCIe switches under one CPU root complex: GPU i sits under switch
    i // (gpus / switches). Two GPUs under one switch cross 2 links; two under different
    switches cross 4 (GPU, switch, root complex, switch, GPU), sharing the switches' uplinks."""
    if switches < 1 or gpus % switches:
        raise ValueError(f"gpus ({gpus}) must be a multiple of switches ({switches})")
    g = nx.Graph()
    root = _switch(g, "root", 0)
    per = gpus // switches
    for s in range(switches):
        sw = _switch(g, "pcie", s)
        _link(g, sw, root, uplink_bandwidth, latency)
        for k in range(per):
            _link(g, _gpu(g, s * per + k), sw, bandwidth, latency)
    return g


def rail_optimized(*, nodes: int = 2, gpus_per_node: int = 8, nvlink_bandwidth: float = 450.0,
                   nic_bandwidth: float = 50.0, latency: float = 0.0, nic_latency: float = 0.0) -> nx.Graph:
    """Multi-node, rail-optimised: GPU k of node m is NPU m * gpus_per_node + k; every node has an
    NVSwitch joining its GPUs, and GPU k of every node has a NIC link to rail switch k."""
    g = nx.Graph()
    rails = [_switch(g, "rail", k) for k in range(gpus_per_node)]
    for m in range(nodes):
        nv = _switch(g, "nvswitch", m)
        for k in range(gpus_per_node):
            gpu = _gpu(g, m * gpus_per_node + k)
            _link(g, gpu, nv, nvlink_bandwidth, latency)
            _link(g, gpu, rails[k], nic_bandwidth, nic_latency)
    return g


def fat_tree(*, leaves: int = 4, hosts_per_leaf: int = 4, spines: int = 4, bandwidth: float = 50.0,
             oversubscription: float = 1.0, latency: float = 0.0) -> nx.Graph:
    """Two-level fat-tree / leaf-spine: host j of leaf l is NPU l * hosts_per_leaf + j; every
    leaf links to every spine. Oversubscription r = downlink capacity / uplink capacity of a
    leaf, so each leaf-spine link has hosts_per_leaf * bandwidth / (r * spines) GB/s."""
    if oversubscription <= 0:
        raise ValueError(f"oversubscription must be > 0, got {oversubscription}")
    g = nx.Graph()
    up = hosts_per_leaf * bandwidth / (oversubscription * spines)
    spine_nodes = [_switch(g, "spine", s) for s in range(spines)]
    for lf in range(leaves):
        leaf = _switch(g, "leaf", lf)
        for j in range(hosts_per_leaf):
            _link(g, _gpu(g, lf * hosts_per_leaf + j), leaf, bandwidth, latency)
        for sp in spine_nodes:
            _link(g, leaf, sp, up, latency)
    return g


def torus(*, dims: list | tuple = (4, 4), bandwidth: float = 50.0, latency: float = 0.0) -> nx.Graph:
    """2-D/3-D torus of GPUs (no switches): NPU i has coordinates (i mod d0, (i div d0) mod d1,
    ...), linked to its neighbours in each dimension with wrap-around (a dimension of 2 has one
    link between its two GPUs)."""
    dims = tuple(int(d) for d in dims)
    g = nx.Graph()
    total = 1
    for d in dims:
        total *= d
    for i in range(total):
        _gpu(g, i)
    stride = 1
    for d in dims:
        for i in range(total):
            c = (i // stride) % d
            j = i - c * stride + ((c + 1) % d) * stride
            if j != i and not g.has_edge(("gpu", i), ("gpu", j)):
                _link(g, ("gpu", i), ("gpu", j), bandwidth, latency)
        stride *= d
    return g


def dragonfly(*, groups: int = 4, routers_per_group: int = 2, hosts_per_router: int = 2,
              bandwidth: float = 50.0, local_bandwidth: float = 50.0, global_bandwidth: float = 25.0,
              latency: float = 0.0, global_latency: float = 0.0) -> nx.Graph:
    """Dragonfly: routers of a group fully connected (local links), one global link between
    every pair of groups (groups g < h: router (h - 1) mod routers_per_group of g to router
    g mod routers_per_group of h). Host k of router r of group g is NPU
    (g * routers_per_group + r) * hosts_per_router + k."""
    g = nx.Graph()
    routers = [[_switch(g, "router", gi * routers_per_group + r) for r in range(routers_per_group)]
               for gi in range(groups)]
    for gi in range(groups):
        for r in range(routers_per_group):
            for k in range(hosts_per_router):
                _link(g, _gpu(g, (gi * routers_per_group + r) * hosts_per_router + k), routers[gi][r],
                      bandwidth, latency)
        for a, b in itertools.combinations(routers[gi], 2):
            _link(g, a, b, local_bandwidth, latency)
    for a, b in itertools.combinations(range(groups), 2):
        _link(g, routers[a][(b - 1) % routers_per_group], routers[b][a % routers_per_group],
              global_bandwidth, global_latency)
    return g


GENERATORS = {"ring": ring, "fully_connected": fully_connected, "nvswitch": nvswitch, "pcie_tree": pcie_tree, "rail_optimized": rail_optimized,
              "fat_tree": fat_tree, "torus": torus, "dragonfly": dragonfly}
