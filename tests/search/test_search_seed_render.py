"""Seed rendering: each built-in NAME becomes a standalone file that decides exactly like it."""
from __future__ import annotations

import itertools

import pytest

from llmservingsim.errors import ConfigError
from program_layer.pcb import PCBView
from program_layer.policies import BUILTINS, InflightLoad, Signals
from program_layer.policies.base import RetentionPolicy
from program_layer.search import axes, seed_render


def view(i: int, tool: str | None, gaps: dict) -> PCBView:
    return PCBView(program_id=i, session_id=f"s{i}", arrival_s=0.5 * i, call_index=i % 4,
                   calls_completed=i % 4, attained_service_s=0.37 * i, prior_instance=i % 3 - 1 or None,
                   kv_protected=bool(i % 2), kv_deadline_s=None, kv_resident_tokens=100 * i,
                   kv_instance=None, kv_value=None, tool_name=tool, gap_start_s=1.0 * i,
                   gap_end_s=None, context_tokens=1500 * i + 7, release_s=0.9 * i + 0.1,
                   num_preemptions=0, gaps=gaps, own_gaps={})


GAPS = [{}, {"bash": (0.5,)}, {"bash": (0.4, 3.0, 1.2, 9.0), None: (2.5, 0.1)}]


def load_rendered(name, tmp_path):
    path = tmp_path / f"{name.replace('-', '_')}.py"
    path.write_text(seed_render.render_builtin(name))
    module = axes.load_module_from_file(path, f"_seed_{name.replace('-', '_')}")
    return axes.find_policy_class(module, None, axes.builtin_axis(name))


def decisions(policy, axis):
    out = []
    for i, tool, gaps, u in itertools.product(range(6), ("bash", None), GAPS, (None, 0.5, 0.8, 0.95)):
        pcb, now = view(i, tool, gaps), 10.0 + i
        if axis == "retention":
            policy.signals = Signals(kv_utilization=u)
            out.append((policy.on_turn_complete(pcb, i, now), policy.on_turn_arrival(pcb, now)))
        elif axis == "scheduling":
            out.append(policy.priority(pcb, now))
        else:
            inflight = tuple(InflightLoad(i % (k + 2), k, u if k == 1 else 0.3, 0, 0, 0) for k in range(3))
            out.append(policy.select(pcb, inflight, now))
    return out


@pytest.mark.parametrize("name", seed_render.renderable_builtins())
def test_rendered_seed_decides_like_the_builtin(name, tmp_path):
    axis = axes.builtin_axis(name)
    cls = load_rendered(name, tmp_path)
    assert cls.__name__ == seed_render.CLASS_NAMES[axis]
    assert issubclass(cls, axes_base(axis))
    assert getattr(cls, "engine_args", None) == getattr(BUILTINS[axis][name], "engine_args", None)
    assert decisions(cls(), axis) == decisions(BUILTINS[axis][name](), axis)


def axes_base(axis):
    from program_layer.policies import RoutingPolicy, SchedulingPolicy
    return {"retention": RetentionPolicy, "scheduling": SchedulingPolicy, "routing": RoutingPolicy}[axis]


def test_every_builtin_but_min_waste_renders():
    names = {n for names in axes.BUILTINS.values() for n in names}
    assert names == {n for axis in BUILTINS.values() for n in axis}       # axes.BUILTINS is current
    assert names - set(seed_render.renderable_builtins()) == {"min-waste"}
    with pytest.raises(ConfigError, match="FILE.py:Class"):
        seed_render.render_builtin("min-waste")


def test_rendered_file_has_one_evolve_block_inside_the_class():
    text = seed_render.render_builtin("ttl")
    assert text.count(seed_render.START) == 1 and text.count(seed_render.END) == 1
    assert text.index("class EvolvedRetention(RetentionPolicy):") < text.index(seed_render.START)


def test_add_markers_wraps_class_body_and_keeps_existing(tmp_path):
    src = 'import math\n\n\nclass P(RetentionPolicy):\n    """Doc."""\n    X = 1\n\n    def f(self):\n        return 1\n\n\ny = 2\n'
    out = seed_render.add_markers(src, "P")
    lines = out.splitlines()
    assert lines[4] == '    """Doc."""' and lines[5] == "    " + seed_render.START
    assert lines[lines.index("        return 1") + 1] == "    " + seed_render.END
    assert out.endswith("y = 2\n")
    assert seed_render.add_markers(out, "P") == out
    compile(out, "x", "exec")


def test_write_seed_from_file_copies_and_marks(tmp_path):
    src = tmp_path / "mine.py"
    src.write_text("from program_layer.policies import SchedulingPolicy\n\n\nclass Mine(SchedulingPolicy):\n"
                   "    def priority(self, pcb, now):\n        return 0\n")
    out = tmp_path / "out"
    out.mkdir()
    path = seed_render.write_seed(str(src), "scheduling", out)
    assert seed_render.START in path.read_text() and "class Mine" in path.read_text()
    with pytest.raises(ConfigError):
        seed_render.write_seed("plas", "retention", tmp_path)
