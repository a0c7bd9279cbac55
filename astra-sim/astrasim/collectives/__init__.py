"""Collective algorithms (phase plans), phase timing and the chunk/dimension planner."""
from .algorithms import PhasePlan, Step, plan_phase
from .phase_time import phase_finish, phase_ns, reduction_ns
from .planner import CollectivePlanner, normalize_kind, pipeline_ns

__all__ = ["CollectivePlanner", "PhasePlan", "Step", "normalize_kind", "phase_finish", "phase_ns", "pipeline_ns",
           "plan_phase", "reduction_ns"]
