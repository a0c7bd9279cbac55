"""Congestion-aware 1-D backend: store-and-forward FIFO links inside collectives and for sends."""
from __future__ import annotations

import pytest

from astrasim import CongestionAwareNetwork, Node, NodeType, SystemConfig, SystemSimulator, load_network
from astrasim.config import parse_network
from astrasim.config.system import parse_implementation
from astrasim.errors import ConfigError

from astrasim_closed_forms import chunk_time

BW, LAT, MEM, E = 100.0, 1000.0, 1600.0, 10
B = BW * 2**30 / 1e9


def make(topo, n, algo="ring"):
    net = CongestionAwareNetwork(parse_network({"topology": [topo], "npus_count": [n],
                                                "bandwidth": [BW], "latency": [LAT]}))
    impl = parse_implementation(algo, "t", "k")
    cfg = SystemConfig(preferred_dataset_splits=1, local_mem_bw_gbs=MEM, endpoint_delay_ns=E,
                       implementations={k: (impl,) for k in ("all-reduce", "all-gather",
                                                             "reduce-scatter", "all-to-all")})
    return SystemSimulator(net, cfg)


def test_idle_paths():
    sw = make("Switch", 4).network
    assert sw.route(0, 3) == [(0, 4), (4, 3)]
    assert sw.send_ns(0, 3, 1 << 20) == 2 * int(LAT + (1 << 20) / B)
    ring = make("Ring", 6).network
    assert ring.route(0, 3) == [(0, 1), (1, 2), (2, 3)]          # tie: clockwise
    assert ring.route(0, 4) == [(0, 5), (5, 4)]


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_algorithm_on_ring_never_queues(n):
    size = 8 << 20
    expect = chunk_time("ring", "all-reduce", "Ring", n, size, BW, LAT, MEM, E)
    assert make("Ring", n).collective_time_ns("all-reduce", size) == expect


def test_switch_costs_two_store_and_forward_hops():
    n, size = 4, 8 << 20
    m = size // n
    c = 2 * int(LAT + m / B)
    red = 3 * int(m / (MEM * 1e9) * 1e9)
    assert make("Switch", n).collective_time_ns("all-reduce", size) == 2 * (n - 1) * c + (n - 1) * red + (2 * n - 1) * E


def test_direct_all_to_all_queues_on_shared_ring_links():
    n, size = 4, 8 << 20
    m = size // n
    busy, transit = int(m / B), int(LAT + m / B)
    # the two-hop message waits behind the one-hop message on its first link
    assert make("Ring", n, "direct").collective_time_ns("all-to-all", size) == 2 * E + busy + 2 * transit


def test_point_to_point_sends_share_the_switch_downlink():
    sim = make("Switch", 3)
    size = 1 << 20
    busy, transit = int(size / B), int(LAT + size / B)
    send = lambda src: Node.make(0, NodeType.COMM_SEND_NODE, comm_src=src, comm_dst=1, comm_tag=src,  # noqa: E731
                                 comm_size=size, is_cpu_op=False)
    recv = lambda i, src: Node.make(i, NodeType.COMM_RECV_NODE, comm_src=src, comm_dst=1, comm_tag=src,  # noqa: E731
                                    comm_size=size, is_cpu_op=False)
    r = sim.run([[send(0)], [recv(0, 0), recv(1, 2)], [send(2)]])
    assert r.finish_ns == [2 * transit, 2 * transit + busy, 2 * transit + busy]


def test_multi_dimensional_is_rejected(tmp_path):
    p = tmp_path / "n.yml"
    p.write_text("topology: [Ring, Switch]\nnpus_count: [2, 2]\nbandwidth: [1, 1]\nlatency: [1, 1]\n")
    with pytest.raises(ConfigError, match="one dimension"):
        load_network(p, "congestion_aware")


