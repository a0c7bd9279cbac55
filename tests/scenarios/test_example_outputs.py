"""Every shipped example config gives exactly the outputs it gave before (issue 15: speed work
must not change one byte), in fast-forward and in step mode.

Each config runs as shipped, but for a generated workload capped at ``CAP`` programs (the
whole set takes minutes; the cap keeps each cell's hardware, policies and load regime, and
the first programs of a cell are where its KV pressure and queueing begin). The digests of
calls.csv, programs.csv, timeseries.csv and summary.json are in ``golden/example_outputs.json``,
recorded before the speed work of issue 15 landed:

    python tests/scenarios/test_example_outputs.py --record     # only for a deliberate change

There is no uncapped counterpart: the golden digests exist for the capped runs only.
"""
from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

import pytest

from program_layer.config import load_config
from program_layer.run import run_config

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).with_name("golden") / "example_outputs.json"
OUTPUTS = ("calls.csv", "programs.csv", "timeseries.csv", "summary.json")
CAP = 8


def example_configs() -> list[Path]:
    """The shipped run configs (sweep definitions and the search's LLM config are not runs)."""
    out = []
    for path in sorted((REPO / "examples").rglob("*.yaml")):
        if "sweeps" in path.parts or path.name.startswith("llm_config"):
            continue
        out.append(path)
    return out


def capped(path: Path, cap) -> dict:
    cfg = load_config(path)
    wl = cfg["workload"]
    if cap and wl.get("generator") and wl.get("programs") and wl["programs"] > cap:
        wl["programs"] = cap
    return cfg


def digest(path: Path, *, step_mode: bool = False, cap=CAP) -> str:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "out"
        run_config(capped(path, cap), out, step_mode=step_mode)
        h = hashlib.sha256()
        for name in OUTPUTS:
            h.update(name.encode() + b"\0" + (out / name).read_bytes() + b"\0")
        return h.hexdigest()


def _key(path: Path) -> str:
    return path.relative_to(REPO / "examples").as_posix()


@pytest.mark.parametrize("path", example_configs(), ids=_key)
def test_example_outputs_are_unchanged(path):
    golden = json.loads(GOLDEN.read_text())
    assert _key(path) in golden, f"no golden digest for {_key(path)}: record it (see the module docstring)"
    assert digest(path) == golden[_key(path)]
    assert digest(path, step_mode=True) == golden[_key(path)]


def test_every_example_is_covered():
    assert sorted(json.loads(GOLDEN.read_text())) == sorted(_key(p) for p in example_configs())


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps({_key(p): digest(p) for p in example_configs()}, indent=1, sort_keys=True) + "\n")
