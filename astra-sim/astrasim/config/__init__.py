"""Config readers: network YAML, system JSON, remote-memory JSON, comm-group JSON."""
from .groups import load_comm_groups, parse_comm_groups
from .memory import RemoteMemoryConfig, load_remote_memory, parse_remote_memory
from .network import DimSpec, NetworkConfig, load_network_config, parse_network
from .system import COLLECTIVE_KINDS, Implementation, SystemConfig, load_system, parse_system

__all__ = ["COLLECTIVE_KINDS", "DimSpec", "Implementation", "NetworkConfig", "RemoteMemoryConfig",
           "SystemConfig", "load_comm_groups", "load_network_config", "load_remote_memory",
           "load_system", "parse_comm_groups", "parse_network", "parse_remote_memory", "parse_system"]
