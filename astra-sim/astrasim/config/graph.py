"""Topology graphs from files: networkx node-link JSON, or a generator spec (YAML/mapping).

Node-link JSON (``networkx.node_link_data``; the edge list may be called ``edges`` or
``links``)::

    {"directed": false, "multigraph": false, "graph": {},
     "nodes": [{"id": "gpu0", "kind": "gpu", "npu": 0}, {"id": "sw", "kind": "switch"}, ...],
     "edges": [{"source": "gpu0", "target": "sw", "bandwidth": 50.0, "latency": 500}, ...]}

``kind`` is ``gpu`` or ``switch``; GPUs carry ``npu`` (0..N-1, each once; when no GPU has one
they are numbered in node order); switches may carry ``tier`` (ECMP classes, graph.py);
``bandwidth`` (GB/s per direction, > 0) and ``latency`` (ns, >= 0) are required on every edge.
A generator spec is ``{generator: <name>, <parameter>: <value>, ...}``
(``astrasim.network.generators``). Every failure is one ConfigError naming the file and the
field (``nodes[3].kind``, ``edges[5].bandwidth``, ``generator``, a parameter name).
"""
from __future__ import annotations

import inspect
import math
from pathlib import Path

import networkx as nx

from ..errors import ConfigError
from ..network.generators import GENERATORS
from ._read import load_json, load_yaml


def _number(v, where: str, key: str, *, positive: bool) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ConfigError(f"must be a number, got {v!r}", file=where, key=key)
    if (v <= 0) if positive else (v < 0):
        raise ConfigError(f"must be {'> 0' if positive else '>= 0'}, got {v!r}", file=where, key=key)
    return float(v)


def parse_graph(data, where: str = "<in-process>") -> nx.Graph:
    """A node-link mapping -> a checked graph (see the module docstring)."""
    if not isinstance(data, dict):
        raise ConfigError("top level must be a JSON object (networkx node-link data)", file=where)
    edge_key = "edges" if "edges" in data else "links"
    for key in ("nodes", edge_key):
        if not isinstance(data.get(key), list):
            raise ConfigError("required list is missing" if key not in data else "must be a list",
                              file=where, key=key)
    if data.get("multigraph"):
        raise ConfigError("multigraphs are not supported (give one edge per pair)", file=where, key="multigraph")
    g = nx.DiGraph() if data.get("directed") else nx.Graph()
    numbered = any(isinstance(n, dict) and "npu" in n for n in data["nodes"])
    seen_npu: dict = {}
    for i, n in enumerate(data["nodes"]):
        at = f"nodes[{i}]"
        if not isinstance(n, dict) or "id" not in n:
            raise ConfigError("must be an object with an 'id'", file=where, key=at)
        nid = n["id"]
        if not isinstance(nid, (int, str)) or isinstance(nid, bool):
            raise ConfigError(f"must be an integer or a string, got {nid!r}", file=where, key=f"{at}.id")
        if nid in g:
            raise ConfigError(f"duplicate node id {nid!r}", file=where, key=f"{at}.id")
        kind = n.get("kind")
        if kind not in ("gpu", "switch"):
            raise ConfigError(f"must be 'gpu' or 'switch', got {kind!r}", file=where, key=f"{at}.kind")
        attrs = {"kind": kind}
        if kind == "gpu":
            npu = n.get("npu", len(seen_npu) if not numbered else None)
            if isinstance(npu, bool) or not isinstance(npu, int) or npu < 0:
                raise ConfigError(f"must be an integer >= 0 (every GPU needs one when any has one), got {npu!r}",
                                  file=where, key=f"{at}.npu")
            if npu in seen_npu:
                raise ConfigError(f"npu {npu} is also {seen_npu[npu]}", file=where, key=f"{at}.npu")
            seen_npu[npu] = at
            attrs["npu"] = npu
        elif "tier" in n:
            attrs["tier"] = str(n["tier"])
        g.add_node(nid, **attrs)
    if len(seen_npu) < 2:
        raise ConfigError(f"needs at least 2 GPUs, got {len(seen_npu)}", file=where, key="nodes")
    if sorted(seen_npu) != list(range(len(seen_npu))):
        missing = sorted(set(range(len(seen_npu))) - set(seen_npu))
        raise ConfigError(f"GPU npu numbers must be 0..{len(seen_npu) - 1}; missing {missing}", file=where,
                          key="nodes")
    for i, e in enumerate(data[edge_key]):
        at = f"{edge_key}[{i}]"
        if not isinstance(e, dict):
            raise ConfigError("must be an object", file=where, key=at)
        for end in ("source", "target"):
            if e.get(end) not in g:
                raise ConfigError(f"names no node: {e.get(end)!r}", file=where, key=f"{at}.{end}")
        if e["source"] == e["target"]:
            raise ConfigError("a link from a node to itself", file=where, key=at)
        for key in ("bandwidth", "latency"):
            if key not in e:
                raise ConfigError("required key is missing", file=where, key=f"{at}.{key}")
        bw = _number(e["bandwidth"], where, f"{at}.bandwidth", positive=True)
        lat = _number(e["latency"], where, f"{at}.latency", positive=False)
        if g.has_edge(e["source"], e["target"]):
            raise ConfigError("duplicate link", file=where, key=at)
        g.add_edge(e["source"], e["target"], bandwidth=bw, latency=lat)
    check_connected(g, where)
    return g


