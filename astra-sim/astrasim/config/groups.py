"""Communicator-group JSON reader: ``{"1": [0, 1], "2": [2, 3]}``.

Keys are positive integers (group 0 / an empty ``pg_name`` means "all NPUs"); values are
non-empty lists of distinct NPU ids. Member order is kept: it is the order of the logical ring.
"""
from __future__ import annotations

from ..errors import ConfigError
from ._read import load_json


def parse_comm_groups(data: dict, where: str = "<in-process>", npus_count: int | None = None
                      ) -> dict[int, tuple[int, ...]]:
    groups: dict[int, tuple[int, ...]] = {}
    for key, members in data.items():
        try:
            gid = int(key)
        except (TypeError, ValueError):
            raise ConfigError("group ids must be integers", file=where, key=str(key)) from None
        if gid <= 0:
            raise ConfigError("group id 0 is reserved for the default group (all NPUs)", file=where, key=str(key))
        if (not isinstance(members, list) or not members
                or any(isinstance(m, bool) or not isinstance(m, int) or m < 0 for m in members)):
            raise ConfigError("must be a non-empty list of NPU ids", file=where, key=str(key))
        if len(set(members)) != len(members):
            raise ConfigError("lists an NPU twice", file=where, key=str(key))
        if npus_count is not None and max(members) >= npus_count:
            raise ConfigError(f"NPU {max(members)} does not exist (network has {npus_count})",
                              file=where, key=str(key))
        groups[gid] = tuple(members)
    return groups


def load_comm_groups(path, npus_count: int | None = None) -> dict[int, tuple[int, ...]]:
    return parse_comm_groups(load_json(path), str(path), npus_count)
