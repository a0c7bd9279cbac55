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
    """Its only tie to the project is the shared user-facing error types (so the CLI reports
    its errors in one line like everyone else's)."""
    for path, mods in _imports(SRC / "astra-sim" / "astrasim").items():
        assert not mods & {"program_layer", "hooks"}, path
        if "llmservingsim" in mods:
            text = (SRC / path).read_text()
            assert path.endswith("astrasim/errors.py") and "from llmservingsim.errors import" in text, path
