"""Ranks given the very same graph are simulated once, with exactly the per-rank result.

``SystemSimulator.run([g] * N)`` (and ``python -m astrasim`` on byte-identical rank files)
takes a lockstep path; wherever lockstep could differ from the per-rank run (a collective on a
sub-group, members that finish apart, send/recv, a shared remote memory, any error) it falls
back, so the result and the error are always those of ``run`` on distinct copies.
"""
from __future__ import annotations

import copy
import random

import pytest
from hypothesis import given, settings, strategies as st

from astrasim import (Node, NodeType, RemoteMemoryConfig, SystemConfig, SystemSimulator,
                      analytical_network_from_link, read_workload, write_workload)
from astrasim.errors import AstraSimError
import astrasim.system.simulator as simulator_module

N = NodeType


def graph(seed: int, pg_names: list) -> list:
    """Compute and collective nodes with random dependencies (one rank's graph)."""
    rng = random.Random(seed)
    nodes = []
    for i in range(rng.randint(1, 14)):
        deps = sorted(rng.sample(range(i), k=min(i, rng.randint(0, 2))))
        if rng.random() < 0.45:
            nodes.append(Node.make(i, N.COMM_COLL_NODE, comm_type=rng.choice([0, 2, 6, 7]),
                                   comm_size=rng.choice([1 << 10, 1 << 20, 3 << 20]), is_cpu_op=False,
                                   pg_name=rng.choice(pg_names), data_deps=deps))
        else:
            nodes.append(Node.make(i, N.COMP_NODE, duration_micros=rng.randint(0, 50),
                                   is_cpu_op=rng.random() < 0.2, data_deps=deps))
    return nodes


def outcome(f):
    try:
        return f()
    except AstraSimError as e:
        return type(e).__name__, str(e)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(["Ring", "Switch", "FullyConnected"]),
       st.sampled_from([2, 3, 4]), st.integers(1, 4))
def test_identical_ranks_equal_distinct_copies(seed, topo, ranks, splits):
    rng = random.Random(seed)
    everyone = list(range(ranks))
    rng.shuffle(everyone)                      # a group of every NPU, listed in any order
    groups = {1: everyone, 2: everyone[:-1]}   # ... and a sub-group (non-members fail)
    sim = SystemSimulator(analytical_network_from_link(topo, ranks, 50.0, 700.0),
                          SystemConfig(preferred_dataset_splits=splits), groups)
    g = graph(seed, ["", "0", "1", "1", "2"] if rng.random() < 0.3 else ["", "0", "1"])
    shared = outcome(lambda: sim.run([g] * ranks))
    distinct = outcome(lambda: sim.run([copy.deepcopy(g) for _ in range(ranks)]))
    assert shared == distinct


class _Counting:
    """Records how many ranks each Run was built with."""

    def __init__(self, monkeypatch):
        self.sizes = []
        real = simulator_module.Run

        def run(per_rank, *a, **k):
            self.sizes.append(len(per_rank))
            return real(per_rank, *a, **k)
        monkeypatch.setattr(simulator_module, "Run", run)


def _ar(i, pg="", deps=()):
    return Node.make(i, N.COMM_COLL_NODE, comm_type=0, comm_size=1 << 20, is_cpu_op=False,
                     pg_name=pg, data_deps=list(deps))


def test_lockstep_is_taken_and_falls_back_where_it_must(monkeypatch):
    sim = SystemSimulator(analytical_network_from_link("Switch", 4, 100.0, 500.0),
                          SystemConfig(preferred_dataset_splits=1), {1: [3, 1, 0, 2], 2: [0, 1]})
    count = _Counting(monkeypatch)
    g = [Node.make(0, N.COMP_NODE, duration_micros=10, is_cpu_op=False), _ar(1, "1", [0]), _ar(2, "", [1])]
    res = sim.run([g] * 4)
    assert count.sizes == [1]                       # one lockstep rank stood for all four
    assert res == sim.run([copy.deepcopy(g) for _ in range(4)])
    count.sizes.clear()
    with pytest.raises(AstraSimError, match="rank 2 node 0: rank is not a member of group 2"):
        sim.run([[_ar(0, "2")]] * 4)                # sub-group: ranks 2, 3 fail in run() ...
    assert count.sizes == [1, 4]                    # ... so lockstep falls back
    count.sizes.clear()
    send = Node.make(0, N.COMM_SEND_NODE, comm_src=0, comm_dst=1, comm_size=8, is_cpu_op=False)
    with pytest.raises(AstraSimError):
        sim.run([[send]] * 4)                        # send/recv never runs in lockstep
    assert count.sizes == [1, 4]


def test_shared_remote_memory_is_never_lockstep(monkeypatch):
    mem = RemoteMemoryConfig("MEMORY_POOL", 500, 100.0)
    sim = SystemSimulator(analytical_network_from_link("Switch", 2, 100.0, 500.0), remote_memory=mem)
    count = _Counting(monkeypatch)
    g = [Node.make(0, N.COMP_NODE, duration_micros=10, is_cpu_op=False)]
    sim.run([g] * 2)
    assert count.sizes == [2]


def test_identical_files_are_decoded_once(tmp_path):
    g = [Node.make(0, N.COMP_NODE, duration_micros=10, is_cpu_op=False), _ar(1, "", [0])]
    other = [Node.make(0, N.COMP_NODE, duration_micros=11, is_cpu_op=False), _ar(1, "", [0])]
    write_workload(tmp_path / "w", [g, g, other])
    w = read_workload(tmp_path / "w", 3, share_identical=True)
    assert w[0] is w[1] and w[2] is not w[0]
    assert w[0] == g and w[2] == other
    plain = read_workload(tmp_path / "w", 3)
    assert plain[0] is not plain[1] and plain == w


def test_members_finishing_apart_fall_back(monkeypatch):
    """No shipped network makes the members of an every-NPU collective finish apart when they
    start together, so a planner that does stands in for one: lockstep must not be used."""
    sim = SystemSimulator(analytical_network_from_link("Switch", 2, 100.0, 500.0))
    monkeypatch.setattr(sim.planner, "collective_finish", lambda *a, **k: (1000, 3000))
    monkeypatch.setattr(sim.planner, "collective_ns", lambda *a, **k: 3000)
    count = _Counting(monkeypatch)
    res = sim.run([[_ar(0)]] * 2)
    assert count.sizes == [1, 2]
    assert res.finish_ns == [1000, 3000]
