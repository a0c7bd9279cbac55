"""Record reference results from the upstream ASTRA-Sim binary into a golden JSON file.

    ASTRASIM_UPSTREAM_BIN=/path/to/AstraSim_Analytical_Congestion_Unaware \
    ASTRASIM_UPSTREAM_BIN_AWARE=/path/to/AstraSim_Analytical_Congestion_Aware \
        python astra-sim/tools/record_upstream.py tests/astrasim/golden/upstream_cases.json
    ASTRASIM_UPSTREAM_BIN_AWARE=/path/to/AstraSim_Analytical_Congestion_Aware \
        python astra-sim/tools/record_upstream.py --aware-random tests/astrasim/golden/upstream_aware_random.json
    ASTRASIM_UPSTREAM_BIN=/path/to/AstraSim_Analytical_Congestion_Unaware \
        python astra-sim/tools/record_upstream.py --exports OUT.json NAME=STEP_DIR ...

``--exports``: step folders written by ``agentservesim export-chakra``, each run by the binary
with exactly the flags the export prints (from inside the folder); the case keeps the
exported ``.et`` files themselves, each distinct file once, gzip-compressed (mtime 0) and
base64-encoded (``workload.et_gzip_base64``; ``rank_graph``: which one each rank runs).

Each case stores the network YAML keys, the system JSON, optional comm groups and remote
memory, the per-rank nodes (explicitly, as plain dicts) and the binary's report lines, so
``tests/astrasim/test_upstream_golden.py`` can replay every case in-process without the binary.
How the binary was built for this project (2026-11): astra-sim/astra-sim @518bd51 with
astra-network-analytical HEAD, astra-sim/chakra branch ``feederv3`` (plus a two-line alias
``namespace Chakra { using FeederV3::ETFeeder; using FeederV3::ETFeederNode; }`` at the end
of ``src/feeder_v3/et_feeder.h``), astra-memory-analytical @641cce8, fmt 10.2.1, spdlog
1.13.0, Debian's libprotobuf 3.21 and yaml-cpp 0.7 (``find_package(yaml-cpp)`` instead of
FetchContent), ``cmake .. -DBUILDTARGET=congestion_unaware`` (then ``congestion_aware``) in
build/astra_analytical/build.
"""
from __future__ import annotations

import itertools
import json
import os
import random
import re
import subprocess
import sys
import tempfile

from astrasim import Node, NodeType as N, write_workload

CT = {"all-reduce": 0, "all-gather": 2, "reduce-scatter": 7, "all-to-all": 6}


def node_dict(n: Node) -> dict:
    return {"id": n.id, "type": n.type.name, "duration_micros": n.duration_micros,
            "data_deps": n.data_deps, "ctrl_deps": n.ctrl_deps,
            "attrs": {k: [a.kind, a.value] for k, a in n.attrs.items()}}


def system(algos, splits=1, opt="baseline", active=1, **extra):
    s = {"scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": active,
         "preferred-dataset-splits": splits, "collective-optimization": opt, "local-mem-bw": 1600}
    for k in CT:
        s[f"{k}-implementation"] = list(algos)
    s.update(extra)
    return s


def coll(kind, size, nid=0, **kw):
    return Node.make(nid, N.COMM_COLL_NODE, comm_type=CT[kind], comm_size=size, is_cpu_op=False, **kw)


def random_dag(seed, ranks):
    rng = random.Random(seed)
    ncoll = rng.randint(1, 4)
    kinds = [rng.choice(list(CT)) for _ in range(ncoll)]
    sizes = [rng.choice([1 << 16, 1 << 20, 3000017]) for _ in range(ncoll)]
    out = []
    for r in range(ranks):
        rr = random.Random(seed * 100 + r)
        nodes, placed, cnt = [], 0, rr.randint(ncoll, 14)
        for i in range(cnt):
            deps = sorted(rr.sample(range(i), k=min(i, rr.randint(0, 2))))
            if placed < ncoll and (rr.random() < 0.4 or cnt - i <= ncoll - placed):
                prev = [x.id for x in nodes if x.type == N.COMM_COLL_NODE][-1:]
                nodes.append(Node.make(i, N.COMM_COLL_NODE, comm_type=CT[kinds[placed]], comm_size=sizes[placed],
                                       is_cpu_op=False, data_deps=sorted(set(deps) | set(prev))))
                placed += 1
            else:
                kw = {"data_deps": deps} if rr.random() < 0.5 else {"ctrl_deps": deps}
                nodes.append(Node.make(i, N.COMP_NODE, duration_micros=rr.randint(0, 30),
                                       is_cpu_op=rr.random() < 0.25, **kw))
        out.append(nodes)
    return out


