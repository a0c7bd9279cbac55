"""Layer rules of docs/architecture.md: the engine never imports the program layer; the system
simulator knows nothing about LLMs (no engine or program-layer imports)."""
from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2]


def _imports(folder: Path) -> dict[str, set[str]]:
    out = {}
    for path in folder.rglob("*.py"):
        mods = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                mods |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                mods.add(node.module.split(".")[0])
        out[str(path.relative_to(SRC))] = mods
    return out


def test_engine_does_not_import_the_program_layer():
    for path, mods in _imports(SRC / "llmservingsim").items():
        assert "program_layer" not in mods, path


def test_hooks_import_nothing_of_the_layers():
    for path, mods in _imports(SRC / "hooks").items():
        assert not mods & {"program_layer", "llmservingsim", "astrasim"}, path


def test_system_simulator_knows_nothing_about_llms():
    """astrasim is a system simulator a user can take alone: no module of it imports the
    engine, the program layer or the hooks (its errors are its own, astrasim/errors.py)."""
    found = _imports(SRC / "astra-sim" / "astrasim")
    assert any(p.endswith("astrasim/errors.py") for p in found)
    for path, mods in found.items():
        assert not mods & {"program_layer", "hooks", "llmservingsim"}, path
