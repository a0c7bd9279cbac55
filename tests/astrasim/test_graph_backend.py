"""Graph backend: store-and-forward FIFO links over a networkx topology (astrasim/network/graph.py)."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from astrasim import CongestionAwareNetwork, GraphNetwork, Node, NodeType, SystemConfig, SystemSimulator, load_network
from astrasim.config import parse_network
from astrasim.config.graph import graph_from_spec, load_graph, parse_graph
from astrasim.config.system import parse_implementation
from astrasim.errors import ConfigError
from astrasim.network import bandwidth_bytes_per_ns
from astrasim.network.generators import fat_tree, fully_connected, nvswitch, pcie_tree, ring

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")
GRAPH_OF = {"Ring": ring, "Switch": nvswitch, "FullyConnected": fully_connected}


def system(algo, splits=1, active=1, e=10):
    impl = parse_implementation(algo, "t", "k")
    return SystemConfig(preferred_dataset_splits=splits, local_mem_bw_gbs=1600.0, endpoint_delay_ns=e,
                        active_chunks_per_dimension=active, implementations={k: (impl,) for k in KINDS})


@settings(max_examples=60, deadline=None)
@given(topo=st.sampled_from(sorted(GRAPH_OF)), n=st.integers(2, 9), kind=st.sampled_from(KINDS),
       algo=st.sampled_from(["ring", "direct", "direct2", "halvingDoubling"]), active=st.integers(1, 4),
       splits=st.integers(1, 5), size=st.integers(1, 1 << 22), bw=st.floats(5.0, 500.0),
       lat=st.sampled_from([0.0, 1.0, 700.0, 2500.5]), e=st.sampled_from([1, 10, 100]))
def test_graph_equals_congestion_aware_on_its_topologies(topo, n, kind, algo, active, splits, size, bw, lat, e):
    """On Ring, Switch and FullyConnected the graph backend gives the analytical
    congestion-aware backend's per-rank finish times exactly (which equal upstream's)."""
    if algo == "halvingDoubling" and (n & (n - 1) or kind == "all-to-all"):
        algo = "ring"
    aware = CongestionAwareNetwork(parse_network({"topology": [topo], "npus_count": [n], "bandwidth": [bw],
                                                  "latency": [lat]}))
    graph = GraphNetwork(GRAPH_OF[topo](gpus=n, bandwidth=bw, latency=lat))
    cfg = system(algo, splits, active, e)
    want = SystemSimulator(aware, cfg).planner.collective_finish(kind, size)
    assert SystemSimulator(graph, cfg).planner.collective_finish(kind, size) == want
    for s, d in ((0, n - 1), (n - 1, 0), (0, n // 2)):
        if s != d:
            assert graph.hop_times(s, d, size) != [] and graph.send_ns(s, d, size) == aware.send_ns(s, d, size)
            assert graph.hops(s, d) == aware.hops(s, d)


def test_fat_tree_oversubscription_costs_what_the_thin_uplinks_predict():
    """16 GPUs on 4 leaves x 4 hosts, 4 spines, 50 GB/s host links, no latency; halvingDoubling
    all-reduce of 64 MiB. Its steps at offsets 4 and 8 cross leaves; every GPU s goes up through
    spine s mod 4, so no two messages share a link and the only change from 1:1 to 4:1 is that the
    two leaf-spine hops of those messages run at 50/4 instead of 50 GB/s. Each of the four
    cross-leaf steps (messages of D/8, D/16, D/16, D/8) is slower by 2 * (floor(4m/B) - floor(m/B))."""
    d = 64 << 20
    b = bandwidth_bytes_per_ns(50.0)
    t = {}
    for r in (1, 4):
        net = GraphNetwork(fat_tree(leaves=4, hosts_per_leaf=4, spines=4, bandwidth=50.0, oversubscription=r))
        t[r] = SystemSimulator(net, system("halvingDoubling")).collective_time_ns("all-reduce", d)
    predicted = sum(2 * (int(m / (b / 4)) - int(m / b)) for m in (d // 8, d // 16, d // 16, d // 8))
    assert t[4] - t[1] == predicted == 2 * (468_750 + 234_375 + 234_375 + 468_750)
    # the ring algorithm sends cross-leaf messages only between neighbours 3|4, 7|8, 11|12, 15|0;
    # each rank waits for its predecessor, so the thin uplinks slow it too (by less: not additive)
    ring_t = [SystemSimulator(GraphNetwork(fat_tree(oversubscription=r)), system("ring"))
              .collective_time_ns("all-reduce", d) for r in (1, 4)]
    assert ring_t == [6_055_755, 9_961_995]


def test_pcie_tree_two_gpus_across_the_root_cost_two_more_links():
    net = GraphNetwork(pcie_tree(gpus=8, switches=2, bandwidth=32.0, uplink_bandwidth=32.0, latency=100.0))
    size = 1 << 20
    one = int(100.0 + size / bandwidth_bytes_per_ns(32.0))
    assert net.send_ns(0, 1, size) == 2 * one         # GPU, switch, GPU
    assert net.send_ns(3, 4, size) == 4 * one         # GPU, switch, root complex, switch, GPU
    sim = SystemSimulator(net, system("ring"), comm_groups={"1": [0, 1], "2": [3, 4]})
    assert sim.collective_time_ns("all-reduce", 16 << 20, [3, 4]) > sim.collective_time_ns("all-reduce", 16 << 20, [0, 1])


def test_sends_share_links_on_the_graph():
    """Two sends into one GPU under one switch queue on the switch's downlink."""
    net = GraphNetwork(nvswitch(gpus=3, bandwidth=100.0, latency=1000.0))
    sim = SystemSimulator(net, system("ring"))
    size = 1 << 20
    b = bandwidth_bytes_per_ns(100.0)
    busy, transit = int(size / b), int(1000.0 + size / b)
    send = lambda src: Node.make(0, NodeType.COMM_SEND_NODE, comm_src=src, comm_dst=1, comm_tag=src,  # noqa: E731
                                 comm_size=size, is_cpu_op=False)
    recv = lambda i, src: Node.make(i, NodeType.COMM_RECV_NODE, comm_src=src, comm_dst=1, comm_tag=src,  # noqa: E731
                                    comm_size=size, is_cpu_op=False)
    assert sim.run([[send(0)], [recv(0, 0), recv(1, 2)], [send(2)]]).finish_ns == \
        [2 * transit, 2 * transit + busy, 2 * transit + busy]


