"""Routing in a cluster with prefill/decode roles: a decision becomes a (prefill, decode) pair.

A routing policy's ``select`` may return

- a pair ``(p, d)`` (tuple or list of two ints): prefill on instance p (role prefill or
  both), decode on instance d (role decode or both). ``p == d`` (a ``both`` instance) runs
  the call there whole, as without roles; ``p != d`` disaggregates it (the KV moves from p
  to d, llmservingsim/disagg.py);
- one int i, as every policy written for a homogeneous cluster does: a ``both`` instance
  runs the call whole; a ``prefill`` instance is paired with the least-loaded
  decode-capable instance, a ``decode`` instance with the least-loaded prefill-capable one
  (least-loaded as the built-in: fewest running + waiting, then lower KV utilization, then
  lower index). So ``least-loaded`` gives the least-loaded instance and the least-loaded
  instance of the other role, and ``session-affinity`` keeps a program on the decode
  instance that holds its context.

Anything else (a role that cannot do its part, an index out of range) is an
``InvalidDecision``: the Dispatch Plane's PolicyError names the policy, program and time.
"""
from __future__ import annotations

from .policies.base import DECODE_ROLES, PREFILL_ROLES
from .policies.builtin_routing import least_loaded
from .policies.checks import InvalidDecision, as_int

__all__ = ["RolePairing"]


class RolePairing:
    def __init__(self, roles: list):
        self.roles = list(roles)
        self.prefill = [i for i, r in enumerate(roles) if r in PREFILL_ROLES]
        self.decode = [i for i, r in enumerate(roles) if r in DECODE_ROLES]

    def _index(self, raw, what: str) -> int:
        i = as_int(raw, what)
        if not 0 <= i < len(self.roles):
            raise InvalidDecision(f"{what} {i} out of range [0, {len(self.roles)})")
        return i

    def resolve(self, raw, inflight: tuple) -> tuple[int, int]:
        """(prefill instance, decode instance) of a routing decision (module docstring)."""
        if isinstance(raw, (tuple, list)):
            if len(raw) != 2:
                raise InvalidDecision(f"a pair must hold two instances (prefill, decode), got {len(raw)} values")
            p = self._index(raw[0], "prefill instance")
            d = self._index(raw[1], "decode instance")
            if self.roles[p] not in PREFILL_ROLES:
                raise InvalidDecision(f"prefill instance {p} has role {self.roles[p]}: it cannot prefill")
            if self.roles[d] not in DECODE_ROLES:
                raise InvalidDecision(f"decode instance {d} has role {self.roles[d]}: it cannot decode")
            return p, d
        i = self._index(raw, "selected instance")
        role = self.roles[i]
        if role == "both":
            return i, i
        if role == "prefill":
            return i, least_loaded(inflight, self.decode)
        return least_loaded(inflight, self.prefill), i