def _ring8(active, splits, algo="ring"):
    net = CongestionAwareNetwork(parse_network({"topology": ["Ring"], "npus_count": [8],
                                                "bandwidth": [50.0], "latency": [500.0]}))
    impl = parse_implementation(algo, "t", "k")
    cfg = SystemConfig(preferred_dataset_splits=splits, local_mem_bw_gbs=MEM, endpoint_delay_ns=E,
                       active_chunks_per_dimension=active,
                       implementations={k: (impl,) for k in ("all-reduce", "all-gather",
                                                             "reduce-scatter", "all-to-all")})
    return SystemSimulator(net, cfg)


def test_concurrent_chunks_share_ring_links_as_upstream():
    """Issue 14's case: Ring of 8 (50 GB/s, 500 ns), 1 MiB all-gather in 4 chunks, all 4 active.
    Upstream's congestion-aware binary (astra-sim @518bd51) prints 137,216 cycles; timing each
    chunk on its own idle ring (the model before issue 14) gave 37,754: the four chunks' messages
    must queue behind each other on every neighbour link."""
    assert _ring8(4, 4).collective_time_ns("all-gather", 1 << 20) == 137216
    # one active chunk: the chunks run one after the other, as before
    one = _ring8(1, 1).collective_time_ns("all-gather", 1 << 18)
    assert _ring8(1, 4).collective_time_ns("all-gather", 1 << 20) == 4 * one


def test_a_send_and_a_collective_share_a_link():
    """Switch of 3 NPUs (switch = device 3), 1 GB/s (2**30 / 1e9 B/ns), 100 ns per link.
    Rank 2 sends 10,000 B to rank 1 at t=0 while ranks 0 and 1 all-reduce 2,000 B in group
    [0, 1] after 10 us of compute; the send and the collective's 0 -> 1 messages share the
    switch's link (3, 1). Per hop: 1,000 B busy 931 ns, transit 1,031 ns; 10,000 B busy
    9,313 ns, transit 9,413 ns. Group endpoint delay E = 10 ns, reduction of 1,000 B 3 ns.

    send: (2,3) from 0, at the switch 9,413; (3,1) busy until 18,726, at rank 1 at 18,826.
    collective, injected at 10,010 (10,000 + E), ring of 2, messages of 1,000 B:
      reduce-scatter  0->1: switch 11,041, (3,1) waits for the send: 18,726 -> rank 1 19,757
                      1->0: rank 0 at 12,072
                      done: rank 0 12,072 + E + 3 = 12,085; rank 1 19,757 + 13 = 19,770
      all-gather      0->1 at 12,085: switch 13,116, (3,1) free at 18,726 + 931 = 19,657 -> 20,688
                      1->0 at 19,770: switch 20,801 -> rank 0 21,832
                      done: rank 0 21,832 + E = 21,842; rank 1 20,688 + E = 20,698
    Alone the collective ends at 10,000 + 4,157 on both ranks."""
    net = CongestionAwareNetwork(parse_network({"topology": ["Switch"], "npus_count": [3],
                                                "bandwidth": [1.0], "latency": [100.0]}))
    sim = SystemSimulator(net, SystemConfig(preferred_dataset_splits=1, local_mem_bw_gbs=1000.0), {1: [0, 1]})
    N = NodeType
    comp = Node.make(0, N.COMP_NODE, duration_micros=10, is_cpu_op=False)
    ar = Node.make(1, N.COMM_COLL_NODE, comm_type=0, comm_size=2000, is_cpu_op=False, pg_name="1", data_deps=[0])
    send = Node.make(0, N.COMM_SEND_NODE, comm_src=2, comm_dst=1, comm_tag=7, comm_size=10000, is_cpu_op=False)
    recv = Node.make(2, N.COMM_RECV_NODE, comm_src=2, comm_dst=1, comm_tag=7, comm_size=10000, is_cpu_op=False)
    assert sim.collective_time_ns("all-reduce", 2000, [0, 1]) == 4157
    assert sim.run([[comp, ar], [comp, ar], [comp]]).finish_ns == [14157, 14157, 10000]
    assert sim.run([[comp, ar], [comp, ar, recv], [send]]).finish_ns == [21842, 20698, 18826]
