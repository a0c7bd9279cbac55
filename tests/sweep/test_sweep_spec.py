"""Sweep spec parsing, grid expansion and key-path setting (exact), and spec errors."""
from __future__ import annotations

import textwrap

import pytest

from llmservingsim.errors import ConfigError
from program_layer.sweep.grid import Axis, expand, set_path, value_label
from program_layer.sweep.spec import load_spec

BASE = {"model": "m", "hardware": "B200", "policies": {"retention": "cache-lru"}, "workload": {"rate_jps": 0.1}}


def write(tmp_path, text, name="spec.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_set_path_creates_and_replaces():
    config = {"a": {"b": 1}, "c": "x"}
    set_path(config, "a.b", 2)
    set_path(config, "a.d.e", [1])
    set_path(config, "f", {"g": 1})
    assert config == {"a": {"b": 2, "d": {"e": [1]}}, "c": "x", "f": {"g": 1}}
    set_path(config, "a", {"z": 0})  # a mapping value replaces, it does not merge
    assert config["a"] == {"z": 0}


def test_set_path_through_scalar_names_key():
    with pytest.raises(ConfigError, match=r"spec.yaml, key 'axes.c.x': .*'c' in the base config is str"):
        set_path({"c": "x"}, "c.x", 1, source="spec.yaml")


def test_grid_order_first_axis_slowest_and_configs_exact():
    axes = [Axis("policies.retention", ("cache-lru", "ttl")), Axis("policies.scheduling", ("fcfs", "plas")),
            Axis("workload.rate_jps", (0.02, 0.1))]
    cells = expand(BASE, axes)
    assert [c.index for c in cells] == list(range(8))
    assert [tuple(c.values.values()) for c in cells] == [
        ("cache-lru", "fcfs", 0.02), ("cache-lru", "fcfs", 0.1), ("cache-lru", "plas", 0.02),
        ("cache-lru", "plas", 0.1), ("ttl", "fcfs", 0.02), ("ttl", "fcfs", 0.1), ("ttl", "plas", 0.02),
        ("ttl", "plas", 0.1)]
    assert cells[6].config == {"model": "m", "hardware": "B200",
                               "policies": {"retention": "ttl", "scheduling": "plas"},
                               "workload": {"rate_jps": 0.02}}
    assert BASE["policies"] == {"retention": "cache-lru"}  # the base is never mutated
    assert cells[6].label() == "retention=ttl, scheduling=plas, rate_jps=0.02"


def test_mapping_values_and_labels():
    cells = expand(BASE, [Axis("parallelism", ({"tp": 1}, {"tp": 2, "pp": 1}))])
    assert cells[1].config["parallelism"] == {"tp": 2, "pp": 1}
    assert value_label({"tp": 2, "pp": 1}) == '{"pp":1,"tp":2}'
    assert value_label(True) == "true" and value_label(0.02) == "0.02"


def test_load_spec_with_base_file_relative_to_spec(tmp_path):
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "base.yaml").write_text("model: m\nhardware: RTXPRO6000\nworkload: {rate_jps: 0.02}\n")
    path = write(tmp_path, """\
        base: cfg/base.yaml
        axes:
          policies.retention: [cache-lru, ttl, pressure-ttl]
          policies.scheduling: [fcfs, plas]
        baseline: {policies.retention: cache-lru, policies.scheduling: fcfs}
        plots: {kv_cells: [{policies.scheduling: plas}, abc123]}
        """)
    spec = load_spec(path)
    assert spec.name == "spec"
    assert spec.base_dir == (tmp_path / "cfg").resolve()
    assert spec.axis_keys == ["policies.retention", "policies.scheduling"]
    assert spec.baseline == {"policies.retention": "cache-lru", "policies.scheduling": "fcfs"}
    assert spec.kv_cells == ({"policies.scheduling": "plas"}, "abc123")
    assert len(spec.cells()) == 6
    assert spec.cells()[0].config["hardware"] == "RTXPRO6000"