def _node_link(tmp_path, data):
    p = tmp_path / "topo.json"
    p.write_text(json.dumps(data))
    return p


GOOD = {"directed": False, "multigraph": False, "graph": {},
        "nodes": [{"id": "g0", "kind": "gpu", "npu": 0}, {"id": "g1", "kind": "gpu", "npu": 1},
                  {"id": "sw", "kind": "switch"}],
        "edges": [{"source": "g0", "target": "sw", "bandwidth": 100.0, "latency": 1000},
                  {"source": "g1", "target": "sw", "bandwidth": 100.0, "latency": 1000}]}


def test_node_link_json_is_read_as_networkx_writes_it(tmp_path):
    import networkx as nx
    g = load_graph(_node_link(tmp_path, GOOD))
    again = parse_graph(nx.node_link_data(g), "again")          # networkx's own writer, read back
    assert sorted(again.edges(data=True)) == sorted(g.edges(data=True))
    net = load_network(_node_link(tmp_path, GOOD), "graph")
    assert net.npus_count == 2 and net.send_ns(0, 1, 1 << 20) == 2 * int(1000 + (1 << 20) / bandwidth_bytes_per_ns(100.0))
    legacy = dict(GOOD, links=GOOD["edges"])
    del legacy["edges"]
    assert load_graph(_node_link(tmp_path, legacy)).number_of_edges() == 2


@pytest.mark.parametrize("change,field,message", [
    (lambda d: d["nodes"][2].update(kind="router"), "nodes[2].kind", "must be 'gpu' or 'switch', got 'router'"),
    (lambda d: d["edges"][1].update(bandwidth=0), "edges[1].bandwidth", "must be > 0, got 0"),
    (lambda d: d["edges"][0].pop("latency"), "edges[0].latency", "required key is missing"),
    (lambda d: d["edges"][0].update(target="nowhere"), "edges[0].target", "names no node: 'nowhere'"),
    (lambda d: d["nodes"][1].update(npu=0), "nodes[1].npu", "npu 0 is also nodes[0]"),
    (lambda d: d["edges"].pop(), "edges", "GPU 1 ('g1') and GPU 0 are not connected both ways"),
])
def test_bad_node_link_json_names_file_and_field(tmp_path, change, field, message):
    data = json.loads(json.dumps(GOOD))
    change(data)
    p = _node_link(tmp_path, data)
    with pytest.raises(ConfigError) as e:
        load_graph(p)
    assert str(e.value) == f"{p}, key '{field}': {message}"


