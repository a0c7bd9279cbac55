"""The one boundary between the system layer and a network model (like ``AstraNetworkAPI``).

The system layer asks only: how many NPUs and dimensions there are, and how long one message
of ``size`` bytes from ``src`` to ``dst`` takes when sent on an idle network. Backends own no
clock; the system simulator does.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

from ..config.network import DimSpec


class NetworkBackend(ABC):
    """A network model. Implementations must be deterministic and side-effect free per call."""

    @property
    @abstractmethod
    def dims(self) -> tuple[DimSpec, ...]:
        """The dimensions, innermost (fastest-varying NPU coordinate) first."""

    @property
    @abstractmethod
    def npus_count(self) -> int:
        """Total NPUs (product of the dimension sizes)."""

    @abstractmethod
    def send_ns(self, src: int, dst: int, size: int) -> int:
        """Delay in integer ns from injecting ``size`` bytes at ``src`` until they arrive at ``dst``."""

    @abstractmethod
    def hops(self, src: int, dst: int) -> int:
        """Links a message from ``src`` to ``dst`` crosses (in the dimension it travels)."""

    def address(self, npu: int) -> tuple[int, ...]:
        """Coordinates of ``npu``: dimension 0 varies fastest."""
        out = []
        for d in self.dims:
            out.append(npu % d.npus)
            npu //= d.npus
        return tuple(out)
