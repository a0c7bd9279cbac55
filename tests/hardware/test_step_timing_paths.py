"""The step timer's shortcuts give the plain formulas' floats exactly.

- ``GridND.line`` (a mixed step reads attention at two decode KV lengths with the leading
  axes' brackets shared) against the multilinear formula written out corner by corner;
- ``PerformanceModel._alpha_of`` (the skew fit's fixed labels looked up once) against the
  profiler's bucket lookup done in full for each batch;
- ``GridND.at_row`` (the decode grid read at one batch size) against ``along``;
- ``WeightedSum`` (a profile's dense ops summed with one bracket for tables on one x grid)
  against ``sum(mult * table(x))``;
- ``StepTimer.time_shape`` of a pure-decode shape (delegated to ``time_decode``) against
  its parts computed from the general formula.
"""
from __future__ import annotations

import bisect

from hypothesis import example, given, settings, strategies as st

from llmservingsim.interp import GridND, Table1D, WeightedSum, bracket
from llmservingsim.perf_model import BatchShape
from llmservingsim.paths import examples_dir
from program_layer.config import load_config
from program_layer.run import build_simulation


def _corner_sum(grid: GridND, point) -> float:
    """The multilinear value at ``point``: every corner of the bracketing cell, the axes'
    weights multiplied in axis order, summed in corner order (bit k = axis k)."""
    idx, wts = zip(*(bracket(a, x) for a, x in zip(grid.axes, point)))
    total = 0.0
    for corner in range(1 << len(point)):
        weight, v = 1.0, grid._nested
        for k in range(len(point)):
            if corner >> k & 1:
                weight *= wts[k]
                v = v[idx[k] + 1 if len(grid.axes[k]) > 1 else idx[k]]
            else:
                weight *= 1.0 - wts[k]
                v = v[idx[k]]
        if weight:
            total += weight * v
    return total


@st.composite
def _grid_and_points(draw):
    d = draw(st.integers(1, 4))
    sizes = [draw(st.integers(1, 4)) for _ in range(d)]
    axes = [sorted(draw(st.sets(st.integers(0, 5000), min_size=n, max_size=n))) for n in sizes]

    def values(depth):
        if depth == d:
            return draw(st.floats(-1e4, 1e4, allow_nan=False))
        return [values(depth + 1) for _ in axes[depth]]
    grid = GridND(axes, values(0))
    coord = st.floats(-100, 6000, allow_nan=False)
    lead = [draw(coord) for _ in range(d - 1)]
    lasts = draw(st.lists(coord, min_size=1, max_size=3))
    return grid, lead, lasts


@settings(max_examples=300, deadline=None)
@given(_grid_and_points())
def test_grid_line_is_the_corner_sum(case):
    grid, lead, lasts = case
    at = grid.line(*lead)
    for x in lasts:
        assert at(x) == _corner_sum(grid, (*lead, x))
        if len(grid.axes) != 2:
            assert grid(*lead, x) == _corner_sum(grid, (*lead, x))


@settings(max_examples=300, deadline=None)
@given(_grid_and_points())
def test_grid_at_row_is_along(case):
    """GridND.at_row (the decode grid's row fixed once, bracket and along written out) gives
    along's floats; 2-D grids only (the decode grid's shape)."""
    grid, lead, lasts = case
    if len(grid.axes) != 2:
        return
    at = grid.at_row(lead[0])
    row = grid.row(lead[0])
    for x in lasts:
        assert at(x) == grid.along(row, x)


def _label(bins, labels, x):
    i = max(bisect.bisect_left(bins, x) - 1, 0)
    return labels[min(i, len(labels) - 1)] if labels else None


def _alpha_in_full(sk, prefill_tokens, nd, mean_kv, kv_min, kv_max, prefill_ctx) -> float:
    pc = float(prefill_tokens)
    if pc not in sk.pc_set:
        return sk.alpha_default
    rate = (mean_kv - kv_min) / (kv_max - kv_min)
    key = (pc, _label(sk.n_bins, sk.n_labels, nd), _label(sk.sr_bins, sk.sr_labels, rate),
           _label(sk.kvb_bins, sk.kvb_labels, kv_max), _label(sk.kp_bins, sk.kp_labels, prefill_ctx))
    return sk.table.get(key, sk.alpha_default)


