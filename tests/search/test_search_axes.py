"""Policy specs and axis discovery without running user code."""
from __future__ import annotations

import pytest

from llmservingsim.errors import ConfigError
from program_layer.search import axes


def test_spec_forms(tmp_path):
    f = tmp_path / "p.py"
    f.write_text("from program_layer.policies import RoutingPolicy\n\n\nclass R(RoutingPolicy):\n    pass\n")
    assert axes.parse_policy_spec("ttl").builtin == "ttl"
    spec = axes.parse_policy_spec(f"{f}:R")
    assert (spec.path, spec.class_name, spec.config_value()) == (f, "R", f"{f}:R")
    bare = axes.parse_policy_spec(str(f))
    assert (bare.path, bare.class_name) == (f, None)
    mod = axes.parse_policy_spec("pkg.mod:Cls")
    assert (mod.module, mod.class_name) == ("pkg.mod", "Cls")
    assert axes.parse_policy_spec("p.py:R", base_dir=tmp_path).path == f
    with pytest.raises(ConfigError, match="unknown policy"):
        axes.parse_policy_spec("ttl2")
    with pytest.raises(ConfigError, match="not found"):
        axes.parse_policy_spec(str(tmp_path / "missing.py:R"))


def test_axis_from_source_reads_direct_bases_only():
    src = ("import program_layer.policies as P\n\n\nclass A(P.SchedulingPolicy):\n    pass\n\n\n"
           "class B(A):\n    pass\n")
    assert axes.axis_from_source(src, "A") == "scheduling"
    assert axes.axis_from_source(src) == "scheduling"
    assert axes.axis_from_source(src, "B") is None          # needs the runtime probe
    assert axes.axis_of_spec(axes.parse_policy_spec("least-loaded")) == "routing"


def test_builtin_names_match_the_loader():
    from program_layer.policies import BUILTINS
    assert {a: set(n) for a, n in axes.BUILTINS.items()} == {a: set(c) for a, c in BUILTINS.items()}
