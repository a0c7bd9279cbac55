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

    #: True when messages share links and queue (see :meth:`route`); the system layer then
    #: times collectives message by message instead of with the per-step recurrence.
    congestion_aware: bool = False

    def hop_times(self, src: int, dst: int, size: int) -> list[tuple[object, int, int]]:
        """Per link of the path: ``(link id, busy ns, transit ns)`` for a ``size``-byte message.

        The link is busy (cannot start the next message) for ``busy`` ns; the message reaches
        the next device ``transit`` ns after it starts on the link. Only backends with
        ``congestion_aware`` True implement it.
        """
        raise NotImplementedError("this backend does not model individual links")

    def address(self, npu: int) -> tuple[int, ...]:
        """Coordinates of ``npu``: dimension 0 varies fastest."""
        out = []
        for d in self.dims:
            out.append(npu % d.npus)
            npu //= d.npus
        return tuple(out)
