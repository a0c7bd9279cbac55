"""The ``astra-sim`` network backend: a user's own upstream ASTRA-Sim binary times each step.

``UpstreamCommModel`` is a ``CommModel`` (``step_timer``) around the run's ``GraphCommModel``:
for every distinct token count it writes the step's per-rank Chakra graphs with the ASTRA-Sim
configs (the same files ``export-chakra`` writes: ``write_step_folder``), runs the binary on
them, and takes the step's communication as the latest rank's finish minus the graph's own
compute (the step is a dependency chain: embedding / recv, layers with their all-reduces,
send / head). It is memoised by token count: on a chain the communication does not depend on
the compute durations, so one upstream run per token count is exact. The binary is the
user's, built from source (docs/topologies.md); nothing is downloaded.

Invariant: a binary that fails, times out or prints no per-rank report is one ``SimError``
naming ``network.backend``, the binary, the step and the end of its output.
"""
from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

from astrasim import NodeType

from .errors import SimError
from .execution_graph import GraphCommModel, comm_groups, step_graphs, upstream_system, write_step_folder
from .perf_model import BatchShape, PerformanceModel

REPORT = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles, exposed communication (\d+) cycles")
TIMEOUT_S = 600


class UpstreamCommModel:
    def __init__(self, inner: GraphCommModel, perf: PerformanceModel, binary: str, system: dict):
        self.inner = inner
        self.perf = perf
        self.binary = binary
        self.system = upstream_system(system)[0]
        self._memo: dict[int, int] = {}
        self.runs = 0           # upstream invocations (one per distinct token count)

    # what export-chakra, the timer and the summary read of a comm model
    @property
    def regimes(self) -> tuple:
        return self.inner.regimes

    def network_for(self, tokens: int) -> dict:
        return self.inner.network_for(tokens)

    def simulator_for(self, tokens: int):
        return self.inner.simulator_for(tokens)

    def stage_comm(self, tokens: int):
        """What the pipeline engine (pp > 1: llmservingsim.pipeline) times each stage with. The
        binary runs whole-step graphs only, so a pipelined run cannot be cross-checked on it:
        one clear error rather than an in-process timing passed off as upstream's."""
        raise SimError("the astra-sim backend runs whole-step graphs and cannot time pipeline stages "
                       f"(parallelism.pp = {self.inner.pp}): use backend analytical, congestion-aware or "
                       "graph with pp > 1", key="network.backend")

    def exposed_comm_ns(self, shape: BatchShape) -> int:
        t = shape.num_tokens
        v = self._memo.get(t)
        if v is None:
            v = self._memo[t] = self._run(shape)
        return v

    def _run(self, shape: BatchShape) -> int:
        inner = self.inner
        graphs = step_graphs(self.perf, shape, inner.tp, inner.pp, inner)
        groups = comm_groups(inner.tp, inner.pp)
        what = f"the astra-sim backend ({self.binary}) on a step of {shape.num_tokens} tokens"
        with tempfile.TemporaryDirectory(prefix="agentservesim-upstream-") as tmp:
            d = Path(tmp)
            args = write_step_folder(d, graphs, self.system, self.network_for(shape.num_tokens), groups)
            try:
                res = subprocess.run([self.binary, *args], cwd=d, capture_output=True, text=True,
                                     timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise SimError(f"{what}: no result within {TIMEOUT_S} s", key="network.backend") from None
            except OSError as exc:
                raise SimError(f"{what}: cannot run it ({exc.strerror})", key="network.backend") from None
        self.runs += 1
        finish = {int(r): int(f) for r, f, _ in REPORT.findall(res.stdout)}
        if res.returncode != 0 or sorted(finish) != list(range(len(graphs))):
            tail = " | ".join((res.stdout + res.stderr).strip().splitlines()[-3:])
            raise SimError(f"{what}: exit status {res.returncode}, {len(finish)} of {len(graphs)} rank reports "
                           f"(last output: {tail[-300:] or 'none'})", key="network.backend")
        compute_ns = 1000 * sum(n.duration_micros for s in range(inner.pp) for n in graphs[s * inner.tp]
                                if n.type == NodeType.COMP_NODE)
        return max(max(finish.values()) - compute_ns, 0)
