"""The version has one source, ``program_layer.__version__``: pyproject.toml reads it from
there, so the installed metadata, summary.json's ``version`` and the search cache's key agree
(read as a constant, never through importlib.metadata on a run's path)."""
from __future__ import annotations

import tomllib
from pathlib import Path

import program_layer
import pytest

from program_layer import package_version

ROOT = Path(__file__).resolve().parents[2]


def test_pyproject_takes_the_version_from_the_package():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "program_layer.__version__"}


def test_setuptools_resolves_the_same_version_the_run_records():
    pyprojecttoml = pytest.importorskip("setuptools.config.pyprojecttoml")    # the build backend
    resolved = pyprojecttoml.read_configuration(ROOT / "pyproject.toml")["project"]["version"]
    assert resolved == program_layer.__version__ == package_version()
    assert all(part.isdigit() for part in resolved.split("."))
