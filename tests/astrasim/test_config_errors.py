"""Bad configuration files give one clear error naming the file and the key."""
from __future__ import annotations

import json

import pytest

from astrasim import SystemConfig, SystemSimulator, load_comm_groups, load_network, load_remote_memory, load_system
from astrasim.errors import ConfigError

GOOD_SYS = {"preferred-dataset-splits": 4, "local-mem-bw": 1600, "endpoint-delay": 10,
            "all-reduce-implementation": ["ring"], "all-gather-implementation": ["ring"],
            "reduce-scatter-implementation": ["ring"], "all-to-all-implementation": ["direct"]}


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text if isinstance(text, str) else json.dumps(text))
    return p


@pytest.mark.parametrize("text,key", [
    ("topology: [Ring]\nnpus_count: [4]\nbandwidth: [50]\n", "latency"),
    ("topology: [Ring, Switch]\nnpus_count: [4]\nbandwidth: [50, 50]\nlatency: [1, 1]\n", "npus_count"),
    ("topology: [Torus]\nnpus_count: [4]\nbandwidth: [50]\nlatency: [1]\n", "topology"),
    ("topology: [Ring]\nnpus_count: [4]\nbandwidth: [-5]\nlatency: [1]\n", "bandwidth"),
    ("topology: [Ring]\nnpus_count: [2.5]\nbandwidth: [5]\nlatency: [1]\n", "npus_count"),
    ("topology: [Ring]\nnpus_count: [4]\nbandwidth: [fast]\nlatency: [1]\n", "bandwidth"),
])
def test_bad_network(tmp_path, text, key):
    p = write(tmp_path, "net.yml", text)
    with pytest.raises(ConfigError) as e:
        load_network(p)
    assert str(p) in str(e.value) and f"key '{key}'" in str(e.value)


def test_network_yaml_alias_is_refused_naming_its_line(tmp_path):
    p = write(tmp_path, "net.yml", "topology: &t [Ring]\nnpus_count: [4]\nbandwidth: [5]\nlatency: *t\n")
    with pytest.raises(ConfigError) as e:
        load_network(p)
    assert str(e.value) == f"{p}:4: invalid YAML: aliases are not supported"


def test_errors_are_astrasims_own(tmp_path):
    """astrasim's errors are its own classes (nothing of the engine), one hierarchy."""
    from astrasim.errors import AstraSimError, StuckError, WorkloadError
    for cls in (ConfigError, StuckError, WorkloadError):
        assert issubclass(cls, AstraSimError) and cls.__module__ == "astrasim.errors"
    assert str(ConfigError("bad", file="f.yml", line=3, key="k")) == "f.yml:3, key 'k': bad"


def test_network_yaml_syntax_error_names_line(tmp_path):
    p = write(tmp_path, "net.yml", "topology: [Ring\nnpus_count: 4\n")
    with pytest.raises(ConfigError, match=rf"{p}:\d+: invalid YAML"):
        load_network(p)


@pytest.mark.parametrize("change,key", [
    ({"preferred-dataset-splits": None}, "preferred-dataset-splits"),
    ({"preferred-dataset-splits": 0}, "preferred-dataset-splits"),
    ({"local-mem-bw": "fast"}, "local-mem-bw"),
    ({"all-reduce-implementation": ["doubleBinaryTree"]}, "all-reduce-implementation"),
    ({"all-gather-implementation": ["ringy"]}, "all-gather-implementation"),
    ({"all-to-all-implementation": None}, "all-to-all-implementation"),
    ({"collective-optimization": "fancy"}, "collective-optimization"),
    ({"scheduling-policy": "RANDOM"}, "scheduling-policy"),
    ({"endpoint-delay": -1}, "endpoint-delay"),
    ({"roofline-enabled": 1}, "peak-perf"),
])
def test_bad_system(tmp_path, change, key):
    data = dict(GOOD_SYS)
    for k, v in change.items():
        if v is None:
            data.pop(k)
        else:
            data[k] = v
    p = write(tmp_path, "sys.json", data)
    with pytest.raises(ConfigError) as e:
        load_system(p)
    assert str(p) in str(e.value) and f"key '{key}'" in str(e.value)


def test_good_system_and_direct_window(tmp_path):
    cfg = load_system(write(tmp_path, "sys.json", dict(GOOD_SYS, **{"all-to-all-implementation": ["direct4"]})))
    assert cfg.preferred_dataset_splits == 4 and cfg.implementations["all-to-all"][0].window == 4


def test_invalid_json_names_line(tmp_path):
    p = write(tmp_path, "sys.json", '{\n  "a": 1,\n  oops\n}')
    with pytest.raises(ConfigError, match=rf"{p}:3: invalid JSON"):
        load_system(p)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read file"):
        load_system(tmp_path / "nope.json")


def test_implementation_count_must_match_dimensions(tmp_path):
    net = load_network(write(tmp_path, "n.yml", "topology: [Ring, Switch]\nnpus_count: [2, 2]\n"
                                               "bandwidth: [5, 5]\nlatency: [1, 1]\n"))
    sysp = write(tmp_path, "sys.json", GOOD_SYS)
    with pytest.raises(ConfigError) as e:
        SystemSimulator(net, load_system(sysp))
    assert str(sysp) in str(e.value) and "key 'all-reduce-implementation'" in str(e.value)


@pytest.mark.parametrize("data,key", [
    ({"0": [0, 1]}, "0"), ({"x": [0]}, "x"), ({"1": []}, "1"), ({"1": [0, 0]}, "1"), ({"2": [0, 9]}, "2"),
])
def test_bad_comm_groups(tmp_path, data, key):
    p = write(tmp_path, "g.json", data)
    with pytest.raises(ConfigError) as e:
        load_comm_groups(p, npus_count=4)
    assert str(p) in str(e.value) and f"key '{key}'" in str(e.value)


@pytest.mark.parametrize("data,key", [
    ({"memory-type": "HUGE"}, "memory-type"),
    ({"memory-type": "MEMORY_POOL"}, "remote-mem-bw"),
    ({"memory-type": "PER_NODE_MEMORY_EXPANSION", "remote-mem-bw": 5}, "num-npus-per-node"),
])
def test_bad_remote_memory(tmp_path, data, key):
    p = write(tmp_path, "m.json", data)
    with pytest.raises(ConfigError) as e:
        load_remote_memory(p)
    assert str(p) in str(e.value) and f"key '{key}'" in str(e.value)


def test_in_process_defaults():
    cfg = SystemConfig.with_algorithm("halvingDoubling", dims=2, preferred_dataset_splits=2)
    assert cfg.implementations["all-reduce"][1].algorithm == "halvingDoubling"
