"""AgentServeSim's program layer: PCB, Program Orchestrator, Dispatch and Retention Planes."""

# The one place the version is written: pyproject.toml reads it from here
# ([tool.setuptools.dynamic]), so the installed metadata and what a run records agree. It is
# read as a constant, not through importlib.metadata, whose import (the email package) costs a
# short run more than writing its outputs does.
__version__ = "0.1.0"


def package_version() -> str:
    """The agentservesim version (recorded in summary.json and cache keys)."""
    return __version__
