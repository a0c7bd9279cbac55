"""Execution-graph generator: one engine step -> per-rank Chakra graphs (issue 3).

Interim: communication is the analytical ring all-reduce of the device's network (two
Megatron-style all-reduces per layer of tokens x hidden x dtype bytes); replaced by the
system simulator's evaluation of the step graph.
"""
from __future__ import annotations

from .perf_model import BatchShape


class GraphCommModel:
    def __init__(self, model, device, tp: int, pp: int):
        self.model = model
        self.device = device
        self.tp = tp
        self.pp = pp
        self._memo: dict[int, int] = {}

    def exposed_comm_ns(self, shape: BatchShape) -> int:
        t = shape.num_tokens
        v = self._memo.get(t)
        if v is None:
            size = t * self.model.hidden_size * self.model.dtype_bytes
            per = self.device.allreduce_ns(size, self.tp) if self.tp > 1 else 0
            v = self._memo[t] = 2 * self.model.num_layers * per
        return v
