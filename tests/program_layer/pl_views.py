"""Hand-built PCB views for policy unit tests."""
from types import MappingProxyType

from program_layer.pcb import PCBView


def view(gaps=None, own_gaps=None, **over) -> PCBView:
    fields = dict(program_id=0, session_id="s0", arrival_s=0.0, call_index=0,
                  calls_completed=0, attained_service_s=0.0, prior_instance=None,
                  kv_protected=False, kv_deadline_s=None, kv_resident_tokens=0,
                  kv_instance=None, kv_value=None, tool_name=None, gap_start_s=None,
                  gap_end_s=None, context_tokens=0, release_s=0.0, num_preemptions=0)
    fields.update(over)
    return PCBView(gaps=MappingProxyType(dict(gaps or {})),
                   own_gaps=MappingProxyType(dict(own_gaps or {})), **fields)
