"""Error types used by astrasim: the project's user-facing errors (``llmservingsim.errors``).

Every bad input (config file, workload file, unmatched collective) raises one of these with a
message naming the file and key (or rank and node id), never a deep traceback.
"""
from __future__ import annotations

from llmservingsim.errors import ConfigError, SimError, StuckError, WorkloadError, parse_yaml

__all__ = ["ConfigError", "SimError", "StuckError", "WorkloadError", "parse_yaml"]
