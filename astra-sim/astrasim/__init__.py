"""astrasim: an in-process, ASTRA-Sim-compatible system simulator (knows nothing about LLMs).

Quick use::

    from astrasim import SystemSimulator, load_network, load_system, analytical_network_from_link
    net = analytical_network_from_link("FullyConnected", 8, 400.0, 936.25)
    sim = SystemSimulator(net, load_system("system.json"))
    sim.collective_time_ns("all_reduce", 16 << 20)     # memoized closed form, ns
    result = sim.run(per_rank_nodes)                  # RunResult(finish_ns, exposed_comm_ns, ...)

Layers: ``chakra`` (traces) -> ``system`` (per-rank scheduling, collective matching) ->
``collectives`` (algorithms, chunking, pipeline) -> ``network`` (analytical backend).
"""
import importlib

# name -> submodule: the package's API is loaded on first use (PEP 562), so importing
# ``astrasim.errors`` (every engine error is one) costs no protobuf, YAML or networkx
_LAZY = {
    **dict.fromkeys(("Attr", "CollectiveCommType", "GlobalMetadata", "IOInfo", "Node", "NodeType", "read_et",
                     "read_workload", "write_et", "write_workload"), ".chakra"),
    **dict.fromkeys(("RemoteMemoryConfig", "SystemConfig", "load_comm_groups", "load_network_config",
                     "load_remote_memory", "load_system"), ".config"),
    **dict.fromkeys(("AnalyticalNetwork", "CongestionAwareNetwork", "NetworkBackend",
                     "analytical_network_from_link"), ".network"),
    "GraphNetwork": ".network.graph",
    **dict.fromkeys(("RunResult", "SystemSimulator"), ".system"),
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def load_network(path, backend: str = "analytical"):
    """Read a network file and build a backend: "analytical" (congestion-unaware, any number of
    dimensions) or "congestion_aware" (one dimension, FIFO links) from a network YAML; "graph"
    (FIFO links over a topology graph) from node-link JSON or a generator spec YAML."""
    from .network import AnalyticalNetwork, CongestionAwareNetwork
    if backend == "graph":
        from .config.graph import load_graph
        from .network.graph import GraphNetwork
        return GraphNetwork(load_graph(path), str(path))
    from .config import load_network_config
    cfg = load_network_config(path)
    if backend == "congestion_aware":
        return CongestionAwareNetwork(cfg)
    if backend != "analytical":
        raise ValueError(f"unknown network backend {backend!r} (analytical, congestion_aware, graph)")
    return AnalyticalNetwork(cfg)


__all__ = ["AnalyticalNetwork", "Attr", "CongestionAwareNetwork", "GraphNetwork", "CollectiveCommType", "GlobalMetadata", "IOInfo",
           "NetworkBackend", "Node", "NodeType", "RemoteMemoryConfig", "RunResult", "SystemConfig",
           "SystemSimulator", "analytical_network_from_link", "load_comm_groups", "load_network",
           "load_network_config", "load_remote_memory", "load_system", "read_et", "read_workload",
           "write_et", "write_workload"]

