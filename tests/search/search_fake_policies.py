"""Stand-in policy bases for tests that run against the fake simulator (search_fake_sim.py).

Discovery in program_layer.search matches base classes by name, so these behave like the real
``program_layer.policies`` bases for the search machinery.
"""


class RetentionPolicy:
    signals = None

    def on_turn_complete(self, pcb, request_id, now):
        return "release"

    def on_turn_arrival(self, pcb, now):
        return "none"


class SchedulingPolicy:
    engine_args = {}

    def priority(self, pcb, now):
        return 0


class RoutingPolicy:
    def select(self, pcb, inflight, now):
        return 0
