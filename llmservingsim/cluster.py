"""The engine's public API: instances sharing one event loop.

The program layer (or a request-level driver) uses only this: ``now_ns``, ``schedule``,
``submit``, ``load``, ``on_request_finished`` and ``run``. Engine internals stay behind it.
"""
from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Callable, Optional

from hooks import CallInfo, Hooks

from .errors import StuckError
from .events import EventLoop
from .frozen import maker
from .instance import Instance
from .request import CallSpec, Request


_num_tokens = attrgetter("num_tokens")


@dataclass(frozen=True, slots=True)
class InstanceLoad:
    """An instance's load as routing policies read it (a snapshot; tokens, not blocks)."""
    num_running: int
    num_waiting: int
    kv_utilization: float
    kv_used_tokens: int
    kv_pool_tokens: int
    inflight_tokens: int = 0            # tokens of the step now running (0 when idle)
    running_context_tokens: int = 0     # KV tokens of the running calls (not retained entries)


@dataclass(frozen=True, slots=True)
class FinishedCall:
    """A completed call with the engine's measurements (times in ns)."""
    info: CallInfo
    call: CallSpec
    queued_ns: int              # vLLM's queued_ts (engine ingest; the step end after the release)
    first_scheduled_ns: int
    first_token_ns: int
    last_token_ns: int
    num_cached_tokens: int
    num_preemptions: int


#: positional constructors of the two (once per release / completion; llmservingsim/frozen.py)
_make_load = maker(InstanceLoad)
_make_finished = maker(FinishedCall)


class Cluster:
    def __init__(self, loop: EventLoop, hooks: Optional[Hooks] = None):
        self.loop = loop
        self.hooks = hooks or Hooks()
        self.instances: list[Instance] = []
        self.requests: dict[int, Request] = {}
        self.on_request_finished: Optional[Callable[[CallInfo], None]] = None
        # set with ``on_request_finished`` by whoever sets it: whether that callback, for a
        # request id, schedules no event and reads nothing but its CallInfo (it may record
        # it); None: it may do anything (``finish_is_quiet``)
        self.finish_listener_quiet: Optional[Callable[[int], bool]] = None
        self.finished_calls: list[FinishedCall] = []     # engine measurements, completion order
        # data parallelism (llmservingsim/data_parallel.py): the servers, each of dp engine
        # cores in ``instances``; None when every instance is one engine core
        self.servers: Optional[list] = None
        self.disagg = None      # P/D disaggregation (llmservingsim/disagg.py), None without roles

    @property
    def now_ns(self) -> int:
        return self.loop.now

    @property
    def num_instances(self) -> int:
        """Servers the program layer routes to (one engine core each without data parallelism)."""
        return len(self.instances) if self.servers is None else len(self.servers)

    def schedule(self, time_ns: int, callback: Callable[[], None]) -> None:
        self.loop.schedule(time_ns, callback)

    def add_instance(self, inst: Instance) -> None:
        inst.release_owner_entries = self._release_owner_entries
        inst.quiet_finish = self.finish_is_quiet
        inst.public_events = self.events_are_public
        self.instances.append(inst)

    def add_server(self, server) -> None:
        """A data-parallel server (``data_parallel.DPServer``): its ranks become engine cores."""
        if self.servers is None:
            self.servers = []
        for rank in server.ranks:
            self.add_instance(rank)
        self.servers.append(server)

    def _release_owner_entries(self, owner: int, skip: Optional[int], drop: bool) -> None:
        for inst in self.instances:
            if inst.index != skip:
                inst.kv.release_entry(owner, drop)

    def submit(self, instance: int, call: CallSpec, request_id: int) -> None:
        if self.servers is None:
            inst = self.instances[instance]
        else:       # the server's DP load balancer picks the rank
            inst = self.servers[instance].choose(self.loop.now)
        req = Request(request_id, call, self.loop.now, inst.index)
        inst.check_fits(req)
        self.requests[request_id] = req
        inst.submit(req)

    def submit_pair(self, prefill: int, decode: int, call: CallSpec, request_id: int) -> None:
        """A disaggregated call: prefilled on ``prefill``, its KV sent to ``decode``, decoded
        there (llmservingsim/disagg.py)."""
        self.disagg.submit(prefill, decode, call, request_id)

    def load(self, instance: int) -> InstanceLoad:
        if self.servers is not None:
            from .data_parallel import server_load
            return server_load(self.servers[instance].ranks, InstanceLoad)
        inst = self.instances[instance]
        kv = inst.kv
        pool = kv.pool
        used = pool.num_usable - pool.num_free
        running = inst.scheduler.running
        return _make_load(len(running), len(inst.scheduler.waiting), pool.usage(),
                            used * kv.block_size, pool.num_usable * kv.block_size,
                            inst.current.num_tokens if inst.current is not None else 0,
                            sum(map(_num_tokens, running)) - inst.tokens_ahead)

    def finished(self, req: Request, now_ns: int) -> Optional[CallInfo]:
        """Called by an instance when a request completes (before its retention decision);
        returns the call's CallInfo, which the instance hands to its retention hook (None
        for a prefill leg)."""
        if req.pd is not None and self.disagg.on_finished(req, now_ns):
            return None     # a prefill leg: the call goes on on its decode instance
        self.requests.pop(req.request_id, None)
        info = self.instances[req.instance].call_info(req)
        self.finished_calls.append(_make_finished(
            info, req.spec, req.queued_ns, req.first_scheduled_ns, req.first_token_ns, req.last_token_ns,
            max(req.num_cached_tokens, 0), req.num_preemptions))
        if self.on_request_finished is not None:
            self.on_request_finished(info)
        return info

    def finish_is_quiet(self, req: Request) -> bool:
        """Whether ``finished(req, t)`` only records the call: not a P/D leg (the decode leg
        is submitted), and the listener records it without scheduling an event or reading
        anything but its CallInfo (``finish_listener_quiet``). Then it gives the same result
        whenever it runs, as long as it runs in completion order (Instance.finish_is_quiet)."""
        if req.pd is not None:
            return False
        if self.on_request_finished is None:
            return True
        quiet = self.finish_listener_quiet
        return quiet is not None and quiet(req.request_id)

    def events_are_public(self) -> bool:
        """Whether every event but an instance's own steps reads and changes the engine only
        through this API (``load``, ``submit``, ``schedule``, the finish callback): no P/D
        legs (their transfers are events on two instances) and no data-parallel servers
        (their balancer reads the ranks' state, and their waves are events across ranks).
        An instance's steps read and change only that instance, and ``Cluster.finished``."""
        return self.disagg is None and self.servers is None

    def run(self) -> None:
        self.loop.run()
        if self.requests:
            req = min(self.requests.values(), key=lambda r: r.request_id)
            raise StuckError(f"simulation ended with {len(self.requests)} unfinished call(s), e.g. request "
                             f"{req.request_id} (program {req.owner}, call {req.call_index}, {req.status.name})")
