"""Workload/system-layer semantics: overlap, serialization, dependencies, matching, errors."""
from __future__ import annotations

import pytest

from astrasim import (Node, NodeType, RemoteMemoryConfig, SystemConfig, SystemSimulator,
                      analytical_network_from_link)
from astrasim.errors import StuckError, WorkloadError

N = NodeType
BW, LAT = 100.0, 1000.0


def sim(n=2, **kw) -> SystemSimulator:
    groups = kw.pop("groups", None)
    mem = kw.pop("memory", None)
    cfg = SystemConfig(preferred_dataset_splits=1, local_mem_bw_gbs=1600.0, **kw)
    return SystemSimulator(analytical_network_from_link("FullyConnected", n, BW, LAT), cfg, groups, mem)


def comp(i, us, **kw):
    return Node.make(i, N.COMP_NODE, duration_micros=us, is_cpu_op=kw.pop("cpu", False), **kw)


def ar(i, size=16 << 20, **kw):
    return Node.make(i, N.COMM_COLL_NODE, comm_type=0, comm_size=size, is_cpu_op=False, **kw)


@pytest.fixture
def s():
    return sim()


def T(s, size=16 << 20):
    return s.collective_time_ns("all-reduce", size)


def test_independent_compute_overlaps_all_reduce(s):
    r = s.run([[comp(0, 100), ar(1)] for _ in range(2)])
    fin = max(100_000, T(s))
    assert r.finish_ns == [fin, fin]
    assert r.gpu_compute_ns == [100_000, 100_000]
    assert r.exposed_comm_ns == [fin - 100_000] * 2          # upstream: finish - GPU compute
    assert r.comm_only_ns == [max(0, T(s) - 100_000)] * 2     # comm in flight, no compute


def test_two_compute_nodes_serialize(s):
    r = s.run([[comp(0, 100), comp(1, 50)] for _ in range(2)])
    assert r.finish_ns == [150_000, 150_000] and r.exposed_comm_ns == [0, 0]


def test_cpu_op_overlaps_gpu_compute(s):
    r = s.run([[comp(0, 100), comp(1, 100, cpu=True)] for _ in range(2)])
    assert r.finish_ns == [100_000] * 2 and r.gpu_compute_ns == [100_000] * 2


@pytest.mark.parametrize("dep", ["data_deps", "ctrl_deps"])
def test_dependencies_are_honoured(s, dep):
    r = s.run([[comp(0, 100), ar(1, **{dep: [0]}), comp(2, 10, **{dep: [1]})] for _ in range(2)])
    assert r.finish_ns == [100_000 + T(s) + 10_000] * 2
    assert r.comm_only_ns == [T(s)] * 2


def test_ready_nodes_issue_in_id_order(s):
    # ids 3 and 5 are both ready; 3 goes first, so the collective waiting on 3 starts at 20 us.
    g = [comp(5, 10), comp(3, 20), ar(9, data_deps=[3])]
    r = s.run([list(g), list(g)])
    assert r.finish_ns == [20_000 + T(s)] * 2


def test_zero_duration_compute_takes_one_ns(s):
    assert s.run([[comp(0, 0)], [comp(0, 0), comp(1, 0)]]).finish_ns == [1, 2]


def test_collective_runs_on_each_members_clock():
    # Rank 1 issues at 0, rank 0 at 100 us. Each rank posts its step-k receive when it sends
    # step k, so rank 1's first message waits for rank 0, and rank 1 finishes first: it gets
    # rank 0's second message, which left right after rank 0's first reduction. The same
    # numbers come out of the upstream binary (2 NPUs, 16 MiB, Ring 100 GB/s, 1000 ns).
    s = sim(2)
    s2 = SystemSimulator(analytical_network_from_link("Ring", 2, BW, LAT), s.system)
    r = s2.run([[comp(0, 100), ar(1, data_deps=[0])], [ar(1)]])
    c, red, e = 79_125, 3 * 5_242, 10
    rank1_second_send = 100_000 + e + c + e + red   # after rank 0's first message reached it
    rank1 = rank1_second_send + e                   # rank 0's 2nd message is already there
    rank0 = rank1_second_send + c + e               # rank 0 waits for rank 1's 2nd message
    assert r.finish_ns == [rank0, rank1] == [274_006, 194_881]
    assert r.comm_only_ns == [174_006, 194_881]
    assert r.exposed_comm_ns == [174_006, 194_881]


def test_collectives_match_in_issue_order_per_group():
    s4 = sim(4, groups={1: [0, 1], 2: [2, 3]})
    small, big = 1 << 20, 8 << 20
    nodes = [[ar(0, small, pg_name="1"), ar(1, big, pg_name="1", data_deps=[0])] for _ in range(2)]
    nodes += [[ar(0, big, pg_name="2")] for _ in range(2)]
    r = s4.run(nodes)
    t_small = s4.collective_time_ns("all-reduce", small, group=[0, 1])
    t_big = s4.collective_time_ns("all-reduce", big, group=[0, 1])
    assert r.finish_ns == [t_small + t_big] * 2 + [s4.collective_time_ns("all-reduce", big, group=[2, 3])] * 2


