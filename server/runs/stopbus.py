"""Stop requests for runs living in another worker process or host.

A stop request names a run by its key (``RunInfo.key``). Within one process the engine stops its
own runs directly; a shared backend carries requests to the worker that runs the run
(``RedisStopBus`` in ``runs.redis``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

__all__ = ["StopBus"]


class StopBus(ABC):
    """Delivers stop requests to every worker; each stops the run if it is one of its own."""

    @abstractmethod
    async def publish(self, key: str) -> None:
        """Ask every worker to stop the run ``key``."""

    @abstractmethod
    def listen(self, on_stop: Callable[[str], None], on_back: Callable[[], None] | None = None) -> None:
        """Call ``on_stop(key)`` for every stop request, until ``close``; and ``on_back()`` each time
        the bus reconnects after losing its backend (which may have come back empty)."""

    @abstractmethod
    async def close(self) -> None:
        """Stop listening."""
