"""Step time = compute (performance model) + communication (execution graph) + framework
overhead (overhead model).

``StepTimer.time(output)`` turns a scheduler output into integer nanoseconds. The
communication part comes from a ``CommModel`` (``llmservingsim.execution_graph``): the
collectives of the step's Chakra graph, each timed by the system simulator, memoised by the
token count (a property test checks this equals running the whole graph). The framework
overhead is ``overhead_model.Framework`` applied to the step's shape and compute.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol

from .overhead_model import Framework
from .perf_model import BatchShape, PerformanceModel
from .scheduler import SchedulerOutput


class CommModel(Protocol):
    def exposed_comm_ns(self, shape: BatchShape) -> int:
        """Communication time not hidden behind compute for one step of this shape (a
        function of the shape alone: ``time_decode`` keeps it per batch size)."""


@dataclass(slots=True)
class StepTiming:
    total_ns: int
    compute_ns: int
    comm_ns: int
    overhead_ns: int


def shape_of(out: SchedulerOutput) -> BatchShape:
    """The step's shape, from the batch's tallies (``SchedulerOutput``)."""
    pt = out.prefill_tokens
    nd = out.num_decodes
    return BatchShape(pt, (out.prefill_ctx_sum / pt) if pt else 0.0, len(out.scheduled) - nd, nd,
                      out.decode_kv_sum, out.decode_kv_max, out.decode_kv_min)


_new = object.__new__
MIN_STEP_NS = 1000      # a step never takes less than a microsecond


def _timing(compute: int, comm: int, overhead: int) -> StepTiming:
    """``StepTiming(total, compute, comm, overhead)``, its slots stored directly (a slotted
    dataclass's ``__init__`` through the type call costs some 2,000 instructions)."""
    total = compute + comm + overhead
    if total < MIN_STEP_NS:
        total = MIN_STEP_NS
    st = _new(StepTiming)
    st.total_ns = total
    st.compute_ns = compute
    st.comm_ns = comm
    st.overhead_ns = overhead
    return st


class StepTimer:
    def __init__(self, perf: PerformanceModel, comm: Optional[CommModel] = None,
                 framework: Optional[Framework] = None):
        self.perf = perf
        self.comm = comm
        self.pp = perf.pp
        self.framework = framework if framework is not None else Framework()
        # decodes -> (comm ns, overhead ns, PerformanceModel.decode_fn): time_decode's parts
        # fixed by the batch size
        self._decode_memo: dict[int, tuple] = {}

    def time_shape(self, shape: BatchShape) -> StepTiming:
        if not shape.prefill_tokens and not shape.num_prefills and shape.num_decodes and self.pp == 1:
            return self.time_decode(shape.num_decodes, shape.decode_kv_sum, shape.decode_kv_max,
                                    shape.decode_kv_min)
        perf = self.perf
        if self.pp == 1:
            compute_us = perf.compute_us(shape)
        else:       # the layers run stage after stage; embedding, head and sampler once
            once = perf.once_us(shape)
            compute_us = self.pp * (perf.compute_us(shape) - once) + once
        compute = round(compute_us * 1000.0)
        overhead = round(self.framework.us(shape.num_prefills, shape.prefill_tokens, shape.num_tokens,
                                           compute_us) * 1000.0)
        comm = self.comm.exposed_comm_ns(shape) if self.comm is not None else 0
        return _timing(compute, comm, overhead)

    def time_decode(self, n: int, kv_sum: int, kv_max: int, kv_min: int) -> StepTiming:
        """``time_shape`` of a pure-decode step of ``n`` sequences (every executed decode
        step and fast-forward's): its communication and framework overhead depend on ``n``
        alone, so they are looked up once per batch size, and only the compute is evaluated
        per step."""
        if self.pp != 1:
            return self.time_shape(BatchShape(0, 0.0, 0, n, kv_sum, kv_max, kv_min))
        fixed = self._decode_memo.get(n)
        if fixed is None:
            fixed = self._decode_fixed(n, kv_sum, kv_max, kv_min)
        comm, overhead, compute_us = fixed
        return _timing(round(compute_us(kv_sum, kv_max, kv_min) * 1000.0), comm, overhead)

    def _decode_fixed(self, n: int, kv_sum: int, kv_max: int, kv_min: int) -> tuple:
        """``_decode_memo``'s entry for ``n`` decodes (the KV lengths only describe a shape
        for the communication model, which reads the batch size alone)."""
        shape = BatchShape(0, 0.0, 0, n, kv_sum, kv_max, kv_min)
        comm = self.comm.exposed_comm_ns(shape) if self.comm is not None else 0
        # a pure-decode step's overhead does not read its compute (no prefill share)
        overhead = round(self.framework.us(0, 0, n, 0.0) * 1000.0)
        fixed = self._decode_memo[n] = (comm, overhead, self.perf.decode_fn(n))
        return fixed

    def decode_stretch(self, n: int, kv_sum: int, kv_max: int, kv_min: int):
        """``time_decode(n, kv_sum + n * j, kv_max + j, kv_min + j)`` for j = 0, 1, 2, ...
        (an iterator: the steps of a fast-forwarded run), from
        ``PerformanceModel.decode_stretch`` from j = 0 (its floats are ``decode_us``'s) and
        the per-size parts ``time_decode`` keeps (``_timing``'s sum, in integers), which that
        generator turns into the ``StepTiming`` records itself (one generator level a step)."""
        if self.pp != 1:
            return self._stages_stretch(n, kv_sum, kv_max, kv_min)
        parts = self._decode_memo.get(n)
        if parts is None:
            parts = self._decode_fixed(n, kv_sum, kv_max, kv_min)
        comm, overhead, _ = parts
        return self.perf.decode_stretch(n, kv_sum, kv_max, kv_min, (StepTiming, comm, overhead, MIN_STEP_NS))

    def _stages_stretch(self, n: int, kv_sum: int, kv_max: int, kv_min: int):
        """``decode_stretch`` with pipeline stages: ``time_decode`` step by step."""
        j = 0
        while True:
            yield self.time_decode(n, kv_sum + n * j, kv_max + j, kv_min + j)
            j += 1

    def time(self, out: SchedulerOutput) -> StepTiming:
        """``time_shape(shape_of(out))``; a pure-decode step (every entry a decode) goes to
        ``time_decode`` from the batch's tallies without building its shape (``time_shape``
        sends it there; with pipeline stages ``time_decode`` sends it back)."""
        nd = out.num_decodes
        if nd and nd == len(out.scheduled) and not out.prefill_tokens:
            return self.time_decode(nd, out.decode_kv_sum, out.decode_kv_max, out.decode_kv_min)
        return self.time_shape(shape_of(out))
