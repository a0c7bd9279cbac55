"""Micro-benchmark of the in-process API: python astra-sim/tools/bench_astrasim.py"""
import time
from astrasim import Node, NodeType as N, SystemSimulator, SystemConfig, analytical_network_from_link
TP, LAYERS = 4, 32
def rank_graph():
    nodes, nid, prev = [], 0, None
    for l in range(LAYERS):
        for us in (30, 40):
            nodes.append(Node.make(nid, N.COMP_NODE, duration_micros=us, is_cpu_op=False,
                                   data_deps=[prev] if prev is not None else []))
            prev = nid; nid += 1
            nodes.append(Node.make(nid, N.COMM_COLL_NODE, comm_type=0, comm_size=8 << 20,
                                   is_cpu_op=False, data_deps=[prev]))
            prev = nid; nid += 1
    return nodes
sim = SystemSimulator(analytical_network_from_link("FullyConnected", TP, 400.0, 936.25),
                      SystemConfig(preferred_dataset_splits=4, local_mem_bw_gbs=3350))
g = [rank_graph() for _ in range(TP)]
n = 50
t = time.perf_counter()
for _ in range(n): r = sim.run(g)
dt = (time.perf_counter() - t) / n
print(f"run: {TP} ranks x {len(g[0])} nodes: {dt*1e3:.2f} ms per run ({dt/(TP*len(g[0]))*1e6:.2f} us per node)")
t = time.perf_counter()
for _ in range(n): r2 = sim.run_symmetric(g[0])
assert r2 == r
print(f"run_symmetric: {(time.perf_counter()-t)/n*1e3:.2f} ms per run")
t = time.perf_counter()
for _ in range(100000): sim.collective_time_ns("all_reduce", 8 << 20)
print(f"memoized collective_time_ns: {(time.perf_counter()-t)/100000*1e6:.2f} us")
s2 = SystemSimulator(analytical_network_from_link("Ring", 16, 400.0, 936.25), SystemConfig(preferred_dataset_splits=16))
t = time.perf_counter(); s2.collective_time_ns("all_reduce", 1 << 30); print(f"cold 16-NPU ring all-reduce, 16 splits: {(time.perf_counter()-t)*1e3:.2f} ms")
