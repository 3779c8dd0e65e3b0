"""Tool locks shared between workers: ``tool_options(lock=True)`` across every process of a server.

``LeasedToolLocks`` is the server's ``rag_tools.tools.ToolLocks`` when Redis is configured. A call
first queues behind the calls of its own process (``LocalToolLocks``, no polling), then takes a
lease on ``tool/<name>`` in the run-lock backend (``RedisRunLocks``: ``SET NX PX``), polling while
another worker holds it, and renews the lease while the tool runs, so a worker that dies frees the
tool after ``ttl_seconds``. ``on_wait`` is called once, whichever of the two it waits for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from rag_tools.tools import LocalToolLocks, ToolLocks
from rag_tools.tools.locks import OnWait

from .runs import RunLocks, lease_name

__all__ = ["LeasedToolLocks"]

logger = logging.getLogger("ragstream.tools")

POLL_SECONDS = (0.02, 0.05, 0.1, 0.2)


class LeasedToolLocks(ToolLocks):
    """Per-tool leases in a shared ``RunLocks`` backend, behind a per-process queue."""

    def __init__(self, leases: RunLocks, *, ttl_seconds: float = 30.0) -> None:
        self.leases = leases
        self.ttl_seconds = ttl_seconds
        self._local = LocalToolLocks()

    @asynccontextmanager
    async def hold(self, name: str, on_wait: OnWait | None = None) -> AsyncIterator[None]:
        waited = False

        async def waiting() -> None:
            nonlocal waited
            if not waited and on_wait is not None:
                waited = True
                await on_wait()

        async with self._local.hold(name, waiting):
            key, holder = lease_name("tool", name), uuid.uuid4().hex
            polls = 0
            while not await self.leases.acquire(key, holder, self.ttl_seconds):
                await waiting()
                await asyncio.sleep(POLL_SECONDS[min(polls, len(POLL_SECONDS) - 1)])
                polls += 1
            renewing = asyncio.create_task(self._renew(key, holder))
            try:
                yield
            finally:
                renewing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await renewing
                await asyncio.shield(self.leases.release(key, holder))

    async def _renew(self, key: str, holder: str) -> None:
        while True:
            await asyncio.sleep(self.ttl_seconds / 3)
            if not await self.leases.renew(key, holder, self.ttl_seconds):
                logger.warning("the lease on %s was lost while the tool ran", key)
                return
