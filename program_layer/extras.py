"""Optional dependencies: one place that turns a missing extra into one clear error.

The core install (``pip install -e .``) brings what ``run``, ``validate``, ``sweep`` and
``export-chakra`` need. Plots need ``[plot]`` (matplotlib), the policy search ``[search]``
(openevolve), ``calibrate`` ``[calibrate]`` (scipy), the Ray sweep executor ``[ray]``.
"""
from __future__ import annotations

import importlib

from llmservingsim.errors import ConfigError


def require(module: str, extra: str, what: str):
    """Import ``module`` or raise one ConfigError naming the extra that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if exc.name is not None and not module.startswith(exc.name.split(".")[0]):
            raise                       # the package is there but broken: not a missing extra
        raise ConfigError(f"{what} needs {module.split('.')[0]}, which is not installed: "
                          f"pip install 'agentservesim[{extra}]'") from None
