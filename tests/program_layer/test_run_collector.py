"""A run leaves the garbage collector as it found it: paused while a simulation is built, the
build's objects frozen out of its reach while the simulation runs (program_layer/run.py), and
afterwards enabled and unfrozen again, whether the run succeeds, fails or the caller froze
objects of its own."""
from __future__ import annotations

import gc

import pytest

from llmservingsim.errors import ConfigError
from program_layer.config import load_config
from program_layer.run import build_simulation

CELL = "examples/validation/RTXPRO6000-Llama-3.1-8B-sharegpt300-sps10.yaml"


@pytest.fixture
def sim():
    from llmservingsim.paths import examples_dir
    return build_simulation(load_config(examples_dir().parent / CELL))


def test_build_and_run_restore_the_collector(sim):
    assert gc.isenabled() and gc.get_freeze_count() == 0
    seen = []
    finished = sim.cluster.on_request_finished

    def spy(info):
        if not seen:        # once: get_freeze_count walks every frozen object
            seen.append(gc.get_freeze_count())
        finished(info)
    sim.cluster.on_request_finished = spy
    sim.run()
    assert seen and seen[0] > 0                        # frozen while it ran
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_a_failed_build_reenables_the_collector():
    with pytest.raises(ConfigError):
        build_simulation({"workload": {"generator": "swebench"}, "parallelism": {"tp": 0}})
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled():
    gc.disable()
    try:
        with pytest.raises(ConfigError):
            build_simulation({"workload": {"generator": "swebench"}, "parallelism": {"tp": 0}})
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_objects_the_caller_froze_stay_frozen(sim):
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        sim.run()
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
