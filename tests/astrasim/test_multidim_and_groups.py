"""Two-dimensional networks (baseline, localBWAware, pipelining) and communicator groups."""
from __future__ import annotations

import pytest

from astrasim import NodeType, Node, SystemConfig, SystemSimulator
from astrasim.config import parse_network
from astrasim.config.system import parse_implementation
from astrasim.network import AnalyticalNetwork

from astrasim_closed_forms import chunk_time, msg

E, MEM = 10, 1600.0
D0 = ("Ring", 4, 100.0, 1000.0)      # dimension 0: 4-NPU ring
D1 = ("Switch", 2, 50.0, 2000.0)     # dimension 1: 2 NPUs behind a switch


def net2d() -> AnalyticalNetwork:
    return AnalyticalNetwork(parse_network({"topology": ["Ring", "Switch"], "npus_count": [4, 2],
                                            "bandwidth": [100.0, 50.0], "latency": [1000.0, 2000.0]}))


def sim2d(splits=1, opt="baseline", active=1, groups=None) -> SystemSimulator:
    ring = parse_implementation("ring", "t", "k")
    cfg = SystemConfig(preferred_dataset_splits=splits, local_mem_bw_gbs=MEM, endpoint_delay_ns=E,
                       collective_optimization=opt, active_chunks_per_dimension=active,
                       implementations={k: (ring, ring) for k in ("all-reduce", "all-gather",
                                                                  "reduce-scatter", "all-to-all")})
    return SystemSimulator(net2d(), cfg, groups)


def t(dim, kind, d):
    topo, n, bw, lat = dim
    return chunk_time("ring", kind, topo, n, d, bw, lat, MEM, E)


S = 8 << 20


def test_addresses_and_routing():
    net = net2d()
    assert [net.address(i) for i in (0, 3, 4, 7)] == [(0, 0), (3, 0), (0, 1), (3, 1)]
    assert net.hops(0, 2) == 2 and net.hops(0, 3) == 1 and net.hops(1, 5) == 2
    assert net.send_ns(1, 5, 1 << 20) == msg(1 << 20, 2, 50.0, 2000.0)


def test_baseline_all_reduce_runs_each_dimension_on_full_size():
    assert sim2d().collective_time_ns("all-reduce", S) == t(D0, "all-reduce", S) + t(D1, "all-reduce", S)


