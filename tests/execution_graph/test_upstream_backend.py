"""network: {backend: astra-sim}: each distinct step graph is run by the user's own upstream
ASTRA-Sim binary. CI has no upstream build, so a fake binary stands in: it appends its call to a
log and runs our `python -m astrasim` on the same files (which prints upstream's report format;
tests/astrasim/test_upstream_golden.py checks the two agree)."""
from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from astrasim import NodeType
from llmservingsim.errors import ConfigError, SimError
from llmservingsim.execution_graph import step_graphs, system_simulator
from llmservingsim.perf_model import batch_shape
from program_layer.run import build_simulation

REPO = Path(__file__).resolve().parents[2]


def fake_binary(tmp_path: Path, body: str = "") -> Path:
    path = tmp_path / "AstraSim_Fake"
    log = tmp_path / "calls.log"
    path.write_text(f"#!{sys.executable}\n"
                    "import os, subprocess, sys\n"
                    f"open({str(log)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
                    f"{body}"
                    f"env = dict(os.environ, PYTHONPATH={str(REPO / 'astra-sim')!r} + os.pathsep + {str(REPO)!r})\n"
                    "sys.exit(subprocess.run([sys.executable, '-m', 'astrasim', *sys.argv[1:]], env=env).returncode)\n")
    path.chmod(0o755)
    return path


def config(binary, tp=2, pp=1) -> dict:
    network = {"backend": "astra-sim"} if binary is None else {"backend": "astra-sim", "binary": str(binary)}
    return {"model": "meta-llama/Llama-3.1-8B", "hardware": "RTXPRO6000", "parallelism": {"tp": tp, "pp": pp},
            "workload": {"generator": "swebench", "programs": 1, "rate_jps": 0.1, "seed": 0}, "network": network}


@pytest.mark.parametrize("tp,pp", [(2, 1), (2, 2)])
def test_each_distinct_step_is_run_once_by_the_binary_and_its_report_is_the_step_comm(tmp_path, tp, pp):
    binary = fake_binary(tmp_path)
    sim = build_simulation(config(binary, tp, pp))
    comm = sim.timer.comm
    shapes = [batch_shape([(512, 0)], [1000] * 8), batch_shape([], [500] * 4), batch_shape([(512, 7)], [9] * 8)]
    got = [comm.exposed_comm_ns(s) for s in shapes]
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert len(calls) == comm.runs == 2                      # 520 tokens twice: memoised
    assert "--workload-configuration=step" in calls[0] and ("--comm-group-configuration=comm_group.json" in calls[0])
    # what the same graphs give in-process with the exported system (endpoint delay 1 ns, as upstream needs)
    for shape, value in zip(shapes, got):
        graphs = step_graphs(comm.perf, shape, tp, pp, comm.inner)
        res = system_simulator(sim.device, tp, pp, comm.network_for(shape.num_tokens), comm.system).run(graphs)
        compute = 1000 * sum(n.duration_micros for s in range(pp) for n in graphs[s * tp] if n.type == NodeType.COMP_NODE)
        assert value == max(res.finish_ns) - compute
        # the device's 0 ns endpoint delay is run as 1 ns (upstream aborts on 0); sub-group collectives
        # (PP) pay upstream's fixed 10 ns either way
        assert value >= comm.inner.exposed_comm_ns(shape)


# One program of two calls, the second extending the first's context after a tool gap: a
# prefill, decode steps and a prefix-cached prefill, i.e. a handful of distinct step graphs
# (each one a run of the binary: two Python processes). A generated SWE-bench program ran 47
# calls and 40 binaries, 13 s of CPU, for the same check.
TWO_CALLS = ('{"session_id": "s0", "arrival_time_ns": 0, "sub_requests": ['
             '{"input_toks": 300, "output_toks": 20, "tool_duration_ns": 100000000, "tool_name": "bash"}, '
             '{"input_toks": 350, "output_toks": 10, "tool_duration_ns": 0, "tool_name": "bash"}]}\n')


def run_on_fake_binary(tmp_path, parallelism: str) -> subprocess.CompletedProcess:
    """``agentservesim run`` of a two-call program (``TWO_CALLS``) on the fake binary (a child process)."""
    binary = fake_binary(tmp_path)
    (tmp_path / "w.jsonl").write_text(TWO_CALLS)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"model: meta-llama/Llama-3.1-8B\nhardware: RTXPRO6000\nparallelism: {parallelism}\n"
                   f"workload: {{path: {tmp_path / 'w.jsonl'}}}\n"
                   f"network: {{backend: astra-sim, binary: {binary}}}\n")
    return subprocess.run([sys.executable, "-m", "program_layer.cli", "run", str(cfg), "--quiet", "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, cwd=REPO)


def test_a_serving_run_on_the_binary_completes_and_says_which_backend(tmp_path):
    res = run_on_fake_binary(tmp_path, "{tp: 2}")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "calls.log").read_text().count("\n") >= 1
    assert "backend: astra-sim" in (tmp_path / "out" / "config.yaml").read_text()
    with (tmp_path / "out" / "calls.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["output_tokens"] for r in rows] == ["20", "10"]          # both calls served,
    assert int(rows[1]["cached_tokens"]) > 0                           # the second on a prefix hit


def test_a_failing_binary_is_one_error_naming_the_backend(tmp_path):
    binary = fake_binary(tmp_path, body="print('Assertion failed: EventQueue.cpp:33'); sys.exit(134)\n")
    sim = build_simulation(config(binary))
    with pytest.raises(SimError) as exc:
        sim.timer.comm.exposed_comm_ns(batch_shape([], [100]))
    assert exc.value.key == "network.backend" and "exit status 134" in exc.value.message
    assert "EventQueue.cpp:33" in exc.value.message


def test_no_binary_is_one_config_error(tmp_path, monkeypatch):
    monkeypatch.delenv("ASTRASIM_BIN", raising=False)
    with pytest.raises(ConfigError) as exc:
        build_simulation(config(None))
    assert exc.value.key == "network.backend" and "ASTRASIM_BIN" in exc.value.message
    with pytest.raises(ConfigError) as exc:
        build_simulation(config(tmp_path / "nope"))
    assert exc.value.key == "network.binary" and "not an executable file" in exc.value.message
    monkeypatch.setenv("ASTRASIM_BIN", str(fake_binary(tmp_path)))
    assert build_simulation(config(None)).timer.comm.binary == str((tmp_path / "AstraSim_Fake").resolve())


def test_a_pipelined_run_on_the_binary_is_one_error_naming_the_backend(tmp_path):
    """With pp > 1 the engine times each pipeline stage (stage_comm), which the binary cannot:
    the run stops with one error naming network.backend, exit 2, not a traceback."""
    res = run_on_fake_binary(tmp_path, "{tp: 2, pp: 2}")
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert "key 'network.backend'" in res.stderr and "cannot time pipeline stages" in res.stderr
