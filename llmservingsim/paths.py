"""Where the shipped data lives: ``profiles/`` and ``hardware/`` beside the packages.

The project is installed editable (``pip install -e .``), so the data folders are found next
to this package; ``AGENTSERVESIM_HOME`` points elsewhere when the tree is moved.
"""
from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    env = os.environ.get("AGENTSERVESIM_HOME")
    return Path(env) if env else Path(__file__).resolve().parent.parent


def profiles_dir() -> Path:
    return project_root() / "profiles"


def hardware_dir() -> Path:
    return project_root() / "hardware"


def models_dir() -> Path:
    return profiles_dir() / "models"


def examples_dir() -> Path:
    return project_root() / "examples"
