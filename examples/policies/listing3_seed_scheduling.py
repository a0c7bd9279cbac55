"""Listing 3 (AgentServeSim paper, Appendix F): seed scheduling policy, PLAS."""
from program_layer.policies import SchedulingPolicy


# EVOLVE-BLOCK-START
class EvolvedScheduling(SchedulingPolicy):
    engine_args = {"scheduling_policy": "priority"}

    def priority(self, pcb, now):
        return int(round(pcb.attained_service_s * 1000.0))
# EVOLVE-BLOCK-END