_SIM = {}


def _timer():
    if "t" not in _SIM:
        cfg = load_config(examples_dir() / "validation" / "RTXPRO6000-Llama-3.1-8B-sharegpt300-sps10.yaml")
        sim = build_simulation(cfg)
        _SIM["t"] = sim.cluster.instances[0].timer
    return _SIM["t"]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_alpha_of_is_the_full_bucket_lookup(data):
    perf = _timer().perf
    sk = perf.bundle.skew
    assert sk is not None and sk.table
    pcs = sorted(sk.pc_set)
    pt = data.draw(st.one_of(st.sampled_from(pcs), st.integers(0, 5000)).map(int))
    nd = data.draw(st.integers(2, 300))
    kv_min = data.draw(st.integers(1, 50_000))
    kv_max = kv_min + data.draw(st.integers(1, 100_000))
    kv_sum = data.draw(st.integers(kv_min * (nd - 1) + kv_max, kv_min + kv_max * (nd - 1)))
    pctx = data.draw(st.one_of(st.just(0.0), st.floats(0, 100_000)))
    mean = kv_sum / nd
    rate = (mean - kv_min) / (kv_max - kv_min)
    assert perf._alpha_of(pt, nd, pctx)(rate, kv_max) == _alpha_in_full(sk, pt, nd, mean, kv_min, kv_max, pctx)


@settings(max_examples=200, deadline=None)
@given(nd=st.integers(1, 300), kv_min=st.integers(1, 50_000), spread=st.integers(0, 50_000), data=st.data())
def test_pure_decode_time_shape_is_the_general_formula(nd, kv_min, spread, data):
    """time_shape delegates a pure-decode shape to time_decode (comm and overhead kept per
    batch size); the general formula's parts give the same integers."""
    timer = _timer()
    kv_max = kv_min + (spread if nd > 1 else 0)
    kv_sum = data.draw(st.integers(kv_min * (nd - 1) + kv_max, kv_min + kv_max * (nd - 1))) if nd > 1 else kv_min
    shape = BatchShape(0, 0.0, 0, nd, kv_sum, kv_max, kv_min)
    t = timer.time_shape(shape)
    compute_us = timer.perf.compute_us(shape)
    compute = round(compute_us * 1000.0)
    overhead = round(timer.framework.us(0, 0, nd, compute_us) * 1000.0)
    comm = timer.comm.exposed_comm_ns(shape) if timer.comm is not None else 0
    assert (t.compute_ns, t.comm_ns, t.overhead_ns) == (compute, comm, overhead)
    assert t.total_ns == max(compute + comm + overhead, 1000)


def _timers():
    """Step timers of bundles with different skew fits: the dev cell's (a bucket table),
    the 70B TP2 cell's (measured by the artifact) and the B200 8B cell's."""
    if "all" not in _SIM:
        out = [_timer()]
        for cell in ("rtx-70b-tp2-swebench-0.02jps.yaml", "b200-8b-tp1-swebench-0.02jps.yaml"):
            sim = build_simulation(load_config(examples_dir() / "cells" / cell))
            out.append(sim.cluster.instances[0].timer)
        _SIM["all"] = out
    return _SIM["all"]


@settings(max_examples=200, deadline=None)
@given(which=st.integers(0, 2), nd=st.integers(1, 300), kv_min=st.integers(1, 40_000),
       spread=st.integers(0, 40_000), steps=st.integers(1, 40), data=st.data())