def test_send_recv(s):
    size = 4 << 20
    send = Node.make(0, N.COMM_SEND_NODE, comm_src=0, comm_dst=1, comm_tag=7, comm_size=size, is_cpu_op=False)
    recv = Node.make(1, N.COMM_RECV_NODE, comm_src=0, comm_dst=1, comm_tag=7, comm_size=size, is_cpu_op=False,
                     data_deps=[0])
    delay = int(LAT + size / (BW * 2**30 / 1e9))
    early = s.run([[send], [comp(0, 1), recv]])            # recv posted at 1 us, message arrives later
    assert early.finish_ns == [delay, delay]
    late = s.run([[send], [comp(0, 100), recv]])           # message already there: recv is instant
    assert late.finish_ns == [delay, 100_000]


def test_roofline_compute():
    s = sim(roofline_enabled=True, peak_perf_tflops=100.0)
    node = Node.make(0, N.COMP_NODE, num_ops=10**12, tensor_size=10**9, is_cpu_op=False, duration_micros=999)
    # intensity 1000 flop/B * 1600 GB/s = 1.6 PFLOPS > 100 TFLOPS peak -> compute bound: 10 ms
    expect = int(1e12 / min(1600e9 * 1000, 100e12) * 1e9)
    r = s.run([[node], [Node.make(0, N.COMP_NODE, num_ops=10**9, tensor_size=10**9, is_cpu_op=False)]])
    assert r.finish_ns[0] == expect == 10_000_000
    assert r.finish_ns[1] == int(1e9 / min(1600e9 * 1.0, 100e12) * 1e9)   # memory bound
    cpu = Node.make(0, N.COMP_NODE, num_ops=1, tensor_size=1, is_cpu_op=True, duration_micros=3)
    skip = Node.make(0, N.COMP_NODE, num_ops=5, tensor_size=0, is_cpu_op=False)
    assert s.run([[cpu], [skip]]).finish_ns == [3000, 0]


def test_remote_memory_models():
    load = lambda i: Node.make(i, N.MEM_LOAD_NODE, tensor_size=10**6, is_cpu_op=False)  # noqa: E731
    cost = 500 + int(1e6 / (100e9) * 1e9)
    per_npu = sim(memory=RemoteMemoryConfig("PER_NPU_MEMORY_EXPANSION", 500, 100.0))
    assert per_npu.run([[load(0)], [load(0)]]).finish_ns == [cost, cost]
    pool = sim(memory=RemoteMemoryConfig("MEMORY_POOL", 500, 100.0))
    assert pool.run([[load(0)], [load(0)]]).finish_ns == [cost, 2 * cost]
    with pytest.raises(WorkloadError, match="NO_MEMORY_EXPANSION"):
        sim().run([[load(0)], []])


def test_metadata_nodes_take_no_time(s):
    meta = Node.make(0, N.METADATA_NODE)
    r = s.run([[meta, comp(1, 5, data_deps=[0])], []])
    assert r.finish_ns == [5_000, 0]


def test_unmatched_collective_is_reported(s):
    with pytest.raises(StuckError, match=r"group 0 .* waits for rank\(s\) \[1\]"):
        s.run([[ar(0)], [comp(0, 1)]])


def test_unmatched_recv_is_reported(s):
    recv = Node.make(0, N.COMM_RECV_NODE, comm_src=0, comm_dst=1, comm_tag=1, comm_size=8, is_cpu_op=False)
    with pytest.raises(StuckError, match="waits for a send"):
        s.run([[], [recv]])


def test_dependency_cycle_is_reported(s):
    with pytest.raises(StuckError, match="never became ready"):
        s.run([[comp(0, 1, data_deps=[1]), comp(1, 1, data_deps=[0])], []])


@pytest.mark.parametrize("nodes,match", [
    ([[comp(0, 1, data_deps=[42])], []], "depends on node 42"),
    ([[comp(0, 1), comp(0, 2)], []], "appears twice"),
    ([[ar(0, 8)], [ar(0, 16)]], "does not match"),
    ([[ar(0, pg_name="9")], [ar(0, pg_name="9")]], "group 9 is not defined"),
    ([[Node.make(0, N.COMM_COLL_NODE, comm_type=9, is_cpu_op=False)], []], "BARRIER is not supported"),
    ([[Node.make(0, N.COMM_COLL_NODE, comm_type=0, is_cpu_op=True)], []], "cannot be a CPU op"),
    ([[comp(0, 1)]], "1 rank"),
])
def test_workload_errors(s, nodes, match):
    with pytest.raises(WorkloadError, match=match):
        s.run(nodes)


def test_runs_are_deterministic_and_independent(s):
    g = lambda: [[comp(0, 100), ar(1), comp(2, 30, data_deps=[1])] for _ in range(2)]  # noqa: E731
    assert s.run(g()) == s.run(g())


def test_run_symmetric_equals_run():
    s4 = sim(4, groups={1: [0, 1, 2, 3]})
    g = lambda: [comp(0, 100), ar(1, data_deps=[0]), comp(2, 7), ar(3, 1 << 20, pg_name="1", data_deps=[1]),  # noqa: E731
                 Node.make(4, N.COMM_COLL_NODE, comm_type=2, comm_size=1 << 18, is_cpu_op=False, data_deps=[3])]
    assert s4.run_symmetric(g()) == s4.run([g() for _ in range(4)])
    send = Node.make(0, N.COMM_SEND_NODE, comm_src=0, comm_dst=1, comm_size=8, is_cpu_op=False)
    with pytest.raises(WorkloadError, match="run_symmetric"):
        s4.run_symmetric([send])
