"""Phase plans: the message pattern of one collective algorithm on one logical ring.

A :class:`PhasePlan` is the list of communication steps one rank performs in one collective
phase (one dimension, one chunk). Every rank of the ring runs the same plan. Message sizes and
step counts follow ASTRA-Sim's native algorithms (``Ring``, ``AllToAll`` = "direct",
``HalvingDoubling``), read from the upstream source for facts only:

=================  =================  ==============================  ===============  ===========
algorithm          collective         steps (messages)                message bytes    final bytes
=================  =================  ==============================  ===============  ===========
ring               all-reduce         2(n-1), first n-1 reduce        D//n             D
ring               reduce-scatter     n-1, all reduce                 D//n             D//n
ring               all-gather         n-1                             D                D*n
ring               all-to-all         n(n-1)/2                        D//n             D
direct             all-reduce         2 rounds to all n-1 peers,      D//n             D
                                      first round reduces
direct             reduce-scatter     1 round, reduces                D//n             D//n
direct             all-gather         1 round                         D                D*n
direct             all-to-all         1 round                         D//n             D
halvingDoubling    all-reduce         2 log2 n (partner i xor o)      D/2 ... halving  D
                                                                      then doubling
halvingDoubling    reduce-scatter     log2 n, offsets 1,2,...,n/2     D/2, D/4, ...    D//n
halvingDoubling    all-gather         log2 n, offsets n/2,...,1       D, 2D, 4D, ...   D*n
=================  =================  ==============================  ===============  ===========

``D`` is the phase's input bytes (for all-gather: what each rank contributes). The direct
plans here (rounds to all peers, split into batches of ``window`` peers) are used only by the
congestion-aware backend; on the congestion-unaware backend direct phases are timed exactly by
:mod:`astrasim.collectives.direct_sim`.
A reducing step is followed by a local reduction of ``reduce_bytes`` (``3*floor(b/M)``): ring
reduces each received message (``D//n``); direct reduces once per round (the pieces are
processed in parallel); halvingDoubling reduces after each halving step except the last, with
the size of the *next* message (upstream processes the packet it is about to send), and never
after a step of size ``D/2`` alone -- so n = 2 has no reduction term at all. These rules were
checked against the upstream binary (see the package README).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import WorkloadError

KINDS = ("all-reduce", "reduce-scatter", "all-gather", "all-to-all")


@dataclass(frozen=True, slots=True)
class Step:
    """One step: send ``size`` bytes to each peer and wait for the peers' messages.

    ``offsets``: with ``xor`` False rank ``i`` sends to ``i+o`` and receives from ``i-o``
    (mod n) for each ``o``; with ``xor`` True it exchanges with ``i ^ o``.
    """

    size: int
    offsets: tuple[int, ...]
    xor: bool = False
    reduce_bytes: int = 0     # local reduction after this step's messages arrive (0: none)


@dataclass(frozen=True, slots=True)
class PhasePlan:
    steps: tuple[Step, ...]
    final_size: int


def _ring(kind: str, n: int, d: int) -> PhasePlan:
    if kind == "all-reduce":
        m = d // n
        return PhasePlan(tuple(Step(m, (1,), reduce_bytes=m if i < n - 1 else 0)
                               for i in range(2 * (n - 1))), d)
    if kind == "reduce-scatter":
        m = d // n
        return PhasePlan((Step(m, (1,), reduce_bytes=m),) * (n - 1), m)
    if kind == "all-gather":
        return PhasePlan((Step(d, (1,)),) * (n - 1), d * n)
    return PhasePlan((Step(d // n, (1,)),) * (n * (n - 1) // 2), d)


def _direct_round(m: int, n: int, window: int, reduce: bool) -> list[Step]:
    peers = list(range(1, n))
    w = len(peers) if window <= 0 else min(window, len(peers))
    return [Step(m, tuple(peers[i:i + w]), reduce_bytes=m if reduce else 0) for i in range(0, len(peers), w)]


def _direct(kind: str, n: int, d: int, window: int) -> PhasePlan:
    if kind == "all-reduce":
        m = d // n
        return PhasePlan(tuple(_direct_round(m, n, window, True) + _direct_round(m, n, window, False)), d)
    if kind == "reduce-scatter":
        return PhasePlan(tuple(_direct_round(d // n, n, window, True)), d // n)
    if kind == "all-gather":
        return PhasePlan(tuple(_direct_round(d, n, window, False)), d * n)
    return PhasePlan(tuple(_direct_round(d // n, n, window, False)), d)


def _halving_doubling(kind: str, n: int, d: int) -> PhasePlan:
    if n & (n - 1):
        raise WorkloadError(f"halvingDoubling needs a power-of-two number of NPUs, got {n}")
    if kind == "all-to-all":
        raise WorkloadError("halvingDoubling does not implement all-to-all (use ring or direct)")
    log = n.bit_length() - 1
    steps = []
    if kind == "all-gather":
        msg, off = d, n // 2
        for _ in range(log):
            steps.append(Step(msg, (off,), xor=True))
            msg, off = msg * 2, off // 2
        return PhasePlan(tuple(steps), d * n)
    # all-reduce / reduce-scatter: halve towards offset n/2, all-reduce then doubles back.
    msg, off, halving = d // 2, 1, True
    for _ in range(2 * log if kind == "all-reduce" else log):
        steps.append(Step(msg, (off,), xor=True))
        if halving:
            off, msg = off * 2, msg // 2
            if off == n and kind == "all-reduce":
                halving = False
                off, msg = off // 2, msg * 2
        else:
            off, msg = off // 2, msg * 2
    for k in range(log - 1):  # reduce the next halving message after each halving step but the last
        steps[k] = Step(steps[k].size, steps[k].offsets, True, steps[k + 1].size)
    return PhasePlan(tuple(steps), d if kind == "all-reduce" else d // n)


def plan_phase(algorithm: str, kind: str, n: int, data_size: int, window: int = -1) -> PhasePlan:
    """The plan of ``kind`` with ``algorithm`` on ``n`` ranks for ``data_size`` input bytes."""
    if kind not in KINDS:
        raise ValueError(f"unknown collective kind {kind!r}")
    if n <= 1:
        return PhasePlan((), data_size)
    if algorithm == "ring":
        return _ring(kind, n, data_size)
    if algorithm == "direct":
        return _direct(kind, n, data_size, window)
    if algorithm == "halvingDoubling":
        return _halving_doubling(kind, n, data_size)
    raise ValueError(f"unknown collective algorithm {algorithm!r}")
