"""Which network times a run's collectives: the run config's ``network`` mapping.

    network:
      backend: analytical        # analytical (default) | congestion-aware | graph
      topology: topo.json        # graph only: node-link JSON or generator YAML (relative to the
                                 # config), or an inline generator {generator: pcie_tree, ...}
      gpus: [3, 4]               # graph only: the graph GPUs rank 0..tp*pp-1 run on
                                 # (default 0..tp*pp-1)
      binary: /path/to/AstraSim_Analytical_Congestion_Unaware   # astra-sim only (or $ASTRASIM_BIN)

``analytical``: the device's ASTRA-Sim network (docs/topologies.md), congestion-unaware, as
without the key (outputs are byte-identical). ``congestion-aware``: the same network, messages
stored and forwarded over FIFO links (upstream's congestion-aware backend). ``graph``: the
topology graph, links shared by the messages on them (astrasim's GraphNetwork). ``astra-sim``:
the device network as ``analytical``, but each distinct step graph is run by the user's own
upstream binary (``llmservingsim.upstream_comm``), a whole serving run's cross-check. Invariant: a
NetworkChoice is validated when built; errors name the config file, line and key.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .errors import ConfigError, astrasim_errors

BACKENDS = ("analytical", "congestion-aware", "graph", "astra-sim")


@dataclass(frozen=True)
class NetworkChoice:
    """The backend, and for "graph" the topology graph and the GPUs an instance uses."""
    backend: str
    graph: object = None               # networkx graph (graph backend only)
    source: str = ""                   # where the topology came from (file or config key)
    gpus: Optional[tuple] = None
    binary: Optional[str] = None       # the user's upstream ASTRA-Sim binary (astra-sim backend only)

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

    unknown = sorted(set(spec) - {"backend", "topology", "gpus", "binary"})
    if unknown:
        raise error("unknown key (valid: backend, binary, gpus, topology)", f"network.{unknown[0]}")
    backend = spec.get("backend", "analytical")
    if backend not in BACKENDS:
        raise error(f"must be one of {', '.join(BACKENDS)}; got {backend!r}", "network.backend")
    topology, gpus = spec.get("topology"), spec.get("gpus")
    if backend != "astra-sim" and spec.get("binary") is not None:
        raise error(f"only the astra-sim backend takes a binary (backend is {backend})", "network.binary")
    if backend != "graph":
        for key in ("topology", "gpus"):
            if spec.get(key) is not None:
                raise error(f"only the graph backend takes a {key} (backend is {backend})", f"network.{key}")
        if backend == "astra-sim":
            return NetworkChoice(backend, binary=_upstream_binary(spec.get("binary"), base, error))
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


def _upstream_binary(given, base: Path, error) -> str:
    """The astra-sim backend's binary: ``network.binary`` (relative to the config), else the
    ``ASTRASIM_BIN`` environment variable; it must be an executable file (built from source by
    the user: docs/topologies.md says how; never downloaded)."""
    import os
    if given is not None and not isinstance(given, str):
        raise error(f"must be a path to the ASTRA-Sim binary, got {type(given).__name__}", "network.binary")
    path = given if given is not None else os.environ.get("ASTRASIM_BIN")
    if not path:
        raise error("the astra-sim backend runs your own upstream ASTRA-Sim binary: set network.binary or "
                    "the ASTRASIM_BIN environment variable (docs/topologies.md: building it)", "network.backend")
    full = Path(path) if Path(path).is_absolute() or given is None else base / path
    if not full.is_file() or not os.access(full, os.X_OK):
        where = "network.binary" if given is not None else "network.backend"
        raise error(f"{full} is not an executable file (the ASTRA-Sim binary"
                    f"{'' if given is not None else ' named by ASTRASIM_BIN'})", where)
    return str(full.resolve())