def test_baseline_pipeline_of_chunks():
    a, b = t(D0, "all-reduce", S // 4), t(D1, "all-reduce", S // 4)
    assert sim2d(splits=4).collective_time_ns("all-reduce", S) == a + b + 3 * max(a, b)


def test_local_bw_aware_all_reduce():
    expect = t(D0, "reduce-scatter", S) + t(D1, "all-reduce", S // 4) + t(D0, "all-gather", S // 4)
    assert sim2d(opt="localBWAware").collective_time_ns("all-reduce", S) == expect


def test_local_bw_aware_two_chunks_share_dimension_zero_queue():
    a, b, c = t(D0, "reduce-scatter", S // 2), t(D1, "all-reduce", S // 8), t(D0, "all-gather", S // 8)
    # chunk 0: A [0,a], B [a,a+b], C waits for dim 0 (chunk 1's A runs [a,2a]) -> starts max(a+b, 2a)
    c0_start = max(a + b, 2 * a)
    c1_b_end = 2 * a + b
    end = max(c0_start + c, c1_b_end) + c
    assert sim2d(splits=2, opt="localBWAware").collective_time_ns("all-reduce", S) == end


def test_all_gather_runs_outer_dimension_first_and_grows():
    expect = t(D1, "all-gather", S) + t(D0, "all-gather", 2 * S)
    assert sim2d().collective_time_ns("all-gather", S) == expect


def test_reduce_scatter_shrinks():
    expect = t(D0, "reduce-scatter", S) + t(D1, "reduce-scatter", S // 4)
    assert sim2d().collective_time_ns("reduce-scatter", S) == expect


def test_involved_dims():
    sim = sim2d()
    assert sim.collective_time_ns("all-reduce", S, involved_dims=[True, False]) == t(D0, "all-reduce", S)
    assert sim.collective_time_ns("all-reduce", S, involved_dims=[False, True]) == t(D1, "all-reduce", S)
    assert sim.collective_time_ns("all-reduce", S, involved_dims=[False, False]) == 0


def test_one_ring_spans_all_npus():
    one = parse_implementation("oneRing", "t", "k")
    cfg = SystemConfig(preferred_dataset_splits=1, local_mem_bw_gbs=MEM, endpoint_delay_ns=E,
                       implementations={k: (one, one) for k in ("all-reduce", "all-gather",
                                                                "reduce-scatter", "all-to-all")})
    sim = SystemSimulator(net2d(), cfg)
    # ring 0..7: edges 3->4 and 7->0 cross dimension 0 between local ids 3 and 0 (1 hop, dim-0 link)
    # (the upstream backend routes in the first differing dimension), so every edge is a dim-0 hop.
    m = S // 8
    c = msg(m, 1, 100.0, 1000.0)
    red = 3 * int(m / (MEM * 1e9) * 1e9)
    assert sim.collective_time_ns("all-reduce", S) == 14 * c + 7 * red + 15 * E


def test_group_rings_use_member_distances():
    sim = sim2d(groups={1: [0, 2], 2: [0, 4], 3: [0, 1, 4]})
    m = S // 2
    red = 3 * int(m / (MEM * 1e9) * 1e9)
    far = msg(m, 2, 100.0, 1000.0)     # NPUs 0 and 2: two hops round the dim-0 ring
    assert sim.collective_time_ns("all-reduce", S, group=[0, 2]) == 2 * far + red + 3 * E
    assert sim.collective_time_ns("all-reduce", S, group=[0, 4]) == t(D1, "all-reduce", S)
    # heterogeneous 3-ring 0 -> 1 -> 4 -> 0: the slowest two consecutive edges decide an all-gather
    c01 = msg(S, 1, 100.0, 1000.0)
    c14 = msg(S, 1, 100.0, 1000.0)     # (1,0)->(0,1): first differing dim is 0, local 1->0
    c40 = msg(S, 2, 50.0, 2000.0)      # (0,1)->(0,0): dim 1 through the switch
    expect = 3 * E + max(c40 + c01, c01 + c14, c14 + c40)
    assert sim.collective_time_ns("all-gather", S, group=[0, 1, 4]) == expect


def test_group_collectives_through_run():
    sim = sim2d(groups={1: [0, 1, 2, 3], 2: [4, 5, 6, 7]})
    nodes = []
    for r in range(8):
        g = "1" if r < 4 else "2"
        nodes.append([Node.make(0, NodeType.COMM_COLL_NODE, comm_type=0, comm_size=S, pg_name=g,
                                is_cpu_op=False)])
    res = sim.run(nodes)
    assert res.finish_ns == [t(D0, "all-reduce", S)] * 8


@pytest.mark.parametrize("algo", ["ring", "direct", "halvingDoubling"])
def test_two_dim_algorithms_compose(algo):
    impl = parse_implementation(algo, "t", "k")
    cfg = SystemConfig(preferred_dataset_splits=1, local_mem_bw_gbs=MEM, endpoint_delay_ns=E,
                       implementations={k: (impl, impl) for k in ("all-reduce", "all-gather",
                                                                  "reduce-scatter", "all-to-all")})
    sim = SystemSimulator(net2d(), cfg)
    a = chunk_time(algo, "all-reduce", "Ring", 4, S, 100.0, 1000.0, MEM, E)
    b = chunk_time(algo, "all-reduce", "Switch", 2, S, 50.0, 2000.0, MEM, E)
    assert sim.collective_time_ns("all-reduce", S) == a + b


@pytest.mark.parametrize("endpoint_delay", [0, 1, 10, 500])
def test_group_collective_pays_upstreams_fixed_10ns_endpoint_delay(endpoint_delay):
    """A communicator group smaller than the system runs on upstream's "local" ring, whose
    hand-offs cost 10 ns whatever ``endpoint-delay`` says; the default group pays the
    configured delay. 16 MiB ring all-reduce over 2 NPUs behind a switch (100 GB/s, 1000 ns):
    c = floor(2*1000 + 8 MiB / 107.3741824) = 80125, r = 3*floor(8 MiB / 1600) = 15726."""
    ring = parse_implementation("ring", "t", "k")
    cfg = SystemConfig(preferred_dataset_splits=1, local_mem_bw_gbs=MEM, endpoint_delay_ns=endpoint_delay,
                       implementations={k: (ring,) for k in ("all-reduce", "all-gather",
                                                             "reduce-scatter", "all-to-all")})

    def net(n):
        return AnalyticalNetwork(parse_network({"topology": ["Switch"], "npus_count": [n],
                                                "bandwidth": [100.0], "latency": [1000.0]}))
    group = SystemSimulator(net(4), cfg, {"1": [0, 1], "2": [2, 3]})
    assert group.collective_time_ns("all-reduce", 16 << 20, [0, 1]) == 2 * 80125 + 15726 + 3 * 10
    whole = SystemSimulator(net(2), cfg)
    assert whole.collective_time_ns("all-reduce", 16 << 20) == 2 * 80125 + 15726 + 3 * endpoint_delay