def test_decode_stretch_is_time_decode_step_by_step(which, nd, kv_min, spread, steps, data):
    """Fast-forward's run of decode steps (every sequence one token longer each step) gives
    the integers time_decode gives step by step, and the compute floats decode_us gives."""
    timer = _timers()[which]
    kv_max = kv_min + (spread if nd > 1 else 0)
    kv_sum = data.draw(st.integers(kv_min * (nd - 1) + kv_max, kv_min + kv_max * (nd - 1))) if nd > 1 else kv_min
    stretch = timer.decode_stretch(nd, kv_sum, kv_max, kv_min)
    floats = timer.perf.decode_stretch(nd, kv_sum, kv_max, kv_min)
    for j in range(steps):
        args = (nd, kv_sum + nd * j, kv_max + j, kv_min + j)
        assert next(stretch) == timer.time_decode(*args)
        assert next(floats) == timer.perf.decode_us(*args)



def test_decode_stretch_at_spread_rate_edges():
    """Batches whose spread rate (mean - min) / (max - min) is a skew-fit bin edge in exact
    arithmetic, where the float rate falls on either side of the edge from step to step (the
    mean's rounding error moves as the lengths grow): the run's kept label interval gives
    decode_us's value at every step. The cases are found by search, so they exist."""
    steps = 30
    cases = []
    for edge_num, den in ((1, 20), (3, 20), (2, 5), (7, 10)):       # the fits' inner edges
        edge = edge_num / den
        for spread in (1, 2, 3, 7, 13, 29):
            for scale in (1, 3, 7):
                nd = den * scale
                extra = edge_num * scale * spread      # sum - nd * min: rate = edge exactly
                if not spread <= extra <= spread * (nd - 1):
                    continue
                for kv_min in range(1000, 200_000, 997):
                    kv_sum = nd * kv_min + extra
                    rates = [((kv_sum + nd * j) / nd - (kv_min + j)) / spread for j in range(steps)]
                    if min(rates) <= edge < max(rates) or min(rates) < edge <= max(rates):
                        cases.append((nd, kv_sum, kv_min + spread, kv_min))
    assert len(cases) >= 10
    for timer in _timers():
        for nd, kv_sum, kv_max, kv_min in cases:
            floats = timer.perf.decode_stretch(nd, kv_sum, kv_max, kv_min)
            for j in range(steps):
                assert next(floats) == timer.perf.decode_us(nd, kv_sum + nd * j, kv_max + j, kv_min + j)


@st.composite
def _weighted_tables(draw):
    """Tables on one shared x grid (the dense ops' case), or, sometimes, one table on a grid of
    its own or clamped differently (the general path)."""
    xs = sorted(draw(st.sets(st.integers(0, 5000), min_size=1, max_size=6)))
    clamp = draw(st.booleans())
    ys = st.floats(-1e4, 1e4, allow_nan=False)
    terms = [(draw(st.sampled_from([1, 2, 80, 160, 0.5])),
              Table1D(xs, [draw(ys) for _ in xs], clamp=clamp)) for _ in range(draw(st.integers(1, 9)))]
    if draw(st.booleans()):
        odd = sorted(draw(st.sets(st.integers(0, 5000), min_size=1, max_size=6)))
        terms.insert(draw(st.integers(0, len(terms))),
                     (2, Table1D(odd, [draw(ys) for _ in odd], clamp=draw(st.booleans()))))
    # points on the grid (where bracket and clamping meet) and anywhere, below and above it
    points = draw(st.lists(st.sampled_from(xs) | st.integers(-100, 6000) | st.floats(-100, 6000, allow_nan=False),
                           min_size=1, max_size=4))
    return terms, points


@settings(max_examples=300, deadline=None)
@given(_weighted_tables())
# at a clamped table's last point the end value is not the interpolation's a + 1.0 * (b - a)
@example(([(1, Table1D([0, 10], [8028.5491522296725, -9388.200339328929], clamp=True))], [10]))
def test_weighted_sum_is_the_sum_of_tables(case):
    terms, points = case
    fast = WeightedSum(terms)
    for x in points:
        assert fast(x) == sum(mult * table(x) for mult, table in terms)


