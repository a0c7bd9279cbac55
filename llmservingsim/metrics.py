"""The time series and the optional per-step trace, fed by each instance's steps and by
samples of its state.

What a timeseries row means (docs/outputs.md, timeseries.csv). Row b of an instance covers
[t, t + w) with t = b * w, w the interval (``timeseries_interval_s``: 1 s unless the run is
long). Two kinds of column, never mixed:

- **interval totals** over [t, t + w): tokens of the steps that *end* in it (when their tokens
  exist) and busy time, split exactly across interval boundaries;
- **state at t**: running and waiting requests and KV blocks in use, as they are after every
  event at a time <= t (a gauge read at t, like vLLM's ``num_requests_running``).

Hence the invariant the tests check: a non-empty running list always has a step in flight
(the engine launches one whenever it has running work), so ``running > 0`` at t implies busy
time > 0 in [t, t + w).

Cost is proportional to engine events, never to simulated seconds (a tool gap of 1e18 ns is
one idle stretch, not 1e9 rows of state):

- totals are kept per instance only for the whole seconds that saw a step (sparse lists,
  appended in time order because an instance's steps are sequential);
- the state is sampled at whole-second points through the event loop's ``watch``: just before
  the clock passes a second boundary, every instance that has ever stepped is read once and a
  run (first second, state) is appended only when the state changed. An idle stretch with no
  event is one call however many seconds it spans. An instance that never stepped is idle and
  empty throughout, so it is not read at all. Fast-forwarded steps (no events) sample their
  own instance at each bulk step's start, where the step-by-step loop's state would be.
- ``rows`` expands these at the chosen interval: at most ``MAX_BINS_PER_INSTANCE`` rows per
  instance and about ``MAX_ROWS`` rows in all.
"""
from __future__ import annotations

from bisect import bisect_left
from typing import Optional

NS_PER_S = 1_000_000_000
# timeseries.csv stays bounded: a run longer than this many intervals of 1 s gets a coarser
# interval (27.8 h of simulated time at 1 s per row), and many instances share a total budget
MAX_BINS_PER_INSTANCE = 100_000
MAX_ROWS = 1_000_000
_IDLE = (0, 0, 0.0, 0)          # (running, waiting, kv utilisation, KV blocks in use)


