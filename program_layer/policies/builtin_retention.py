"""Built-in retention policies (paper eq. 6 and Appendix E), except min-waste (min_waste.py).

All return decisions in policy terms; ``now`` and deadlines are simulated seconds.
"""
from __future__ import annotations

from ._params import real
from .base import RetentionPolicy
from .quantile import GapQuantile

__all__ = ["EvictAlways", "CacheLRU", "TTL", "PressureTTL", "ContinuumTTL", "OffloadTTL", "pressure_scale"]


class EvictAlways(RetentionPolicy):
    """Drop the call's KV at completion (blocks freed and their cached content discarded)."""
    name = "evict-always"

    def on_turn_complete(self, pcb, request_id, now):
        return "evict"

    def on_turn_arrival(self, pcb, now):
        return "none"


class CacheLRU(RetentionPolicy):
    """vLLM's own behaviour: release the blocks to the engine's LRU free queue, where they
    stay cached (prefix hits) until reused; the LRU value is the last access time, which the
    free queue's order already encodes, so no value is set here."""
    name = "cache-lru"

    def on_turn_complete(self, pcb, request_id, now):
        return "release"

    def on_turn_arrival(self, pcb, now):
        return "none"


class TTL(RetentionPolicy):
    """Fixed TTL: protect until c + tau_s, release when the successor arrives."""
    name = "ttl"

    def __init__(self, tau_s: float = 2.0):
        self.tau_s = real("tau_s", tau_s, lo=0.0)

    def on_turn_complete(self, pcb, request_id, now):
        return ("protect", now + self.tau_s)

    def on_turn_arrival(self, pcb, now):
        return "release"


def pressure_scale(u) -> float:
    """Eq. 9 (after SAGA): g(u) = 1 - 0.5 m(u), m(u) = clip((u - 0.7)/(0.9 - 0.7), 0, 1).
    Unknown utilization (None) counts as no pressure."""
    if u is None:
        return 1.0
    m = min(1.0, max(0.0, (u - 0.7) / (0.9 - 0.7)))
    return 1.0 - 0.5 * m


class PressureTTL(RetentionPolicy):
    """Pressure-aware TTL: protect until c + tau_s * g(u(c)), u the KV utilization at c."""
    name = "pressure-ttl"

    def __init__(self, tau_s: float = 2.0):
        self.tau_s = real("tau_s", tau_s, lo=0.0)

    def on_turn_complete(self, pcb, request_id, now):
        return ("protect", now + self.tau_s * pressure_scale(self.signals.kv_utilization))

    def on_turn_arrival(self, pcb, now):
        return "release"


class ContinuumTTL(RetentionPolicy):
    """Continuum per-tool TTL: protect until c + Q_quantile(observed gaps of the tool the
    program just entered), ``default_s`` while that tool has no observation. Gaps are
    pooled across programs (a deployed estimator sees every finished tool call); a call
    without a tool name is its own class (``None``)."""
    name = "continuum"

    def __init__(self, quantile: float = 0.9, default_s: float = 2.0):
        self._q = GapQuantile(real("quantile", quantile, lo=0.0, hi=1.0),
                              real("default_s", default_s, lo=0.0))

    @property
    def quantile(self) -> float:
        return self._q.quantile

    @property
    def default_s(self) -> float:
        return self._q.default_s

    def on_turn_complete(self, pcb, request_id, now):
        return ("protect", now + self._q.predict(pcb, pcb.tool_name))

    def on_turn_arrival(self, pcb, now):
        return "release"


class OffloadTTL(ContinuumTTL):
    """Tier-aware TTL (kv_tiers): predict the tool gap the program just entered as
    Continuum does (``quantile`` of the observed gaps of that tool, ``default_s`` while
    unseen); a predicted gap up to ``short_s`` protects the KV in GPU memory until
    c + short_s, a longer one offloads it to the first lower tier until c + gap + ``slack_s``
    (the GPU blocks are freed for other programs; the successor's prefix hit then loads from
    the tier). Without kv_tiers an offload is a release, so the policy degrades to a TTL
    that protects across short gaps only."""
    name = "offload-ttl"

    def __init__(self, short_s: float = 2.0, quantile: float = 0.9, default_s: float = 2.0,
                 slack_s: float = 30.0):
        super().__init__(quantile, default_s)
        self.short_s = real("short_s", short_s, lo=0.0)
        self.slack_s = real("slack_s", slack_s, lo=0.0)

    def on_turn_complete(self, pcb, request_id, now):
        gap = self._q.predict(pcb, pcb.tool_name)
        if gap <= self.short_s:
            return ("protect", now + self.short_s)
        return ("offload", now + gap + self.slack_s)
