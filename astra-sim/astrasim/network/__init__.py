"""Network backends behind one interface (:class:`NetworkBackend`)."""
from .analytical import AnalyticalNetwork, analytical_network_from_link, bandwidth_bytes_per_ns
from .base import NetworkBackend
from .congestion_aware import CongestionAwareNetwork
from .graph import GraphNetwork

__all__ = ["AnalyticalNetwork", "CongestionAwareNetwork", "GraphNetwork", "NetworkBackend", "analytical_network_from_link", "bandwidth_bytes_per_ns"]