def timeseries_interval_s(end_ns: int, num_instances: int = 1) -> int:
    """The timeseries interval in whole seconds: the smallest of 1, 2, 5, 10, 20, 50, ...
    that gives at most ``min(MAX_BINS_PER_INSTANCE, MAX_ROWS // num_instances)`` rows per
    instance (at least one) for a run ending at ``end_ns``. 1 for every run shorter than
    that many seconds, so ordinary runs keep one row per second."""
    cap = max(1, min(MAX_BINS_PER_INSTANCE, MAX_ROWS // max(num_instances, 1)))
    seconds = end_ns // NS_PER_S            # rows at interval k: seconds // k + 1
    mag = 1
    while True:
        for m in (1, 2, 5):
            if seconds // (m * mag) + 1 <= cap:
                return m * mag
        mag *= 10


class _Series:
    """One instance's totals (sparse, by whole second) and sampled state (runs).

    Invariants: ``bins`` is strictly increasing and ``prompt``/``gen``/``busy_ns`` are
    parallel to it; ``run_bins`` is strictly increasing, starts at 0, and ``run_states[j]``
    is the state at every whole second from ``run_bins[j]`` up to the next run (consecutive
    runs differ); seconds before ``next_bin`` have been sampled."""
    __slots__ = ("inst", "bins", "prompt", "gen", "busy_ns", "run_bins", "run_states", "next_bin")

    def __init__(self) -> None:
        self.inst = None                    # set at the instance's first step
        self.bins: list = []
        self.prompt: list = []
        self.gen: list = []
        self.busy_ns: list = []
        self.run_bins: list = [0]
        self.run_states: list = [_IDLE]
        self.next_bin = 0

    def open(self, b: int) -> None:
        """Start second ``b`` (after every second already held: steps come in time order)."""
        if self.bins and self.bins[-1] >= b:
            raise RuntimeError(f"metrics: second {b} recorded after second {self.bins[-1]}")
        self.bins.append(b)
        self.prompt.append(0)
        self.gen.append(0)
        self.busy_ns.append(0)

    def split_busy(self, now: int, end: int) -> None:
        """Busy time [now, end), which crosses a second boundary, split exactly at the
        boundaries (the second of ``now`` is the last one held)."""
        t = now
        for b in range(now // NS_PER_S, end // NS_PER_S + 1):
            if self.bins[-1] != b:
                self.open(b)
            edge = min(end, (b + 1) * NS_PER_S)
            self.busy_ns[-1] += edge - t
            t = edge

    def sample(self, upto_bin: int) -> None:
        """The instance's current state holds at the seconds ``next_bin .. upto_bin - 1``."""
        inst = self.inst
        sched = inst.scheduler
        pool = inst.kv.pool
        state = (len(sched.running), len(sched.waiting), pool.usage(), pool.num_usable - pool.num_free)
        if state != self.run_states[-1]:
            if self.run_bins[-1] == self.next_bin:      # nothing sampled since that run began
                self.run_states[-1] = state
                if len(self.run_states) > 1 and self.run_states[-2] == state:
                    self.run_bins.pop()
                    self.run_states.pop()
            else:
                self.run_bins.append(self.next_bin)
                self.run_states.append(state)
        self.next_bin = upto_bin


class MetricsCollector:
    def __init__(self, num_instances: int, trace: bool = False):
        self.series = [_Series() for _ in range(num_instances)]
        self._stepped: list[_Series] = []       # series of the instances that have stepped
        self._loop = None
        self.trace_rows: Optional[list] = [] if trace else None
        self.prompt_tokens = 0
        self.gen_tokens = 0
        # where busy time went, over all steps: profiled compute, exposed communication, overhead
        self.compute_ns = 0
        self.comm_ns = 0
        self.overhead_ns = 0

    def on_step(self, inst, out, now: int, timing) -> None:
        nseq = len(out.scheduled)
        self._record(inst, now, timing, out.prefill_tokens, out.num_sampled, nseq - out.num_decodes,
                     out.num_decodes, nseq)

    def on_decode_steps(self, inst, times: list, lo: int, hi: int, n: int) -> int:
        """Fast-forwarded steps ``times[lo:hi]`` (each ``(start, timing)``, in time order, back
        to back: each starts where the one before it ends, as fast_forward's runs do) of n
        decodes each, each sampling one token: exactly what ``on_step`` records for such a
        step, with the instance's state sampled at each step's start (no event marks it, so
        the event loop's watcher does not), ``inst.num_steps`` already counting all of them
        (step k's trace index is ``num_steps - (hi - k)``).

        Returns the latest start a next call's first step may have without a sample. The
        caller keeps every start but the last at or before what the previous call returned
        (fast_forward splits its bulk steps there), so only the last step may sample, with
        the instance's state as it is now. The instance has stepped before (a fast-forward
        follows an executed step), so its series is open.

        Busy time and tokens go to the seconds as ``_record`` puts them, step by step, but a
        second's steps are added at once: the steps from k that start in second b, all but
        the last of them ending in it too (the next one starts where each ends), add their
        span ``start(m - 1) - start(k)`` and n tokens each to b; the last one, which may cross
        into the next seconds, is recorded as ``_record`` does."""
        s = self.series[inst.index]
        upto = -(-times[hi - 1][0] // NS_PER_S)
        if s.next_bin < upto:
            s.sample(upto)
        bins, busy, gen = s.bins, s.busy_ns, s.gen
        rows = self.trace_rows
        if rows is not None:
            step = inst.num_steps - (hi - lo)
            idx = inst.index
            for k in range(lo, hi):
                now, timing = times[k]
                rows.append((idx, step, now, timing.total_ns, 0, 0, n, n, timing.compute_ns, timing.comm_ns,
                             timing.overhead_ns))
                step += 1
        compute = comm = overhead = 0
        for k in range(lo, hi):
            timing = times[k][1]
            compute += timing.compute_ns
            comm += timing.comm_ns
            overhead += timing.overhead_ns
        k = lo
        while k < hi:
            now = times[k][0]
            b0 = now // NS_PER_S
            if bins[-1] != b0:
                s.open(b0)
            # times[k:m] start in second b0 (times[m] is the first start past it, or hi)
            m = bisect_left(times, ((b0 + 1) * NS_PER_S,), k + 1, hi)
            if m - 1 > k:       # times[k:m - 1] end inside b0: their span, n tokens each
                busy[-1] += times[m - 1][0] - now
                gen[-1] += n * (m - 1 - k)
                now = times[m - 1][0]
            total = times[m - 1][1].total_ns
            end = now + total
            if b0 == end // NS_PER_S:
                busy[-1] += total
            else:
                s.split_busy(now, end)
            gen[-1] += n
            k = m
        self.gen_tokens += n * (hi - lo)
        self.compute_ns += compute
        self.comm_ns += comm
        self.overhead_ns += overhead
        return s.next_bin * NS_PER_S     # a start t samples when ceil(t / 1 s) > next_bin

    def _first_step(self, s: _Series, inst, now: int) -> None:
        """Start sampling an instance: until ``now`` it was idle and empty (a call reaching an
        idle instance starts a step at once, and KV entries exist only where calls ran)."""
        s.inst = inst
        s.next_bin = -(-now // NS_PER_S)
        self._stepped.append(s)
        if self._loop is None:
            self._loop = inst.loop
            self._loop.watch(self._sample_all, self._stepped[0].next_bin * NS_PER_S)

    def _sample_all(self, next_ns: int) -> float:
        """Event-loop watcher: the clock is about to reach ``next_ns``; every whole second
        before it sees the current state. Returns the next second boundary to watch."""
        upto = -(-next_ns // NS_PER_S)
        for s in self._stepped:
            if s.next_bin < upto:
                s.sample(upto)
        return upto * NS_PER_S

    def _record(self, inst, now, timing, prompt, gen, npf, nd, nseq) -> None:
        s = self.series[inst.index]
        if s.inst is None:
            self._first_step(s, inst, now)
        end = now + timing.total_ns
        b0, b1 = now // NS_PER_S, end // NS_PER_S
        bins = s.bins
        if not bins or bins[-1] != b0:
            s.open(b0)
        if b0 == b1:
            s.busy_ns[-1] += end - now
        else:
            s.split_busy(now, end)
        s.prompt[-1] += prompt
        s.gen[-1] += gen
        self.prompt_tokens += prompt
        self.gen_tokens += gen
        self.compute_ns += timing.compute_ns
        self.comm_ns += timing.comm_ns
        self.overhead_ns += timing.overhead_ns
        if self.trace_rows is not None:
            self.trace_rows.append((inst.index, inst.num_steps - 1, now, timing.total_ns, npf, prompt, nd,
                                    nseq, timing.compute_ns, timing.comm_ns, timing.overhead_ns))

    def interval_s(self, end_ns: int) -> int:
        """The interval ``rows`` uses for a run ending at ``end_ns``."""
        return timeseries_interval_s(end_ns, len(self.series))

    def rows(self, end_ns: int, block_bytes: int, weight_bytes_per_gpu: int, power_model) -> list[dict]:
        """One row per interval (``interval_s``) per instance, up to ``end_ns``; at interval
        1 s, one row per simulated second. Call after the run: the final state holds from the
        last sample on. ``memory_used_gib`` is per GPU of the instance: its weights plus the
        KV blocks in use (blocks and their bytes are per rank; every rank of an instance
        holds the same share). Token columns are per second: the interval's tokens / w (an
        integer count at w = 1 s). ``block_bytes``, ``weight_bytes_per_gpu`` and
        ``power_model`` may be lists, one per instance (a heterogeneous cluster)."""
        k = self.interval_s(end_ns)
        width = k * NS_PER_S
        nrows = end_ns // width + 1
        rows = []
        gib = float(1 << 30)
        per = isinstance(power_model, list)
        all_blocks, all_weights, all_power = block_bytes, weight_bytes_per_gpu, power_model
        for i, s in enumerate(self.series):
            if per:
                block_bytes, weight_bytes_per_gpu, power_model = all_blocks[i], all_weights[i], all_power[i]
            if s.inst is not None:      # the state after the last event holds from here on
                s.sample(s.next_bin)
            a, na = 0, len(s.bins)
            r, nr = 0, len(s.run_bins)
            for b in range(nrows):
                lo = b * k                  # first whole second of the row
                hi = lo + k
                while r + 1 < nr and s.run_bins[r + 1] <= lo:
                    r += 1
                running, waiting, util, used = s.run_states[r]
                prompt = gen = busy = 0
                while a < na and s.bins[a] < hi:
                    prompt += s.prompt[a]
                    gen += s.gen[a]
                    busy += s.busy_ns[a]
                    a += 1
                span = min(width, end_ns - b * width) if b == nrows - 1 else width
                frac = min(busy / span if span > 0 else 0.0, 1.0)
                rows.append({
                    "time_s": b * k, "instance": i, "running": running, "waiting": waiting,
                    "kv_utilization": round(util, 6),
                    "memory_used_gib": round((weight_bytes_per_gpu + used * block_bytes) / gib, 6),
                    "prompt_tokens_per_s": prompt if k == 1 else round(prompt / k, 6),
                    "generation_tokens_per_s": gen if k == 1 else round(gen / k, 6),
                    "busy_fraction": round(frac, 6),
                    "power_w": round(power_model.power_w(frac), 3),
                })
        return rows