@st.composite
def _row_and_points(draw):
    """A 2-D grid (the decode grid's shape; a 1-point last axis too), a row and points on
    the grid's last axis, between, below and above its points."""
    axes = [sorted(draw(st.sets(st.integers(0, 5000), min_size=n, max_size=n)))
            for n in (draw(st.integers(1, 3)), draw(st.integers(1, 5)))]
    vals = st.floats(-1e4, 1e4, allow_nan=False)
    grid = GridND(axes, [[draw(vals) for _ in axes[1]] for _ in axes[0]])
    row = grid.row(draw(st.floats(-100, 6000, allow_nan=False)))
    points = draw(st.lists(st.sampled_from(axes[1]) | st.integers(-100, 6000)
                           | st.floats(-100, 6000, allow_nan=False), min_size=1, max_size=6))
    return grid, row, points


@settings(max_examples=400, deadline=None)
@given(_row_and_points())
# below the first point: along's -0.0 (l = -0.0 + 0.0 * -5.0, then w * (h - l) = -0.0)
@example((GridND([[0, 1], [10, 20]], [[-0.0, -5.0], [-3.0, 1.0]]), (0.0, [-0.0, -5.0], [-3.0, 1.0]),
          [3, 10, 10.0, 25]))
def test_row_piece_formula_is_along(case):
    """GridND.row_piece: x lies in its piece, and the piece's formula gives along's float at
    x and at every other point of the piece (a decode run evaluates it while x stays in)."""
    grid, row, points = case
    w = row[0]
    for x in points:
        lo, hi, a, span, p0, d0, p1, d1 = grid.row_piece(row, x)
        assert lo <= x < hi
        for y in points:
            if lo <= y < hi:
                u = (y - a) / span
                low = p0 + u * d0
                value = low + w * ((p1 + u * d1) - low)
                assert value == grid.along(row, y) and str(value) == str(grid.along(row, y))


def test_decode_stretch_across_grid_points():
    """Runs whose mean or longest KV length crosses the decode grid's points (a new piece of
    the row), starts below the grid's first point (the clamped piece) and past its last (the
    extrapolated one) give decode_us's floats at every step."""
    steps = 24
    for timer in _timers():
        perf = timer.perf
        kvs = perf.bundle.attention.decode.axes[1]
        starts = [1, 2, int(kvs[0]) - 3, int(kvs[-1]) - 5, int(kvs[-1]) + 7]
        starts += [int(k) - d for k in kvs[1:] for d in (1, 11)]
        for nd in (1, 2, 5, 37):
            for kv_min in starts:
                for spread in ((0,) if nd == 1 else (0, 1, 9, 300)):
                    kv_max = kv_min + spread
                    # the mean near the low end, the middle and the high end of the range
                    for kv_sum in {kv_min * (nd - 1) + kv_max, (kv_min + kv_max) * nd // 2,
                                   kv_min + kv_max * (nd - 1)}:
                        floats = perf.decode_stretch(nd, kv_sum, kv_max, kv_min)
                        for j in range(steps):
                            assert next(floats) == perf.decode_us(nd, kv_sum + nd * j, kv_max + j, kv_min + j)


def test_line_head_memo_is_the_corner_sum(monkeypatch):
    """GridND.line's memo of the corners over the leading axes but the last: lines sharing
    those coordinates (a hit), with the memo emptied at its bound, give the corner sums."""
    import random
    rng = random.Random(7)
    axes = [[0, 16, 512, 2048], [0, 100, 1000], [1, 8, 64], [16, 256, 4096]]
    grid = GridND(axes, [[[[rng.uniform(-50, 50) for _ in axes[3]] for _ in axes[2]] for _ in axes[1]]
                         for _ in axes[0]])
    monkeypatch.setattr(GridND, "HEADS_MAX", 5)
    heads = [(rng.choice([0, 16, 100, 700, 3000]), rng.choice([0.0, 50.5, 1000.0, 5.0])) for _ in range(12)]
    for _ in range(300):
        lead = (*rng.choice(heads), rng.choice([1, 3, 8, 50, 100]))
        at = grid.line(*lead)
        for x in (rng.uniform(0, 5000), 16, 4096.0, 6000):
            assert at(x) == _corner_sum(grid, (*lead, x))
        assert len(grid._heads) <= 5