def check_connected(g: nx.Graph, where: str) -> None:
    """Every GPU can reach every other GPU (ConfigError otherwise)."""
    gpus = sorted((d["npu"], v) for v, d in g.nodes(data=True) if d.get("kind") == "gpu")
    reach = nx.descendants(g, gpus[0][1]) if g.is_directed() else nx.node_connected_component(g, gpus[0][1])
    for npu, v in gpus[1:]:
        if v not in reach or (g.is_directed() and gpus[0][1] not in nx.descendants(g, v)):
            raise ConfigError(f"GPU {npu} ({v!r}) and GPU 0 are not connected both ways", file=where, key="edges")


def graph_from_spec(spec, where: str = "<in-process>") -> nx.Graph:
    """``{generator: name, parameter: value, ...}`` -> the generator's graph."""
    if not isinstance(spec, dict):
        raise ConfigError(f"must be a mapping {{generator: NAME, ...}}, got {spec!r}", file=where)
    name = spec.get("generator")
    if name not in GENERATORS:
        raise ConfigError(f"unknown generator {name!r} (use {', '.join(sorted(GENERATORS))})", file=where,
                          key="generator")
    fn = GENERATORS[name]
    params = inspect.signature(fn).parameters
    kwargs = {}
    for key, value in spec.items():
        if key == "generator":
            continue
        if key not in params:
            raise ConfigError(f"{name} has no parameter {key!r} (it has {', '.join(params)})", file=where, key=key)
        default = params[key].default
        if isinstance(default, (tuple, list)):
            if not isinstance(value, list) or not value or any(isinstance(x, bool) or not isinstance(x, int)
                                                                or x < 2 for x in value):
                raise ConfigError(f"must be a list of integers >= 2, got {value!r}", file=where, key=key)
        elif isinstance(default, int):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"must be an integer >= 1, got {value!r}", file=where, key=key)
        else:
            value = _number(value, where, key, positive=not key.endswith("latency"))
        kwargs[key] = value
    try:
        g = fn(**kwargs)
    except ValueError as exc:
        raise ConfigError(str(exc), file=where, key="generator") from None
    if sum(1 for _, d in g.nodes(data=True) if d.get("kind") == "gpu") < 2:
        raise ConfigError("the generated topology has fewer than 2 GPUs", file=where, key="generator")
    return g


def load_graph(path) -> nx.Graph:
    """A topology graph from ``path``: node-link JSON (``.json``) or a generator spec (YAML)."""
    p = Path(path)
    if p.suffix.lower() == ".json":
        return parse_graph(load_json(p), str(p))
    return graph_from_spec(load_yaml(p), str(p))
