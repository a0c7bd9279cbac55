"""System layer: node scheduling per rank, collective matching, the event loop."""
from .engine import RunResult
from .simulator import SystemSimulator

__all__ = ["RunResult", "SystemSimulator"]