@settings(max_examples=300, deadline=None)
@given(which=st.integers(0, 2), pp=st.sampled_from([1, 2]), nd=st.integers(0, 60), npf=st.integers(0, 3),
       chunk=st.integers(0, 3000), data=st.data())
def test_time_of_an_output_is_time_shape_of_its_shape(which, pp, nd, npf, chunk, data):
    """StepTimer.time sends a pure-decode batch to time_decode from its tallies without
    building its shape: the timing is time_shape(shape_of(out))'s, for pure-decode, mixed
    and prefill-only batches (a prefill entry may schedule no token), with one pipeline
    stage and two; tallies the scheduler never makes (prefill tokens with no prefill entry)
    included."""
    from types import SimpleNamespace
    from llmservingsim.perf_model import PerformanceModel
    from llmservingsim.step_timer import StepTimer, shape_of
    if nd + npf == 0:
        return
    timer = _timers()[which]
    if pp != 1:
        timer = StepTimer(PerformanceModel(timer.perf.model, timer.perf.bundle, pp), timer.comm, timer.framework)
    if not npf and data.draw(st.booleans()):
        npf = -1        # prefill tokens, no prefill entry
    kv_min = data.draw(st.integers(1, 30_000))
    kv_max = kv_min + (data.draw(st.integers(0, 30_000)) if nd > 1 else 0)
    kv_sum = (data.draw(st.integers(kv_min * (nd - 1) + kv_max, kv_min + kv_max * (nd - 1)))
              if nd > 1 else kv_min * nd)
    out = SimpleNamespace(scheduled=[None] * (nd + max(npf, 0)), num_decodes=nd,
                          prefill_tokens=chunk if npf else 0,
                          prefill_ctx_sum=(chunk * data.draw(st.integers(0, 8000))) if npf else 0,
                          decode_kv_sum=kv_sum if nd else 0, decode_kv_max=kv_max if nd else 0,
                          decode_kv_min=kv_min if nd else 0)
    assert timer.time(out) == timer.time_shape(shape_of(out))


@settings(max_examples=150, deadline=None)
@given(which=st.integers(0, 2), nd=st.sampled_from([2, 3, 7, 16, 64]), data=st.data())
def test_decode_stretches_of_one_size_share_their_state(which, nd, data):
    """decode_stretch keeps its pieces, label intervals and alphas per batch size for the
    next run: runs of one size started anywhere, one after another and interleaved step by
    step (each a generator of its own), give decode_us's floats at every step."""
    from llmservingsim.perf_model import PerformanceModel
    base = _timers()[which].perf
    perf = PerformanceModel(base.model, base.bundle)     # its own per-size state
    kvs = [int(k) for k in base.bundle.attention.decode.axes[1]]
    near = st.sampled_from(kvs).flatmap(lambda k: st.integers(max(1, k - 12), k + 3))

    def run_args():
        kv_min = data.draw(near | st.integers(1, 70_000))
        kv_max = kv_min + data.draw(st.sampled_from([0, 1, 5]) | st.integers(0, 30_000))
        kv_sum = data.draw(st.integers(kv_min * (nd - 1) + kv_max, kv_min + kv_max * (nd - 1)))
        return [nd, kv_sum, kv_max, kv_min]
    runs = []
    for _ in range(data.draw(st.integers(2, 8))):
        args = run_args()
        runs.append((perf.decode_stretch(*args), args))
        # a few steps of some live run (the newest, or an older one)
        for _ in range(data.draw(st.integers(0, 30))):
            gen, args = runs[data.draw(st.integers(0, len(runs) - 1))]
            assert next(gen) == base.decode_us(*args)
            args[1] += nd
            args[2] += 1
            args[3] += 1
