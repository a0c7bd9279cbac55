"""Per-second time series and the optional per-step trace, fed by each instance's steps.

Bins are whole simulated seconds. Token counts land in the bin where the step ends (when
its tokens exist); busy time is split exactly across bin boundaries; running / waiting /
KV utilisation are the values seen at the last step start inside the bin (carried forward
through idle seconds).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

NS_PER_S = 1_000_000_000


@dataclass
class _Series:
    prompt_tokens: list = field(default_factory=list)
    gen_tokens: list = field(default_factory=list)
    busy_ns: list = field(default_factory=list)
    running: list = field(default_factory=list)
    waiting: list = field(default_factory=list)
    kv_util: list = field(default_factory=list)
    kv_used_blocks: list = field(default_factory=list)

    def grow(self, n: int) -> None:
        while len(self.busy_ns) < n:
            self.prompt_tokens.append(0)
            self.gen_tokens.append(0)
            self.busy_ns.append(0)
            self.running.append(None)
            self.waiting.append(None)
            self.kv_util.append(None)
            self.kv_used_blocks.append(None)


class MetricsCollector:
    def __init__(self, num_instances: int, trace: bool = False):
        self.series = [_Series() for _ in range(num_instances)]
        self.trace_rows: Optional[list] = [] if trace else None
        self.prompt_tokens = 0
        self.gen_tokens = 0
        # where busy time went, over all steps: profiled compute, exposed communication, overhead
        self.compute_ns = 0
        self.comm_ns = 0
        self.overhead_ns = 0

    def on_step(self, inst, out, now: int, timing) -> None:
        prompt = gen = npf = nd = 0
        for sr in out.scheduled:
            if sr.num_new == 1 and sr.ctx_before > 0:
                nd += 1
            else:
                npf += 1
                prompt += sr.num_new
            if sr.samples:
                gen += 1
        self._record(inst, now, timing, prompt, gen, npf, nd, len(out.scheduled))

    def on_decode_step(self, inst, now: int, timing, n: int) -> None:
        """A fast-forwarded step: n decodes, each sampling one token."""
        self._record(inst, now, timing, 0, n, 0, n, n)

    def _record(self, inst, now, timing, prompt, gen, npf, nd, nseq) -> None:
        s = self.series[inst.index]
        end = now + timing.total_ns
        b0, b1 = now // NS_PER_S, end // NS_PER_S
        s.grow(b1 + 1)
        s.prompt_tokens[b1] += prompt
        s.gen_tokens[b1] += gen
        self.prompt_tokens += prompt
        self.gen_tokens += gen
        self.compute_ns += timing.compute_ns
        self.comm_ns += timing.comm_ns
        self.overhead_ns += timing.overhead_ns
        t = now
        for b in range(b0, b1 + 1):
            edge = min(end, (b + 1) * NS_PER_S)
            s.busy_ns[b] += edge - t
            t = edge
        sched = inst.scheduler
        pool = inst.kv.pool
        s.running[b0] = len(sched.running)
        s.waiting[b0] = len(sched.waiting)
        s.kv_util[b0] = pool.usage()
        s.kv_used_blocks[b0] = pool.num_usable - pool.num_free
        if self.trace_rows is not None:
            self.trace_rows.append((inst.index, inst.num_steps - 1, now, timing.total_ns, npf, prompt, nd,
                                    nseq, timing.compute_ns, timing.comm_ns, timing.overhead_ns))

    def rows(self, end_ns: int, block_bytes: int, weight_bytes_per_gpu: int, power_model) -> list[dict]:
        """One row per simulated second per instance, up to ``end_ns``. ``memory_used_gib`` is
        per GPU of the instance: its weights plus the KV blocks in use (blocks and their bytes
        are per rank; every rank of an instance holds the same share)."""
        nbins = end_ns // NS_PER_S + 1
        rows = []
        gib = float(1 << 30)
        for i, s in enumerate(self.series):
            s.grow(nbins)
            running = waiting = 0
            util = 0.0
            used = 0
            for b in range(nbins):
                if s.running[b] is not None:
                    running, waiting, util, used = s.running[b], s.waiting[b], s.kv_util[b], s.kv_used_blocks[b]
                busy = s.busy_ns[b]
                span = min(NS_PER_S, end_ns - b * NS_PER_S) if b == nbins - 1 else NS_PER_S
                frac = busy / span if span > 0 else 0.0
                rows.append({
                    "time_s": b, "instance": i, "running": running, "waiting": waiting,
                    "kv_utilization": round(util, 6),
                    "memory_used_gib": round((weight_bytes_per_gpu + used * block_bytes) / gib, 6),
                    "prompt_tokens_per_s": s.prompt_tokens[b], "generation_tokens_per_s": s.gen_tokens[b],
                    "busy_fraction": round(min(frac, 1.0), 6),
                    "power_w": round(power_model.power_w(min(frac, 1.0)), 3),
                })
        return rows
