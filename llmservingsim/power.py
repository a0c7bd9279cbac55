"""Power and energy of one serving instance: a two-state model per GPU.

An instance owns ``num_gpus`` identical devices (its TP group). While the engine runs a step
every one of them draws ``active_w``; while the engine is idle with its model loaded (between
steps, or with nothing to run) every one draws ``standby_w``. ``idle_w`` (powered, no model)
belongs to GPUs that no instance holds; :meth:`PowerModel.unassigned_energy_j` prices those.

    energy_j(busy_ns, idle_ns) = num_gpus * (active_w * busy_ns + standby_w * idle_ns) / 1e9
    power_w(f)                 = num_gpus * (standby_w + f * (active_w - standby_w)),  0 <= f <= 1

so ``energy_j(b, i) == power_w(b / (b + i)) * (b + i) / 1e9`` up to float rounding. Times are
integer nanoseconds (the simulator's clock); energy is joules, power watts. The model is linear
and has no memory: no ramp between states, no dependence on batch shape or clocks. Per-step
utilisation (a decode step rarely draws the full board power) is the obvious refinement and is
deliberately left out until there is a measurement to fit it to.
"""
from __future__ import annotations

from dataclasses import dataclass

from llmservingsim.hardware import Device

_NS_PER_S = 1_000_000_000


def _check_ns(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a non-negative int of nanoseconds, got {value!r}")
    return value


@dataclass(frozen=True)
class PowerModel:
    """Energy of one instance of ``num_gpus`` devices of one type (see the module docstring).
    Owns no state: every call is a pure function of its arguments."""
    device: Device
    num_gpus: int

    def __post_init__(self) -> None:
        if isinstance(self.num_gpus, bool) or not isinstance(self.num_gpus, int) \
                or self.num_gpus < 1:
            raise ValueError(f"num_gpus must be a positive int, got {self.num_gpus!r}")

    def energy_j(self, busy_ns: int, idle_ns: int) -> float:
        """Joules drawn over ``busy_ns`` of running steps and ``idle_ns`` of standby."""
        p = self.device.power
        busy = _check_ns(busy_ns, "busy_ns")
        idle = _check_ns(idle_ns, "idle_ns")
        return self.num_gpus * (p.active_w * busy + p.standby_w * idle) / _NS_PER_S

    def power_w(self, busy_fraction: float) -> float:
        """Mean watts of the instance when steps run ``busy_fraction`` of the time."""
        if not 0.0 <= busy_fraction <= 1.0:
            raise ValueError(f"busy_fraction must lie in [0, 1], got {busy_fraction!r}")
        p = self.device.power
        return self.num_gpus * (p.standby_w + busy_fraction * (p.active_w - p.standby_w))

    def unassigned_energy_j(self, ns: int) -> float:
        """Joules drawn by ``num_gpus`` powered GPUs that hold no model, over ``ns``."""
        return self.num_gpus * self.device.power.idle_w * _check_ns(ns, "ns") / _NS_PER_S
