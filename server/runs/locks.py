"""Run locks: at most one active run per thread, held with an expiry and renewed while the run lives.

A lock names the run holding it. ``acquire`` fails while another live run holds the thread;
``renew`` extends the expiry (a heartbeat) and reports whether the run still holds it; an expired
lock (its worker died) is free again. A renew that finds the lock free takes it again: the lock was
lost (Redis restarted empty, or the worker's loop stalled past the expiry) while no other run took
the thread, and the run goes on holding it. ``MemoryRunLocks`` serves one process; ``RedisRunLocks``
(``runs.redis``) shares locks between workers and hosts. A backend that cannot be reached raises
``BackendUnavailable``.

The same backends hold leases on other things (a locked tool, a sync source, the orphan sweep):
those are named by ``lease_name``, with a ``/`` that no thread id may hold, so a thread can never
be named like a lease and take it (or be refused by it).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod

__all__ = ["MemoryRunLocks", "RunLocks", "lease_name"]


def lease_name(kind: str, name: str) -> str:
    """The lock name of a lease that is not a thread's (``kind/name``; thread ids hold no ``/``)."""
    return f"{kind}/{name}"


class RunLocks(ABC):
    """Per-thread run locks with expiry."""

    @abstractmethod
    async def acquire(self, thread_id: str, run_id: str, ttl_seconds: float) -> bool:
        """Take the thread for ``run_id``; ``False`` when another run holds it."""

    @abstractmethod
    async def renew(self, thread_id: str, run_id: str, ttl_seconds: float) -> bool:
        """Extend the lock, taking it again if it is free; ``False`` when another run holds it."""

    @abstractmethod
    async def release(self, thread_id: str, run_id: str) -> None:
        """Free the thread if ``run_id`` holds it."""

    @abstractmethod
    async def holder(self, thread_id: str) -> str | None:
        """The run holding the thread, if any."""


class MemoryRunLocks(RunLocks):
    """Locks in this process's memory."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[str, float]] = {}

    def _live(self, thread_id: str) -> tuple[str, float] | None:
        held = self._held.get(thread_id)
        if held is not None and held[1] < time.monotonic():
            del self._held[thread_id]
            return None
        return held

    async def acquire(self, thread_id: str, run_id: str, ttl_seconds: float) -> bool:
        if self._live(thread_id) is not None:
            return False
        self._held[thread_id] = (run_id, time.monotonic() + ttl_seconds)
        return True

    async def renew(self, thread_id: str, run_id: str, ttl_seconds: float) -> bool:
        held = self._live(thread_id)
        if held is not None and held[0] != run_id:
            return False
        self._held[thread_id] = (run_id, time.monotonic() + ttl_seconds)
        return True

    async def release(self, thread_id: str, run_id: str) -> None:
        held = self._held.get(thread_id)
        if held is not None and held[0] == run_id:
            del self._held[thread_id]

    async def holder(self, thread_id: str) -> str | None:
        held = self._live(thread_id)
        return held[0] if held else None
