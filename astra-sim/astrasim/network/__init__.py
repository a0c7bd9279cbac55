"""Network backends behind one interface (:class:`NetworkBackend`)."""
from .analytical import AnalyticalNetwork, analytical_network_from_link, bandwidth_bytes_per_ns
from .base import NetworkBackend
from .congestion_aware import CongestionAwareNetwork


def __getattr__(name: str):
    # GraphNetwork needs networkx (~0.1 s to import): loaded when a graph is used, so a run on
    # the analytical or congestion-aware backend never pays for it
    if name == "GraphNetwork":
        from .graph import GraphNetwork
        return GraphNetwork
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["AnalyticalNetwork", "CongestionAwareNetwork", "GraphNetwork", "NetworkBackend", "analytical_network_from_link", "bandwidth_bytes_per_ns"]
