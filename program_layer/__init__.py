"""AgentServeSim's program layer: PCB, Program Orchestrator, Dispatch and Retention Planes."""


def package_version() -> str:
    """The installed agentservesim version (recorded in summary.json and cache keys)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("agentservesim")
    except PackageNotFoundError:
        return "unknown"
