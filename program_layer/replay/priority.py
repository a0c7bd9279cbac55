"""The request ``priority`` field of each ``--priority`` mode (vLLM: lower runs first; any
value needs the server started with ``--scheduling-policy priority``).

- ``plas``: the program's attained service so far, in integer milliseconds: the sum over its
  completed calls of (last token - send), client-measured. A program's first call gets 0.
- ``program-fcfs``: the program's rank in arrival order (ties by file order), so every call
  of an earlier program outranks every call of a later one.
- ``none``: the field is omitted (the server's own policy decides).
"""
from __future__ import annotations

from typing import Optional

MODES = ("plas", "program-fcfs", "none")


def priority(mode: str, program_order: int, attained_s: float) -> Optional[int]:
    """The value to send, or ``None`` to omit the field."""
    if mode == "plas":
        return int(round(attained_s * 1000.0))
    if mode == "program-fcfs":
        return int(program_order)
    return None
