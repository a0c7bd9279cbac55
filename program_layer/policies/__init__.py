"""Policy interfaces (Appendix E), built-in policies and the loader.

    from program_layer.policies import RetentionPolicy, SchedulingPolicy, RoutingPolicy
"""
from .base import (InflightLoad, RetentionPolicy, RoutingPolicy, SchedulingPolicy, Signals,
                   policy_label)
from .builtin_retention import TTL, CacheLRU, ContinuumTTL, EvictAlways, OffloadTTL, PressureTTL
from .builtin_routing import LeastExpectedCompletion, LeastLoaded, RoundRobin, SessionAffinity
from .builtin_scheduling import FCFS, PLAS, ProgramFCFS
from .loader import AXES, BUILTINS, load_policy
from .min_waste import MinWaste

__all__ = [
    "RetentionPolicy", "SchedulingPolicy", "RoutingPolicy", "Signals", "InflightLoad",
    "policy_label", "load_policy", "AXES", "BUILTINS",
    "EvictAlways", "CacheLRU", "TTL", "PressureTTL", "ContinuumTTL", "MinWaste", "OffloadTTL",
    "FCFS", "ProgramFCFS", "PLAS", "RoundRobin", "LeastLoaded", "SessionAffinity", "LeastExpectedCompletion",
]
