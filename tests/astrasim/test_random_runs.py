"""Randomized graphs (fixed seeds) checked by an output validator."""
from __future__ import annotations

import random

from hypothesis import given, settings, strategies as st

from astrasim import Node, NodeType, SystemConfig, SystemSimulator, analytical_network_from_link

N = NodeType


def random_graphs(seed: int, ranks: int):
    """Every rank gets the same collective sequence (so they match) and its own compute nodes."""
    rng = random.Random(seed)
    n_coll = rng.randint(0, 4)
    sizes = [rng.choice([1 << 10, 1 << 20, 3 << 20]) for _ in range(n_coll)]
    kinds = [rng.choice([0, 2, 6, 7]) for _ in range(n_coll)]
    graphs = []
    for _r in range(ranks):
        nodes, colls_placed = [], 0
        count = rng.randint(max(1, n_coll), 12)
        for i in range(count):
            deps = sorted(rng.sample(range(i), k=min(i, rng.randint(0, 2))))
            remaining = count - i
            if colls_placed < n_coll and (rng.random() < 0.4 or remaining <= n_coll - colls_placed):
                # chain collectives so their per-rank issue order is the same on every rank
                prev = [x.id for x in nodes if x.type == N.COMM_COLL_NODE][-1:]
                nodes.append(Node.make(i, N.COMM_COLL_NODE, comm_type=kinds[colls_placed],
                                       comm_size=sizes[colls_placed], is_cpu_op=False,
                                       data_deps=sorted(set(deps) | set(prev))))
                colls_placed += 1
            else:
                nodes.append(Node.make(i, N.COMP_NODE, duration_micros=rng.randint(0, 50),
                                       is_cpu_op=rng.random() < 0.2, data_deps=deps))
        graphs.append(nodes)
    return graphs


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from([2, 4]))
def test_random_runs_validate(seed, ranks):
    sim = SystemSimulator(analytical_network_from_link("Switch", ranks, 200.0, 500.0),
                          SystemConfig(preferred_dataset_splits=2))
    graphs = random_graphs(seed, ranks)
    res = sim.run(graphs)
    assert res == sim.run(random_graphs(seed, ranks))          # deterministic
    for r, nodes in enumerate(graphs):
        gpu = sum(max(1, n.duration_micros * 1000) for n in nodes
                  if n.type == N.COMP_NODE and not n.get("is_cpu_op"))
        cpu = sum(max(1, n.duration_micros * 1000) for n in nodes
                  if n.type == N.COMP_NODE and n.get("is_cpu_op"))
        assert res.gpu_compute_ns[r] == gpu
        assert res.finish_ns[r] >= max(gpu, cpu)                 # one node per slot at a time
        assert res.exposed_comm_ns[r] == res.finish_ns[r] - gpu
        assert 0 <= res.comm_only_ns[r] <= res.finish_ns[r] - gpu
        names = {0: "all-reduce", 2: "all-gather", 6: "all-to-all", 7: "reduce-scatter"}
        comm = sum(sim.collective_time_ns(names[n.get("comm_type")], n.get("comm_size"))
                   for n in nodes if n.type == N.COMM_COLL_NODE)
        assert res.finish_ns[r] >= comm                          # collectives of a rank serialize
        assert res.comm_only_ns[r] >= 0
