"""Collective times equal independently written closed forms, to the nanosecond."""
from __future__ import annotations

import itertools

import pytest

from astrasim import NodeType, Node, SystemConfig, SystemSimulator, analytical_network_from_link
from astrasim.config.system import parse_implementation

from astrasim_closed_forms import chunk_time, collective_time

BW, LAT, MEM, E = 100.0, 1000.0, 1600.0, 10
CASES = list(itertools.product(("ring", "direct", "halvingDoubling"),
                               ("all-reduce", "all-gather", "reduce-scatter"),
                               ("Ring", "FullyConnected", "Switch"), (2, 4, 8, 16), (1, 4, 16)))


def make_sim(algo: str, topo: str, n: int, splits: int, bw=BW, lat=LAT) -> SystemSimulator:
    net = analytical_network_from_link(topo, n, bw, lat)
    impl = parse_implementation(algo, "test", "algo")
    sys_cfg = SystemConfig(preferred_dataset_splits=splits, local_mem_bw_gbs=MEM, endpoint_delay_ns=E,
                           implementations={k: (impl,) for k in ("all-reduce", "all-gather",
                                                                 "reduce-scatter", "all-to-all")})
    return SystemSimulator(net, sys_cfg)


@pytest.mark.parametrize("algo,kind,topo,n,splits", CASES)
def test_closed_form(algo, kind, topo, n, splits):
    sim = make_sim(algo, topo, n, splits)
    sizes = [16 << 20] if algo == "halvingDoubling" else [16 << 20, 10_000_019]
    for size in sizes:
        expect = collective_time(algo, kind, topo, n, size, splits, BW, LAT, MEM, E)
        assert sim.collective_time_ns(kind, size) == expect


def test_formats_example_174006():
    sim = make_sim("ring", "Ring", 2, 1)
    assert sim.collective_time_ns("all_reduce", 16 * 1024 * 1024) == 174_006
    # the same number through the event loop
    nodes = [[Node.make(0, NodeType.COMM_COLL_NODE, comm_type=0, comm_size=16 << 20, is_cpu_op=False)]
             for _ in range(2)]
    r = sim.run(nodes)
    assert r.finish_ns == [174_006, 174_006] and r.exposed_comm_ns == [174_006, 174_006]


@pytest.mark.parametrize("kind,comm_type", [("all-reduce", 0), ("all-gather", 2), ("reduce-scatter", 7),
                                            ("all-to-all", 6)])
def test_run_matches_accessor(kind, comm_type):
    sim = make_sim("ring", "Switch", 4, 4, bw=400.0, lat=936.25)
    nodes = [[Node.make(0, NodeType.COMM_COLL_NODE, comm_type=comm_type, comm_size=3 << 20, is_cpu_op=False)]
             for _ in range(4)]
    assert sim.run(nodes).finish_ns == [sim.collective_time_ns(kind, 3 << 20)] * 4


def test_ring_all_to_all_and_direct_all_to_all():
    n, size = 4, 1 << 20
    ring = make_sim("ring", "FullyConnected", n, 1)
    m = size // n
    c = int(LAT + m / (BW * 2**30 / 1e9))
    assert ring.collective_time_ns("all-to-all", size) == 6 * c + 7 * E          # n(n-1)/2 messages
    direct = make_sim("direct", "FullyConnected", n, 1)
    assert direct.collective_time_ns("all-to-all", size) == c + 2 * E


def test_minimum_chunk_rule():
    # chunk = size // splits < NPUs -> chunk = NPUs, size = splits * NPUs (not for all-gather)
    sim = make_sim("ring", "FullyConnected", 8, 4)
    one_chunk = chunk_time("ring", "all-reduce", "FullyConnected", 8, 8, BW, LAT, MEM, E)
    assert sim.collective_time_ns("all-reduce", 5) == sim.collective_time_ns("all-reduce", 32) == 4 * one_chunk
    assert sim.collective_time_ns("all-gather", 0) == 0


def test_one_variants_equal_plain_on_one_dimension():
    for algo in ("ring", "direct", "halvingDoubling"):
        one = "one" + algo[0].upper() + algo[1:]
        a, b = make_sim(algo, "Ring", 8, 4), make_sim(one, "Ring", 8, 4)
        for kind in ("all-reduce", "all-gather", "reduce-scatter"):
            assert a.collective_time_ns(kind, 1 << 22) == b.collective_time_ns(kind, 1 << 22)


def test_active_chunks_run_concurrently():
    sim1 = make_sim("ring", "Ring", 4, 8)
    net = analytical_network_from_link("Ring", 4, BW, LAT)
    sim2 = SystemSimulator(net, SystemConfig(preferred_dataset_splits=8, local_mem_bw_gbs=MEM,
                                             active_chunks_per_dimension=3))
    per_chunk = sim1.collective_time_ns("all-reduce", 8 << 20) // 8
    assert sim2.collective_time_ns("all-reduce", 8 << 20) == 3 * per_chunk   # ceil(8/3) rounds
