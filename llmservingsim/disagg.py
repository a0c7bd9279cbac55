"""Prefill/decode disaggregation (vLLM 0.19 with the NIXL connector and its proxy).

vLLM's disaggregated-serving proxy sends a call first to a prefill instance with
``max_tokens = 1`` and ``kv_transfer_params = {do_remote_decode: true}``, then, once that
answers, the original request to a decode instance with the prefill's ``kv_transfer_params``
(``do_remote_prefill``, the remote block ids). Modelled here, per call routed to a pair
(P, D) with P != D:

1. **Prefill leg** on P: the call with one output token, scheduled like any request (P's
   own prefix cache may hit). When it finishes, P keeps its blocks (the connector's
   ``delay_free_blocks``) and the decode leg is submitted to D at once (the proxy's
   forwarding is not timed).
2. **Decode leg** on D: when D's scheduler admits it (same head-of-line and
   ``max_num_seqs`` rules as any admission), it allocates blocks for the whole prompt, the
   prefix found in D's own cache included, computes nothing and is parked as vLLM's
   ``WAITING_FOR_REMOTE_KVS`` (the engine's one path for it, ``remote_kv.py``; D's
   ``PDReceiver`` is the source). The blocks D did not hit are pulled from P
   (``kv_transfer.KVTransferModel``) starting when that scheduling pass's step launches.
3. **Arrival**: P frees the leg's blocks (their content stays in P's prefix cache, as
   vLLM frees them after D's notification); D publishes the received blocks, sets
   ``num_computed_tokens = prompt - 1`` (vLLM recomputes the last prompt token to get its
   logits) and puts the leg back at the front of its waiting queue (not ahead of it, as a
   tier load is: ``PDReceiver.ahead_of_queue`` is False). Its next step computes
   that one token and samples the call's first token, so the call's TTFT spans the prefill
   leg, the transfer and that step; decoding continues on D, where the call completes and
   its retention decision is taken.

The call's measurements (``FinishedCall``) take release, queueing, first scheduling and
cache hits from the prefill leg, tokens and completion from the decode leg; preemptions of
both legs add up. Retention and arrival hooks see the call once (arrival on P, completion on
D). A preempted decode leg recomputes its prompt on D (vLLM does not pull it again).

Costs nothing unless a call is routed to a pair: the source tests ``req.pd`` per admission.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Optional

from .kv_transfer import KVTransferModel
from .request import CallSpec, Request


@dataclass(slots=True, eq=False)
class PDCall:
    """One disaggregated call (only ``Disaggregation`` and the scheduler's admission write it)."""
    prefill_instance: int
    decode_instance: int
    call: CallSpec                   # the whole call (the prefill leg's spec has 1 output token)
    prefill: Optional[Request] = None
    decode: Optional[Request] = None
    allocated: bool = False          # the decode leg holds its blocks (transfer started or due)
    local_hit_tokens: int = 0        # prompt tokens the decode instance found in its own cache
    blocks: int = 0                  # blocks pulled from the prefill instance
    start_ns: int = -1


@dataclass(frozen=True, slots=True)
class TransferRecord:
    request_id: int
    prefill_instance: int
    decode_instance: int
    blocks: int
    bytes: int
    start_ns: int
    end_ns: int


class Disaggregation:
    """Owns the P/D legs' hand-offs; the Cluster calls it for requests with ``pd`` set."""

    def __init__(self, cluster, transfer: KVTransferModel):
        self.cluster = cluster
        self.transfer = transfer
        self.records: list[TransferRecord] = []
        for inst in cluster.instances:
            sched = inst.scheduler
            sched.kv_sources = sched.kv_sources + (PDReceiver(self, inst),)

    def submit(self, prefill: int, decode: int, call: CallSpec, request_id: int) -> None:
        cluster = self.cluster
        now = cluster.loop.now
        whole = Request(request_id, call, now, decode)
        cluster.instances[decode].check_fits(whole)
        leg = Request(request_id, replace(call, output_tokens=1), now, prefill)
        leg.pd = PDCall(prefill, decode, call, leg)
        cluster.instances[prefill].check_fits(leg)
        cluster.requests[request_id] = leg
        cluster.instances[prefill].submit(leg)

    def on_finished(self, req: Request, now: int) -> bool:
        """A leg finished. The prefill leg hands over (True: the call goes on); the decode
        leg takes the call's measurements from the prefill leg (False: the call is done)."""
        pd = req.pd
        cluster = self.cluster
        if req is pd.prefill:
            cluster.instances[pd.prefill_instance].num_sending += 1
            dec = Request(req.request_id, pd.call, now, pd.decode_instance, req.priority)
            dec.pd = pd
            pd.decode = dec
            cluster.requests[req.request_id] = dec
            cluster.instances[pd.decode_instance].submit(dec, ingest_hooks=False)
            return True
        leg = pd.prefill
        req.arrival_ns = leg.arrival_ns
        req.queued_ns = leg.queued_ns
        req.first_scheduled_ns = leg.first_scheduled_ns
        req.num_cached_tokens = max(leg.num_cached_tokens, 0)
        req.num_preemptions += leg.num_preemptions
        return False

    def start_transfers(self, inst, reqs: list, now: int) -> None:
        bs = inst.kv.block_size
        for dec in reqs:
            pd = dec.pd
            held = len(inst.kv.get_blocks(dec.request_id))
            pd.blocks = held - pd.local_hit_tokens // bs
            pd.start_ns = now
            ns = self.transfer.transfer_ns(pd.prefill_instance, pd.decode_instance, pd.blocks)
            self.cluster.loop.schedule(now + ns, functools.partial(self._arrived, pd))

    def _arrived(self, pd: PDCall) -> None:
        cluster = self.cluster
        now = cluster.loop.now
        self.records.append(TransferRecord(
            pd.prefill.request_id, pd.prefill_instance, pd.decode_instance, pd.blocks,
            self.transfer.total_bytes(pd.prefill_instance, pd.decode_instance, pd.blocks), pd.start_ns, now))
        p = cluster.instances[pd.prefill_instance]
        p.kv.free(pd.prefill)
        p.num_sending -= 1
        # D publishes the received blocks; prompt - 1 tokens count as computed (the last
        # one is recomputed for its logits) and the leg waits at the front of the queue
        cluster.instances[pd.decode_instance].finished_recving(pd.decode, pd.decode.prompt_len - 1, False)
        p.wake()



class PDReceiver:
    """A decode instance's ``remote_kv.RemoteKVSource``: a decode leg that holds no blocks
    yet takes its whole prompt, the part it did not hit locally pulled from its prefill
    instance (vLLM's NIXL connector: ``do_remote_prefill``)."""

    ahead_of_queue = False      # a landed leg is prepended to the waiting queue
    __slots__ = ("disagg", "inst")

    def __init__(self, disagg: Disaggregation, inst):
        self.disagg = disagg
        self.inst = inst

    def get_num_new_matched_tokens(self, req, hits: list, num_hit: int) -> Optional[int]:
        pd = req.pd
        if pd is None or pd.decode is not req or pd.allocated:
            return None         # not a decode leg, or one already pulled (a preempted leg recomputes)
        return req.num_tokens - num_hit

    def update_state_after_alloc(self, req, hits: list, num_hit: int, num_external: int) -> None:
        pd = req.pd
        pd.allocated = True
        pd.local_hit_tokens = num_hit
        req.num_cached_tokens = num_hit

    def start(self, reqs: list, now_ns: int) -> None:
        self.disagg.start_transfers(self.inst, reqs, now_ns)
