"""A one-phase collective's chunks, when every member starts together, in closed form.

``CollectivePlanner._per_rank_chunks`` (congestion-unaware backend) runs ``chunks`` chunks
through ``active`` slots per rank, each rank starting its next chunk when one of its slots is
free. When the members start together and one chunk ends at the same time on every member,
every round of ``active`` chunks starts when the last ended: ``start + ceil(chunks / active)
* T``. The property: for random networks, algorithms, chunk counts, groups (including rings
that wrap over a longer path, whose members finish apart) and start times (equal or not), the
planner's answer is the slot-by-slot loop's, written out here as the oracle.
"""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from astrasim import SystemConfig, SystemSimulator
from astrasim.config import parse_network
from astrasim.config.system import parse_implementation
from astrasim.network import AnalyticalNetwork

TOPOLOGIES = ("Ring", "Switch", "FullyConnected")


def _loop(planner, impl, kind, members, chunk, chunks, local, starts):
    """The slot-by-slot schedule: each chunk starts on each rank at its earliest free slot."""
    k = planner.system.active_chunks_per_dimension
    slots = [[s] * k for s in starts]
    finish = list(starts)
    for _ in range(chunks):
        st_ = [min(sl) for sl in slots]
        base = min(st_)
        fin, _ = planner._phase_finish(impl, kind, members, chunk, local, tuple(x - base for x in st_))
        for i, f in enumerate(fin):
            sl = slots[i]
            sl[sl.index(st_[i])] = base + f
            finish[i] = max(finish[i], base + f)
    return tuple(finish)


@st.composite
def _cases(draw):
    d = draw(st.integers(1, 2))
    spec = {"topology": [draw(st.sampled_from(TOPOLOGIES)) for _ in range(d)],
            "npus_count": [draw(st.integers(2, 4)) for _ in range(d)],
            "bandwidth": [draw(st.floats(1.0, 900.0)) for _ in range(d)],
            "latency": [draw(st.floats(0.0, 5000.0)) for _ in range(d)]}
    n = 1
    for x in spec["npus_count"]:
        n *= x
    algorithm = draw(st.sampled_from(["ring", "direct", "oneRing"]))
    active = draw(st.integers(1, 3))
    members = tuple(draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=n, unique=True)))
    same = draw(st.booleans())
    start = draw(st.integers(0, 10 ** 6))
    starts = (start,) * len(members) if same else tuple(
        draw(st.integers(0, 10 ** 6)) for _ in members)
    return (spec, algorithm, active, members, starts, draw(st.sampled_from(["all-reduce", "all-gather"])),
            draw(st.integers(1, 1 << 22)), draw(st.integers(1, 9)), draw(st.booleans()))


@settings(max_examples=300, deadline=None)
@given(_cases())
def test_chunks_of_members_in_step_are_rounds_of_the_loop(case):
    spec, algorithm, active, members, starts, kind, chunk, chunks, local = case
    impl = parse_implementation(algorithm, "t", "k")
    dims = len(spec["topology"])
    cfg = SystemConfig(active_chunks_per_dimension=active,
                       implementations={k: (impl,) * dims for k in ("all-reduce", "all-gather")})
    planner = SystemSimulator(AnalyticalNetwork(parse_network(spec)), cfg).planner
    got = planner._per_rank_chunks(impl, kind, members, chunk, chunks, local, starts)
    assert got == _loop(planner, impl, kind, members, chunk, chunks, local, starts)


def test_a_two_gpu_ring_in_rounds():
    """Exact numbers: 2 NPUs on a ring of 100 GB/s (binary) and 500 ns links, all-reduce
    chunks of 1 MiB. One chunk: 2 messages of 512 KiB, int(500 + 524288 / 107.374) = 5,382 ns
    each, 3 endpoint delays of 10 ns, one reduction of 3 * int(524288 / 1600) = 981 ns:
    11,775 ns. 5 chunks through 2 slots from a common start of 1,000 ns: 3 rounds."""
    spec = {"topology": ["Ring"], "npus_count": [2], "bandwidth": [100.0], "latency": [500.0]}
    impl = parse_implementation("ring", "t", "k")
    cfg = SystemConfig(active_chunks_per_dimension=2, implementations={"all-reduce": (impl,)})
    planner = SystemSimulator(AnalyticalNetwork(parse_network(spec)), cfg).planner
    one, _ = planner._phase_finish(impl, "all-reduce", (0, 1), 1 << 20, False, (0, 0))
    assert one == (11775, 11775)
    assert planner._per_rank_chunks(impl, "all-reduce", (0, 1), 1 << 20, 5, False, (1000, 1000)) \
        == (36325, 36325)
