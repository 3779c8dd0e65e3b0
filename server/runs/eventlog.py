"""Run event logs: every event a run produces, in order, for whoever subscribes and whenever.

The run task appends encoded events; responses read them. A reader replays what it missed (after
a given sequence number) and then follows the live tail until the run closes, so a reconnecting
client gets each event exactly once. Sequence numbers start at 1 (the SSE ``id:`` of each event).
Closed logs are kept for ``ttl_seconds`` for late reconnects.

A log is keyed by ``RunInfo.key``, the thread and the run together: a run id is unique within its
thread only, so a run id used in another principal's thread is just another run, and cannot be
probed. ``MemoryEventLog`` serves one process; ``RedisEventLog`` (``runs.redis``) is shared.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Literal

__all__ = ["EventLog", "MemoryEventLog", "RunInfo", "RunStatus", "run_key"]

RunStatus = Literal["running", "finished", "interrupted", "cancelled", "error"]


def run_key(thread_id: str, run_id: str) -> str:
    """The key of a run's log and lock entry (thread ids never contain ``/``)."""
    return f"{thread_id}/{run_id}"


@dataclass(frozen=True)
class RunInfo:
    """Who a run belongs to and where it stands."""

    run_id: str
    thread_id: str
    owner: str
    worker: str
    status: RunStatus = "running"
    started_at: float = field(default_factory=time.time)

    @property
    def key(self) -> str:
        return run_key(self.thread_id, self.run_id)


class EventLog(ABC):
    """Append-only per-run logs of encoded events, keyed by ``RunInfo.key``."""

    @abstractmethod
    async def open(self, info: RunInfo) -> None:
        """Start the log of a new run."""

    @abstractmethod
    async def append(self, key: str, data: bytes) -> int:
        """Add one encoded event; returns its sequence number."""

    @abstractmethod
    async def close(self, key: str, status: RunStatus) -> None:
        """Mark the run ended; readers stop after the last event."""

    @abstractmethod
    async def info(self, key: str) -> RunInfo | None:
        """The run's info, or ``None`` when unknown or expired."""

    @abstractmethod
    async def forget(self, thread_id: str) -> None:
        """Drop the logs of every ended run of ``thread_id``: the thread was deleted, and its runs'
        events (answers, tool results) go with it; a later thread of that id starts with none."""

    @abstractmethod
    def read(self, key: str, after: int = 0) -> AsyncIterator[list[tuple[int, bytes]]]:
        """Events with a sequence number above ``after``, then the live tail until the run closes.

        Events come in batches of whatever is available, so a reader that fell behind catches up
        in one step (and one network write) rather than event by event.
        """

    async def restore(self) -> None:  # noqa: B027 - optional hook
        """Write again the logs of this process's runs that a shared backend lost (it restarted)."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""


@dataclass
class _Log:
    info: RunInfo
    events: list[bytes] = field(default_factory=list)
    closed: bool = False
    closed_at: float = 0.0
    signal: asyncio.Event = field(default_factory=asyncio.Event)

    def wake(self) -> None:
        self.signal.set()
        self.signal = asyncio.Event()


class MemoryEventLog(EventLog):
    """Logs in this process's memory."""

    def __init__(self, ttl_seconds: float = 600.0) -> None:
        self.ttl_seconds = ttl_seconds
        self._logs: dict[str, _Log] = {}
        self._closed: deque[tuple[float, str]] = deque()  # in closing order, for expiry

    async def open(self, info: RunInfo) -> None:
        self._expire()
        self._logs[info.key] = _Log(info)

    async def append(self, key: str, data: bytes) -> int:
        log = self._logs[key]
        log.events.append(data)
        log.wake()
        return len(log.events)

    async def close(self, key: str, status: RunStatus) -> None:
        log = self._logs.get(key)
        if log is not None and not log.closed:
            log.closed, log.closed_at = True, time.monotonic()
            log.info = replace(log.info, status=status)
            self._closed.append((log.closed_at, key))
            log.wake()

    async def info(self, key: str) -> RunInfo | None:
        # Expired here too, not only when a run opens a log: a server with no new runs would keep
        # every ended log, and replay it to a reconnect, past its TTL (Redis expires them itself).
        self._expire()
        log = self._logs.get(key)
        return log.info if log is not None else None

    def events(self, key: str) -> list[bytes]:
        """The events of one log so far, in order (none for an unknown log)."""
        log = self._logs.get(key)
        return list(log.events) if log is not None else []

    def discard(self, key: str) -> None:
        """Drop one log now, whatever its state (readers already following it keep it)."""
        self._logs.pop(key, None)

    async def forget(self, thread_id: str) -> None:
        prefix = run_key(thread_id, "")
        for key in [k for k, log in self._logs.items() if k.startswith(prefix) and log.closed]:
            del self._logs[key]

    async def read(self, key: str, after: int = 0) -> AsyncIterator[list[tuple[int, bytes]]]:
        log = self._logs.get(key)
        if log is None:
            return
        position = max(0, after)
        while True:
            end = len(log.events)
            if position < end:
                yield list(zip(range(position + 1, end + 1), log.events[position:end], strict=True))
                position = end
                continue
            if log.closed:
                return
            await log.signal.wait()
            # One more turn for the producer before collecting: a run streaming flat out appends
            # again in that turn, so a burst leaves as one batch (one SSE write, one send-timeout
            # scope) instead of one per event; a paced event goes out a loop pass later.
            await asyncio.sleep(0)

    def _expire(self) -> None:
        cutoff = time.monotonic() - self.ttl_seconds
        while self._closed and self._closed[0][0] < cutoff:
            closed_at, key = self._closed.popleft()
            log = self._logs.get(key)
            if log is not None and log.closed_at == closed_at:  # not a later run of a reused key
                del self._logs[key]
