"""Requests waiting for remote KV: vLLM 0.19's ``WAITING_FOR_REMOTE_KVS`` (docs/architecture.md).

vLLM has one scheduler path for KV that a connector brings in from outside the GPU pool,
whatever the connector (the offloading connector's CPU tier, NIXL's remote prefill):

1. **Match** (``get_num_new_matched_tokens``): when admission reaches a waiting request,
   the connector says how many tokens past the local prefix hit it can supply.
2. **Allocate and park** (``allocate_slots`` + ``update_state_after_alloc``): the request
   gets GPU blocks for its local hit plus those tokens, the new blocks unpublished (their
   content is not there yet); it leaves the waiting queue as ``WAITING_FOR_REMOTE_KVS``:
   not running, no token budget, holding its blocks.
3. **Transfer** (the worker's ``start_load_kv``): the copies start when the step that
   parked the request launches (or at once when that pass launched no step).
4. **Land** (``finished_recving_kv_req_ids`` -> ``_update_waiting_for_remote_kv``): the
   blocks are published, ``num_computed_tokens`` covers what arrived and the request is
   admitted again ahead of newer work; it computes only the rest.

Here the engine part is ``Scheduler._wait_for_remote_kvs`` (steps 1-2, one counter
``Scheduler.num_receiving`` of parked requests), ``SchedulerOutput.remote_kv`` + ``Instance.
_start_remote_kv`` (step 3) and ``Instance.finished_recving`` / ``Scheduler.finished_recving``
(step 4). What differs by source sits behind ``RemoteKVSource``, implemented by
``kv_tiers.InstanceTiers`` (CPU/CXL tier loads) and ``disagg.PDReceiver`` (a P/D decode leg
pulling its prompt's KV from the prefill instance).

Source-specific on purpose (unifying them would change results):
- what lands: a tier load covers exactly the loaded blocks; a P/D leg counts ``prompt - 1``
  tokens as computed (vLLM recomputes the last prompt token for its logits);
- where a landed request re-enters admission (``ahead_of_queue``): tier loads go to a FIFO
  admitted before the waiting queue, ahead of any priority (a landed request holds its
  blocks; a head that cannot fit behind it would wait forever); a P/D leg is prepended to
  the waiting queue (the FCFS front; its key in the priority heap);
- the prefix-cache statistics each counts at parking.

Invariants: ``Scheduler.num_receiving`` equals the parked requests of every source
together; a parked request is in neither ``running`` nor ``waiting`` nor the landed FIFO,
its status is ``WAITING_FOR_REMOTE_KVS``. Costs nothing unless a source is attached: the
scheduler tests ``kv_sources`` once per admission, the instance ``out.remote_kv`` (None
unless something was parked) once per step.
"""
from __future__ import annotations

from typing import Optional, Protocol


class RemoteKVSource(Protocol):
    """One kind of KV source, as the scheduler and instance see it (vLLM's connector,
    scheduler side, plus its worker's transfer timing)."""

    # True: landed requests are admitted before the waiting queue, in landing order;
    # False: they are prepended to the waiting queue
    ahead_of_queue: bool

    def get_num_new_matched_tokens(self, req, hits: list, num_hit: int) -> Optional[int]:
        """Tokens past the local hit (``num_hit`` tokens in ``hits``) that this source
        supplies for the waiting head ``req``, to allocate unpublished blocks for; None:
        the request takes nothing from this source (admission goes on as usual)."""

    def update_state_after_alloc(self, req, hits: list, num_hit: int, num_external: int) -> None:
        """The blocks were allocated and ``req`` is parked: note what its transfer moves."""

    def start(self, reqs: list, now_ns: int) -> None:
        """The pass that parked ``reqs`` launched its step (or launched none): start their
        transfers. Each landing calls ``Instance.finished_recving`` on the receiving instance."""
