"""AgentServeSim's program layer: PCB, Program Orchestrator, Dispatch and Retention Planes."""
