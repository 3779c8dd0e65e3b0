"""Tool locks: ``tool_options(lock=True)`` runs every call of a tool alone.

``ToolLocks`` is the small interface the tool system needs: ``hold(name, on_wait)`` is an async
context manager that holds the tool's lock, calling ``on_wait`` once first when it has to wait
(the tool system reports that as progress). ``LocalToolLocks`` serialises the runs of one process
(the default); the server supplies one shared between workers when Redis is configured.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

__all__ = ["LocalToolLocks", "OnWait", "ToolLocks"]

OnWait = Callable[[], Awaitable[None]]


class ToolLocks(ABC):
    """One lock per tool name."""

    @abstractmethod
    def hold(self, name: str, on_wait: OnWait | None = None) -> AbstractAsyncContextManager[None]:
        """Hold ``name``'s lock for the block; ``on_wait`` is awaited once when the lock is busy."""


class LocalToolLocks(ToolLocks):
    """Locks of this process (one ``asyncio.Lock`` per tool, first come first served)."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}

    @asynccontextmanager
    async def hold(self, name: str, on_wait: OnWait | None = None) -> AsyncIterator[None]:
        lock = self._locks.setdefault(name, asyncio.Lock())
        if lock.locked() and on_wait is not None:
            await on_wait()
        async with lock:
            yield