@pytest.mark.parametrize("spec,field,message", [
    ({"generator": "hypercube"}, "generator", "unknown generator 'hypercube' (use dragonfly, fat_tree, "
     "fully_connected, nvswitch, pcie_tree, rail_optimized, ring, torus)"),
    ({"generator": "fat_tree", "leafs": 2}, "leafs", "fat_tree has no parameter 'leafs' (it has leaves, "
     "hosts_per_leaf, spines, bandwidth, oversubscription, latency)"),
    ({"generator": "fat_tree", "oversubscription": -1}, "oversubscription", "must be > 0, got -1"),
    ({"generator": "torus", "dims": [4, 1]}, "dims", "must be a list of integers >= 2, got [4, 1]"),
    ({"generator": "pcie_tree", "gpus": 6, "switches": 4}, "generator", "gpus (6) must be a multiple of switches (4)"),
])
def test_bad_generator_spec_names_field(spec, field, message):
    with pytest.raises(ConfigError) as e:
        graph_from_spec(spec, "net.yml")
    assert str(e.value) == f"net.yml, key '{field}': {message}"


def test_generators_have_the_documented_shapes():
    from astrasim.network.generators import dragonfly, rail_optimized, torus
    t = GraphNetwork(torus(dims=[4, 4]))
    assert t.npus_count == 16 and t.hops(0, 5) == 2 and t.hops(0, 3) == 1 and t.hops(0, 10) == 4
    assert GraphNetwork(torus(dims=[2, 2, 2])).hops(0, 7) == 3
    r = GraphNetwork(rail_optimized(nodes=2, gpus_per_node=4))
    assert r.hops(0, 3) == 2 and r.hops(0, 4) == 2 and r.route(0, 4)[0][1] == ("rail", 0)
    df = GraphNetwork(dragonfly(groups=4, routers_per_group=2, hosts_per_router=2))
    assert df.npus_count == 16 and max(df.hops(0, j) for j in range(1, 16)) == 5


def test_cli_runs_a_generator_spec(tmp_path, capsys):
    from astrasim import write_workload
    from astrasim.cli import main
    (tmp_path / "net.yml").write_text("generator: pcie_tree\ngpus: 4\nswitches: 2\nbandwidth: 32\n")
    (tmp_path / "sys.json").write_text(json.dumps({"preferred-dataset-splits": 1, "local-mem-bw": 1600,
                                                   **{f"{k}-implementation": ["ring"] for k in KINDS}}))
    (tmp_path / "mem.json").write_text('{"memory-type": "NO_MEMORY_EXPANSION"}')
    write_workload(str(tmp_path / "wl"), [[Node.make(0, NodeType.COMM_COLL_NODE, comm_type=0, comm_size=1 << 20,
                                                     is_cpu_op=False)] for _ in range(4)])
    args = [f"--workload-configuration={tmp_path}/wl", f"--system-configuration={tmp_path}/sys.json",
            f"--network-configuration={tmp_path}/net.yml", f"--remote-memory-configuration={tmp_path}/mem.json",
            "--network-backend=graph"]
    assert main(args) == 0
    assert len(capsys.readouterr().out.splitlines()) == 4
    (tmp_path / "net.yml").write_text("generator: pcie_tree\ngpus: four\n")
    assert main(args) == 2
    assert capsys.readouterr().err.strip() == f"error: {tmp_path}/net.yml, key 'gpus': must be an integer >= 1, got 'four'"


def test_concurrent_collectives_share_the_root_of_a_pcie_tree():
    """4 GPUs under 2 PCIe switches (0, 1 | 2, 3). Two all-reduces at once: within each switch
    they use disjoint links and each takes its idle-network time; across the root ([0, 2] and
    [1, 3]) they queue on the root's links. The one timed first keeps its idle time, the other
    waits behind its reservations: slower than alone, faster than one after the other."""
    sim = SystemSimulator(GraphNetwork(pcie_tree(gpus=4, switches=2)), SystemConfig(preferred_dataset_splits=1),
                          {1: [0, 1], 2: [2, 3], 3: [0, 2], 4: [1, 3]})
    ar = lambda pg: Node.make(0, NodeType.COMM_COLL_NODE, comm_type=0, comm_size=1 << 20,  # noqa: E731
                              is_cpu_op=False, pg_name=pg)
    within = sim.collective_time_ns("all-reduce", 1 << 20, [0, 1])
    assert sim.run([[ar("1")], [ar("1")], [ar("2")], [ar("2")]]).finish_ns == [within] * 4
    across = sim.collective_time_ns("all-reduce", 1 << 20, [0, 2])
    assert sim.collective_time_ns("all-reduce", 1 << 20, [1, 3]) == across
    fin = sim.run([[ar("3")], [ar("4")], [ar("3")], [ar("4")]]).finish_ns
    assert fin[0] == fin[2] == across                  # group 3 completes its arrival first
    assert fin[1] == fin[3] and across < fin[1] < 2 * across