@pytest.mark.parametrize("body, message", [
    ("axes: {seed: [1]}\n", r"spec.yaml, key 'base': missing"),
    ("base: {model: m}\n", r"spec.yaml, key 'axes': missing"),
    ("base: {model: m}\naxes: {seed: [1]}\nbogus: 1\n", r"spec.yaml:3, key 'bogus': unknown key"),
    ("base: {model: m}\naxes:\n  seed: 3\n", r"spec.yaml:3, key 'axes.seed': must be a non-empty list"),
    ("base: {model: m}\naxes:\n  seed: []\n", r"key 'axes.seed': must be a non-empty list"),
    ("base: {model: m}\naxes:\n  seed: [1, 2, 1]\n", r"spec.yaml:3, key 'axes.seed': repeated value 1"),
    ("base: {model: m}\naxes:\n  polcies.retention: [ttl]\n", r"key 'axes.polcies.retention': 'polcies' is not"),
    ("base: {model: m}\naxes:\n  policies..x: [ttl]\n", r"key 'axes.policies..x': axis keys are dotted"),
    ("base: {model: m}\naxes:\n  engine: [{}]\n  engine.block_size: [16]\n", r"key 'axes.engine.block_size': overlaps"),
    ("base: {model: m}\naxes: {seed: [1]}\nbaseline: {seed: 2}\n", r"key 'baseline.seed': 2 is not one"),
    ("base: {model: m}\naxes: {seed: [1]}\nbaseline: {model: m}\n", r"key 'baseline.model': 'model' is not an axis"),
    ("base: {model: m}\naxes: {seed: [1]}\ntable: {rows: hardware}\n", r"key 'table.rows': 'hardware' is not"),
    ("base: {model: m}\naxes: {seed: [1]}\nplots: {kv_cells: [{seed: 5}]}\n", r"key 'plots.kv_cells': 5 is not"),
    ("base: missing.yaml\naxes: {seed: [1]}\n", r"key 'base': .*missing.yaml: cannot read base config"),
    ("base: {hardware: B200}\naxes:\n  hardware.name: [x]\n", r"key 'axes.hardware.name': cannot set"),
    ("base: {model: m}\naxes:\n  seed: [1]\n  seed: [2]\n", r"spec.yaml:4, key 'axes.seed': duplicate key"),
    ("base: {model: m\n", r"spec.yaml:2: not valid YAML"),
    ("- 1\n", r"spec.yaml: a sweep spec must be a mapping"),
])
def test_spec_errors_name_file_line_and_key(tmp_path, body, message):
    path = write(tmp_path, body)
    with pytest.raises(ConfigError, match=message):
        load_spec(path)


def test_missing_spec_file(tmp_path):
    with pytest.raises(ConfigError, match=r"nope.yaml: cannot read sweep spec"):
        load_spec(tmp_path / "nope.yaml")


try:
    from hypothesis import given, settings, strategies as st
except ImportError:  # pragma: no cover
    given = None

if given is not None:
    _values = st.one_of(st.integers(-5, 5), st.sampled_from(["a", "b", "c"]), st.booleans(),
                        st.dictionaries(st.sampled_from(["x", "y"]), st.integers(0, 3), max_size=2))
    _keys = st.sampled_from(["policies.retention", "policies.scheduling", "engine.block_size", "hardware", "seed",
                             "workload.rate_jps"])

    @settings(max_examples=60, deadline=None)
    @given(st.dictionaries(_keys, st.lists(_values, min_size=1, max_size=3,
                                           unique_by=lambda v: repr(sorted(v.items())) if isinstance(v, dict) else repr(v)),
                           max_size=3))
    def test_grid_invariants(axes_map):
        """Cell count is the product of axis lengths; every cell holds its values at their
        paths; ids are unique and equal to a re-hash of the config."""
        from program_layer.sweep.grid import canonical_json, cell_id

        axes = [Axis(k, tuple(v)) for k, v in axes_map.items()]
        distinct = all(len({canonical_json(x) for x in a.values}) == len(a.values) for a in axes)
        cells = expand(BASE, axes)
        expected = 1
        for a in axes:
            expected *= len(a.values)
        assert len(cells) == expected
        for cell in cells:
            for key, value in cell.values.items():
                node = cell.config
                for part in key.split("."):
                    node = node[part]
                assert canonical_json(node) == canonical_json(value)
            assert cell.cell_id == cell_id(cell.config)
        if distinct:
            assert len({c.cell_id for c in cells}) == len(cells)