def cases():
    one_d = lambda t, n, bw=100.0, lat=1000.0: {"topology": [t], "npus_count": [n], "bandwidth": [bw], "latency": [lat]}  # noqa: E731
    for algo, kind, topo, n in itertools.product(["ring", "direct", "halvingDoubling", "direct2"], list(CT),
                                                 ["Ring", "FullyConnected", "Switch"], [4, 8]):
        if algo == "halvingDoubling" and kind == "all-to-all":
            continue
        yield (f"1d {algo} {kind} {topo} n={n}", one_d(topo, n), system([algo], splits=4), None,
               [[coll(kind, 1000003)] for _ in range(n)])
    for algo in ["ring", "direct", "halvingDoubling", "oneRing", "oneDirect"]:
        yield (f"1d {algo} all-reduce Ring n=16", one_d("Ring", 16, 50.0, 700.0), system([algo], splits=2), None,
               [[coll("all-reduce", 5 << 20)] for _ in range(16)])
    nets = [(["Ring", "Switch"], [4, 2], [100.0, 50.0], [1000.0, 2000.0]),
            (["Switch", "Switch", "Ring"], [2, 2, 2], [300.0, 100.0, 50.0], [100.0, 1000.0, 5000.0])]
    for (t, n, b, l), algo, (kind, opt), active in itertools.product(
            nets, ["ring", "direct", "halvingDoubling"],
            [("all-reduce", "baseline"), ("all-reduce", "localBWAware"), ("all-gather", "baseline"),
             ("reduce-scatter", "baseline"), ("all-to-all", "baseline")], [1, 2]):
        if algo == "halvingDoubling" and kind == "all-to-all":
            continue
        total = 1
        for x in n:
            total *= x
        yield (f"{len(t)}d {t} {algo} {kind} {opt} active={active}",
               {"topology": t, "npus_count": n, "bandwidth": b, "latency": l},
               system([algo] * len(t), splits=2, opt=opt, active=active), None,
               [[coll(kind, 3 << 20)] for _ in range(total)])
    for algo, kind, groups in itertools.product(["ring", "direct", "halvingDoubling"], ["all-reduce", "all-gather"],
                                                [{"1": [0, 1, 2, 3], "2": [4, 5, 6, 7]}, {"1": [5, 1, 7, 2]},
                                                 {"1": [0, 1, 2], "2": [3, 4, 5], "3": [6, 7]}]):
        if algo == "halvingDoubling" and any(len(v) & (len(v) - 1) for v in groups.values()):
            continue
        wl = []
        for r in range(8):
            g = [k for k, v in groups.items() if r in v]
            wl.append([coll(kind, 3 << 20, pg_name=g[0])] if g else
                      [Node.make(0, N.COMP_NODE, duration_micros=1, is_cpu_op=False)])
        yield (f"groups {algo} {kind} {groups}", one_d("Ring", 8), system([algo], splits=2), groups, wl)
    for seed in range(8):
        yield (f"random dag {seed}", one_d("Switch", 4, 200.0, 500.0), system(["ring"], splits=2), None,
               random_dag(seed, 4))
    c = lambda i, us, **kw: Node.make(i, N.COMP_NODE, duration_micros=us, is_cpu_op=False, **kw)  # noqa: E731
    yield ("skewed all-reduce", one_d("Ring", 2), system(["ring"]), None,
           [[c(0, 100), coll("all-reduce", 16 << 20, 1, data_deps=[0])], [coll("all-reduce", 16 << 20, 1)]])
    snd = lambda i, d, t, s, **kw: Node.make(i, N.COMM_SEND_NODE, comm_src=0, comm_dst=d, comm_tag=t, comm_size=s, is_cpu_op=False, **kw)  # noqa: E731
    rcv = lambda i, me, t, s, **kw: Node.make(i, N.COMM_RECV_NODE, comm_src=0, comm_dst=me, comm_tag=t, comm_size=s, is_cpu_op=False, **kw)  # noqa: E731
    yield ("send/recv", one_d("Ring", 4), system(["ring"]), None,
           [[snd(0, 1, 5, 1 << 20), c(1, 3), snd(2, 2, 6, 1 << 18, data_deps=[0]), snd(3, 1, 5, 1 << 19, data_deps=[2])],
            [c(0, 20), rcv(1, 1, 5, 1 << 20, data_deps=[0]), rcv(2, 1, 5, 1 << 19), c(3, 1, data_deps=[2])],
            [rcv(0, 2, 6, 1 << 18), c(1, 7)], [c(0, 2)]])
    ld = lambda i, s, **kw: Node.make(i, N.MEM_LOAD_NODE, tensor_size=s, is_cpu_op=False, **kw)  # noqa: E731
    st = lambda i, s, **kw: Node.make(i, N.MEM_STORE_NODE, tensor_size=s, is_cpu_op=False, **kw)  # noqa: E731
    mem_wl = [[ld(0, 10**6), c(1, 5), st(2, 3 * 10**6, data_deps=[0])], [ld(0, 2 * 10**6)],
              [c(0, 1), ld(1, 10**6, data_deps=[0])], [st(0, 5 * 10**5), ld(1, 10**5)]]
    for mem in [{"memory-type": "PER_NPU_MEMORY_EXPANSION", "remote-mem-latency": 700, "remote-mem-bw": 50},
                {"memory-type": "MEMORY_POOL", "remote-mem-latency": 700, "remote-mem-bw": 50},
                {"memory-type": "PER_NODE_MEMORY_EXPANSION", "remote-mem-latency": 700, "remote-mem-bw": 50,
                 "num-nodes": 2, "num-npus-per-node": 2}]:
        yield (f"remote memory {mem['memory-type']}", one_d("Switch", 4, 100.0, 500.0), system(["ring"]), None,
               mem_wl, mem)
    roof = system(["ring"], **{"roofline-enabled": 1, "peak-perf": 100})
    yield ("roofline", one_d("Switch", 2), roof, None,
           [[Node.make(0, N.COMP_NODE, num_ops=10**12, tensor_size=10**9, is_cpu_op=False),
             Node.make(1, N.COMP_NODE, num_ops=10**9, tensor_size=10**9, is_cpu_op=False, data_deps=[0])],
            [Node.make(0, N.COMP_NODE, num_ops=3 * 10**9, tensor_size=7 * 10**8, is_cpu_op=False),
             Node.make(1, N.COMP_NODE, duration_micros=4, is_cpu_op=True)]])


