"""Which network times a run's collectives: the run config's ``network`` mapping.

    network:
      backend: analytical        # analytical (default) | congestion-aware | graph
      topology: topo.json        # graph only: node-link JSON or generator YAML (relative to the
                                 # config), or an inline generator {generator: pcie_tree, ...}
      gpus: [3, 4]               # graph only: the graph GPUs rank 0..tp*pp-1 run on
                                 # (default 0..tp*pp-1)

``analytical``: the device's ASTRA-Sim network (docs/topologies.md), congestion-unaware, as
without the key (outputs are byte-identical). ``congestion-aware``: the same network, messages
stored and forwarded over FIFO links (upstream's congestion-aware backend). ``graph``: the
topology graph, links shared by the messages on them (astrasim's GraphNetwork). Invariant: a
NetworkChoice is validated when built; errors name the config file, line and key.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .errors import ConfigError, astrasim_errors

BACKENDS = ("analytical", "congestion-aware", "graph")


@dataclass(frozen=True)
class NetworkChoice:
    """The backend, and for "graph" the topology graph and the GPUs an instance uses."""
    backend: str
    graph: object = None               # networkx graph (graph backend only)
    source: str = ""                   # where the topology came from (file or config key)
    gpus: Optional[tuple] = None

    def graph_network(self, ranks: int):
        """The instance's GraphNetwork: its rank r is graph GPU ``gpus[r]``."""
        from astrasim.network import GraphNetwork
        gpus = list(self.gpus) if self.gpus is not None else list(range(ranks))
        return GraphNetwork(self.graph, self.source, npus=gpus)


def network_choice(spec: Optional[dict], *, base: Path, ranks: int, source: Optional[str] = None,
                   lines: Optional[dict] = None) -> Optional[NetworkChoice]:
    """The validated choice of a run config's ``network`` mapping (None: the key is absent).
    ``ranks`` = tp x pp (the GPUs of one instance)."""
    if spec is None:
        return None
    lines = lines or {}

    def error(message, key):
        return ConfigError(message, file=source, line=lines.get(key) or lines.get("network"), key=key)

    unknown = sorted(set(spec) - {"backend", "topology", "gpus"})
    if unknown:
        raise error("unknown key (valid: backend, gpus, topology)", f"network.{unknown[0]}")
    backend = spec.get("backend", "analytical")
    if backend not in BACKENDS:
        raise error(f"must be one of {', '.join(BACKENDS)}; got {backend!r}", "network.backend")
    topology, gpus = spec.get("topology"), spec.get("gpus")
    if backend != "graph":
        for key in ("topology", "gpus"):
            if spec.get(key) is not None:
                raise error(f"only the graph backend takes a {key} (backend is {backend})", f"network.{key}")
        return NetworkChoice(backend)
    if topology is None:
        raise error("the graph backend needs a topology (a node-link JSON or generator file, or "
                    "{generator: NAME, ...})", "network.topology")
    from astrasim.config.graph import graph_from_spec, load_graph
    if isinstance(topology, str):
        path = Path(topology) if Path(topology).is_absolute() else base / topology
        with astrasim_errors():
            graph = load_graph(path)
        where = str(path)
    elif isinstance(topology, dict):
        try:
            with astrasim_errors():
                graph = graph_from_spec(topology, source or "config")
        except ConfigError as exc:      # name the key inside the config, not the generator's
            sub = f"network.topology.{exc.key}" if exc.key else "network.topology"
            raise error(exc.message, sub) from None
        where = "network.topology"
    else:
        raise error(f"expected a file name or a generator mapping, got {type(topology).__name__}",
                    "network.topology")
    count = sum(1 for _, d in graph.nodes(data=True) if d.get("kind") == "gpu")
    if gpus is None:
        if ranks > count:
            raise error(f"tp x pp = {ranks} GPUs, but the topology has {count}", "network.topology")
    else:
        if (not isinstance(gpus, list) or len(gpus) != ranks or len(set(map(repr, gpus))) != ranks
                or any(isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < count for x in gpus)):
            raise error(f"must list tp x pp = {ranks} distinct GPUs of the topology (0..{count - 1}), "
                        f"got {gpus!r}", "network.gpus")
        gpus = tuple(gpus)
    return NetworkChoice(backend, graph, where, gpus)
