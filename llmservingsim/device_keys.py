"""Checks shared by the device-file parsers (``hardware.py`` for the device, its power,
host link, network and system blocks; ``inter_node.py`` for the network between nodes).

One mechanism for every block: a block is a mapping holding exactly its expected keys, and a
violation is one ProfileError naming the file and the dotted key. ``GIB_PER_GB`` is the
factor by which ASTRA-Sim reads a bandwidth of X "GB/s" as X * 2^30 / 1e9 bytes per ns (the
float nearest it; ``GIB_PER_GB_EXACT``: its numerator and denominator, for exact arithmetic).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from .errors import ProfileError

# terms, not a Fraction: a run never needs exact arithmetic, so it need not import fractions
GIB_PER_GB_EXACT = (2 ** 30, 10 ** 9)
GIB_PER_GB = GIB_PER_GB_EXACT[0] / GIB_PER_GB_EXACT[1]


def check_keys(raw: Any, expected: Mapping | tuple, file: Path, prefix: str = "") -> None:
    """``raw`` is a mapping with exactly the keys ``expected`` (``prefix``: the block's dotted
    path in the file, e.g. ``"power."``)."""
    if not isinstance(raw, dict):
        raise ProfileError(f"expected a mapping of keys ({', '.join(expected)})", file=str(file),
                           key=prefix.rstrip(".") or None)
    for key in raw:
        if key not in expected:
            raise ProfileError(f"unknown key (expected: {', '.join(expected)})",
                               file=str(file), key=f"{prefix}{key}")
    for key in expected:
        if key not in raw:
            raise ProfileError("missing key", file=str(file), key=f"{prefix}{key}")
