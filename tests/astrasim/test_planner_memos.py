"""The planner's and the analytical network's size-free memos give the unmemoised values.

- ``AnalyticalNetwork.send_ns`` keeps each valid pair's ``(hops * latency, bytes per ns)``:
  every message equals the backend's formula ``floor(hops * L + size / B)`` computed afresh,
  and invalid pairs still raise;
- ``CollectivePlanner`` keeps the phase list of each (kind, involved dims): a planner asked
  many sizes, kinds, groups and involved dims in a random order answers each query as a fresh
  planner (no memo filled) does.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from astrasim import SystemConfig, SystemSimulator
from astrasim.config import parse_network
from astrasim.config.system import parse_implementation
from astrasim.errors import WorkloadError
from astrasim.network import AnalyticalNetwork
from astrasim.network.analytical import bandwidth_bytes_per_ns, dim_hops

TOPOLOGIES = ("Ring", "Switch", "FullyConnected")
KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")


@st.composite
def _networks(draw):
    d = draw(st.integers(1, 3))
    return {"topology": [draw(st.sampled_from(TOPOLOGIES)) for _ in range(d)],
            "npus_count": [draw(st.integers(1, 4)) for _ in range(d)],
            "bandwidth": [draw(st.floats(1.0, 900.0)) for _ in range(d)],
            "latency": [draw(st.floats(0.0, 5000.0)) for _ in range(d)]}


def _reference_send(spec: dict, src: int, dst: int, size: int) -> int:
    """The analytical backend's message time written out: the first dimension whose
    coordinates differ carries it."""
    a, b = src, dst
    for topo, n, bw, lat in zip(spec["topology"], spec["npus_count"], spec["bandwidth"], spec["latency"]):
        x, y = a % n, b % n
        if x != y:
            return int(dim_hops(topo, n, x, y) * float(lat) + float(size) / bandwidth_bytes_per_ns(bw))
        a //= n
        b //= n
    raise AssertionError("same NPU")


@settings(max_examples=150, deadline=None)
@given(_networks(), st.data())
def test_send_ns_memo_is_the_formula(spec, data):
    net = AnalyticalNetwork(parse_network(spec))
    n = net.npus_count
    for _ in range(12):
        src = data.draw(st.integers(-1, n))
        dst = data.draw(st.integers(-1, n))
        size = data.draw(st.integers(0, 1 << 34))
        if not (0 <= src < n and 0 <= dst < n) or src == dst:
            with pytest.raises(WorkloadError):
                net.send_ns(src, dst, size)
            continue
        assert net.send_ns(src, dst, size) == _reference_send(spec, src, dst, size)


def _simulator(spec: dict, algorithm: str, splits: int, active: int, opt: str) -> SystemSimulator:
    impl = parse_implementation(algorithm, "t", "k")
    dims = len(spec["topology"])
    cfg = SystemConfig(preferred_dataset_splits=splits, active_chunks_per_dimension=active,
                       collective_optimization=opt,
                       implementations={k: (impl,) * dims for k in KINDS})
    return SystemSimulator(AnalyticalNetwork(parse_network(spec)), cfg)


@settings(max_examples=80, deadline=None)
@given(_networks(), st.sampled_from(["ring", "direct", "oneRing"]), st.integers(1, 4), st.integers(1, 2),
       st.sampled_from(["baseline", "localBWAware"]), st.data())
def test_planner_memo_answers_as_a_fresh_planner(spec, algorithm, splits, active, opt, data):
    warm = _simulator(spec, algorithm, splits, active, opt).planner
    n = warm.network.npus_count
    dims = len(spec["topology"])
    for _ in range(8):
        kind = data.draw(st.sampled_from(KINDS))
        size = data.draw(st.integers(0, 1 << 26))
        involved = data.draw(st.none() | st.lists(st.booleans(), min_size=dims, max_size=dims))
        groups = st.none() | st.permutations(range(n)).map(list)
        if n >= 2:
            groups |= st.lists(st.integers(0, n - 1), min_size=2, max_size=n, unique=True)
        group = data.draw(groups)
        fresh = _simulator(spec, algorithm, splits, active, opt).planner
        assert (warm.collective_finish(kind, size, group, involved)
                == fresh.collective_finish(kind, size, group, involved))
        assert warm.collective_ns(kind, size, group, involved) == fresh.collective_ns(kind, size, group, involved)