def aware_cases():
    """Cases for the congestion-aware binary (one dimension; upstream crashes on a 2-NPU ring)."""
    one_d = lambda t, n: {"topology": [t], "npus_count": [n], "bandwidth": [100.0], "latency": [1000.0]}  # noqa: E731
    for algo, kind, topo in itertools.product(["ring", "direct", "halvingDoubling"], list(CT),
                                              ["Ring", "FullyConnected", "Switch"]):
        if algo == "halvingDoubling" and kind == "all-to-all":
            continue
        yield (f"aware {algo} {kind} {topo} n=8", one_d(topo, 8), system([algo], splits=4), None,
               [[coll(kind, 1000003)] for _ in range(8)])
    # seed 3 is left out: there one rank starts the next collective while others still finish the
    # previous one, and upstream lets the two share links (astrasim times each collective alone)
    for seed in range(3):
        yield (f"aware random dag {seed}", one_d("Switch", 4), system(["ring"], splits=2), None, random_dag(seed, 4))


def aware_random_cases(count: int = 240, seed: int = 14):
    """Random single-collective cases for the congestion-aware binary: Ring (n >= 3; upstream
    crashes on a 2-NPU ring), Switch and FullyConnected with 2..12 NPUs (powers of two for
    halvingDoubling), the four collectives, ring / direct / windowed direct / halvingDoubling, 1..4 active
    chunks, 1..8 splits, link latency 0..3000 ns, endpoint delay 1..100 ns, and communicator
    groups (shuffled members). Concurrent chunks share links, so active chunks > 1 exercise
    the congestion model. Left out, because astrasim does not model it: two groups'
    collectives at once on a Ring, whose messages would share links (astrasim times each
    collective on its own; on Switch and FullyConnected disjoint groups share no link)."""
    rng = random.Random(seed)
    made = 0
    while made < count:
        topo = rng.choice(["Ring", "Switch", "FullyConnected"])
        kind = rng.choice(list(CT))
        algo = rng.choice(["ring", "ring", "direct", "direct", "halvingDoubling"])
        if algo == "direct" and rng.random() < 0.4:
            algo = f"direct{rng.randint(1, 4)}"
        if algo == "halvingDoubling" and kind == "all-to-all":
            algo = "direct"
        if algo == "halvingDoubling":
            n = rng.choice([4, 8] if topo == "Ring" else [2, 4, 8])
        else:
            n = rng.randint(3 if topo == "Ring" else 2, 12)
        active, splits = rng.randint(1, 4), rng.randint(1, 8)
        size = rng.choice([rng.randint(1 << 12, 1 << 18), rng.randint(1 << 18, 1 << 23)])
        net = {"topology": [topo], "npus_count": [n], "bandwidth": [round(rng.uniform(10, 400), 1)],
               "latency": [rng.choice([0, rng.randint(1, 3000)])]}
        delay = rng.choice([1, 10, 10, 100])
        sysj = system([algo], splits=splits, active=active, **{"endpoint-delay": delay})
        groups, wl = None, [[coll(kind, size)] for _ in range(n)]
        if n >= 4 and algo == "ring" and rng.random() < 0.3:      # two groups, members shuffled
            members = list(range(n))
            rng.shuffle(members)
            groups = {"1": sorted(members[:n // 2]) if rng.random() < 0.5 else members[:n // 2],
                      "2": members[n // 2:]}
            idle = Node.make(0, N.COMP_NODE, duration_micros=1, is_cpu_op=False)
            wl = [[coll(kind, size, pg_name="1")] if r in groups["1"] else
                  [idle] if topo == "Ring" else [coll(kind, size, pg_name="2")] for r in range(n)]
        made += 1
        yield (f"aware random {made}: {algo} {kind} {topo} n={n} active={active} splits={splits} size={size}"
               + (" groups" if groups else ""), net, sysj, groups, wl)


def main(out_path: str) -> None:
    """Without flags: the mixed set of both binaries. ``--aware-random``: only
    :func:`aware_random_cases` from ``ASTRASIM_UPSTREAM_BIN_AWARE``."""
    records = []
    if "--exports" in sys.argv:
        pairs = [a.split("=", 1) for a in sys.argv[1:] if "=" in a and not a.startswith("--")]
        records = record_exports(os.environ["ASTRASIM_UPSTREAM_BIN"], pairs)
        source = "ASTRA-Sim analytical congestion-unaware binary, astra-sim @518bd51, agentservesim export-chakra steps"
        _write(out_path, source, records)
        return
    if "--aware-random" in sys.argv:
        runs = [(os.environ["ASTRASIM_UPSTREAM_BIN_AWARE"], "congestion_aware", aware_random_cases())]
        source = "ASTRA-Sim analytical congestion-aware binary, astra-sim @518bd51, random cases"
    else:
        runs = [(os.environ["ASTRASIM_UPSTREAM_BIN"], "analytical", cases())]
        if os.environ.get("ASTRASIM_UPSTREAM_BIN_AWARE"):
            runs.append((os.environ["ASTRASIM_UPSTREAM_BIN_AWARE"], "congestion_aware", aware_cases()))
        source = "ASTRA-Sim analytical binaries (congestion unaware/aware), astra-sim @518bd51"
    for binary, backend, case_list in runs:
        records += record(binary, backend, case_list)
    _write(out_path, source, records)


def _write(out_path: str, source: str, records: list) -> None:
    with open(out_path, "w") as f:  # one case per line keeps diffs readable
        f.write(json.dumps({"source": source})[:-1] + ',\n"cases": [\n')
        f.write(",\n".join(json.dumps(r, separators=(",", ":")) for r in records))
        f.write("\n]}\n")
    print(f"recorded {len(records)} cases into {out_path}")


def record_exports(binary: str, pairs) -> list[dict]:
    """One case per exported step folder (``name=folder``): its files as the binary reads them."""
    import base64
    import gzip

    import yaml
    records = []
    for name, folder in pairs:
        args = [binary, "--workload-configuration=step", "--system-configuration=system.json",
                "--network-configuration=network.yml", "--remote-memory-configuration=remote_memory.json"]
        groups = None
        if os.path.exists(f"{folder}/comm_group.json"):
            groups = json.load(open(f"{folder}/comm_group.json"))
            args.append("--comm-group-configuration=comm_group.json")
        out = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=folder).stdout
        lines = re.findall(r"sys\[\d+\] finished, \d+ cycles, exposed communication \d+ cycles\.", out)
        lines.sort(key=lambda s: int(re.search(r"sys\[(\d+)\]", s).group(1)))
        ranks = []
        while os.path.exists(f"{folder}/step.{len(ranks)}.et"):
            ranks.append(open(f"{folder}/step.{len(ranks)}.et", "rb").read())
        if len(lines) != len(ranks):
            print("upstream produced no result for", name, file=sys.stderr)
            continue
        graphs: list = []
        for r in ranks:
            if r not in graphs:
                graphs.append(r)
        records.append({"name": name, "backend": "analytical", "network": yaml.safe_load(open(f"{folder}/network.yml")),
                        "system": json.load(open(f"{folder}/system.json")), "groups": groups,
                        "memory": json.load(open(f"{folder}/remote_memory.json")),
                        "workload": {"et_gzip_base64": [base64.b64encode(gzip.compress(g, mtime=0)).decode()
                                                        for g in graphs],
                                     "rank_graph": [graphs.index(r) for r in ranks]},
                        "expected": json.load(open(f"{folder}/expected.json")), "upstream": lines})
    return records


def record(binary: str, backend: str, case_list) -> list[dict]:
    records = []
    with tempfile.TemporaryDirectory() as d:
        for name, net, sysj, groups, wl, *rest in case_list:
            memory = rest[0] if rest else {"memory-type": "NO_MEMORY_EXPANSION"}
            with open(f"{d}/net.yml", "w") as f:
                for k, v in net.items():
                    f.write(f"{k}: {json.dumps(v)}\n")
            json.dump(sysj, open(f"{d}/sys.json", "w"))
            json.dump(memory, open(f"{d}/mem.json", "w"))
            write_workload(f"{d}/wl", wl)
            args = [binary, f"--workload-configuration={d}/wl", f"--system-configuration={d}/sys.json",
                    f"--network-configuration={d}/net.yml", f"--remote-memory-configuration={d}/mem.json"]
            if groups:
                json.dump(groups, open(f"{d}/g.json", "w"))
                args.append(f"--comm-group-configuration={d}/g.json")
            out = subprocess.run(args, capture_output=True, text=True, timeout=300).stdout
            lines = re.findall(r"sys\[\d+\] finished, \d+ cycles, exposed communication \d+ cycles\.", out)
            lines.sort(key=lambda s: int(re.search(r"sys\[(\d+)\]", s).group(1)))
            if len(lines) != len(wl):
                print("upstream produced no result for", name, file=sys.stderr)
                continue
            ranks = [[node_dict(n) for n in rank] for rank in wl]
            workload = {"every_rank": ranks[0], "ranks": len(ranks)} if all(r == ranks[0] for r in ranks) \
                else {"per_rank": ranks}
            records.append({"name": name, "backend": backend, "network": net, "system": sysj,
                            "groups": groups, "memory": memory, "workload": workload, "upstream": lines})
    return records


if __name__ == "__main__":
    main(next(a for a in sys.argv[1:] if not a.startswith("--")))
