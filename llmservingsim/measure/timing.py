"""Timing one op: warm-up, repeated timed regions, the median per call (docs/profiler.md).

- CPU: ``time.perf_counter_ns`` around ``inner`` back-to-back calls.
- CUDA: a pair of CUDA events around a region of ``inner`` calls. The region is a CUDA graph
  of the ``inner`` calls where capture works (the default): replaying a graph launches its
  kernels back to back, so the time is the kernels' own (what vLLM's layer-wise profiler
  sums), not PyTorch's per-call launch cost, which exceeds the kernel time of small ops. An
  op whose capture fails is timed eagerly and named in ``Timer.eager_ops``.

``inner`` is chosen per op so one region lasts at least ``target_us`` (from the warm-up
calls' time): short ops are averaged over many calls, long ones run once per region.
Invariants: the result is the median over ``repeats`` regions of region time / ``inner``,
in microseconds, and > 0 (a region that measured 0 is an error, never written).
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

MAX_INNER = 256


@dataclass
class Timer:
    device: torch.device
    warmup: int = 2
    repeats: int = 5
    target_us: float = 100.0
    cuda_graphs: bool = True
    eager_ops: set = field(default_factory=set)

    def __post_init__(self):
        if self.warmup < 1 or self.repeats < 1:
            raise ValueError("warmup and repeats must be >= 1")
        if self.device.type == "cuda" and self.cuda_graphs and not self._graphs_work():
            self.cuda_graphs = False

    def measure(self, op: str, fn: Callable[[], object]) -> float:
        """Median µs per call of ``fn`` (``op`` names it in ``eager_ops`` if it cannot be
        captured)."""
        if self.device.type == "cuda":
            return self._cuda(op, fn)
        return self._cpu(fn)

    def _inner(self, once_us: float) -> int:
        return max(1, min(MAX_INNER, math.ceil(self.target_us / max(once_us, 1e-3))))

    def _cpu(self, fn) -> float:
        t0 = time.perf_counter_ns()
        for _ in range(self.warmup):
            fn()
        inner = self._inner((time.perf_counter_ns() - t0) / 1e3 / self.warmup)
        samples = []
        for _ in range(self.repeats):
            t0 = time.perf_counter_ns()
            for _ in range(inner):
                fn()
            samples.append((time.perf_counter_ns() - t0) / 1e3 / inner)
        return _positive(statistics.median(samples))

    def _cuda(self, op: str, fn) -> float:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):          # warm up off the default stream, as capture wants
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(self.warmup):
                fn()
            end.record()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        inner = self._inner(start.elapsed_time(end) * 1e3 / self.warmup)
        region = None
        if self.cuda_graphs:
            try:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    for _ in range(inner):
                        fn()
                graph.replay()
                torch.cuda.synchronize()
                region = graph.replay
            except RuntimeError:
                torch.cuda.synchronize()
                self.eager_ops.add(op)
        if region is None:
            def region():
                for _ in range(inner):
                    fn()
        samples = []
        for _ in range(self.repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            region()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e3 / inner)
        return _positive(statistics.median(samples))

    def _graphs_work(self) -> bool:
        """Whether this device can capture and replay a small matmul (else time eagerly)."""
        try:
            a = torch.ones(64, 64, device=self.device, dtype=torch.bfloat16)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                a @ a
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                a @ a
            graph.replay()
            torch.cuda.synchronize()
            return True
        except RuntimeError:
            torch.cuda.synchronize()
            return False


def _positive(us: float) -> float:
    if not (us > 0 and math.isfinite(us)):
        raise RuntimeError(f"a timed region measured {us!r} µs; the timer cannot resolve it")
    return us
