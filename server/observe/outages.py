"""A dependency that is down is two log lines: when it goes (with the reason) and when it is back.

Everything that retries a dependency (the Redis stop channel resubscribing each second, SAQ's
upkeep loops, the ingestion queue connecting, the thread store on each use, the hourly sweep)
reports to that dependency's ``Outage`` instead of logging: the first failure logs one line naming
the dependency and the reason, without a traceback; the first success after it logs that it is back
and for how long it was gone. Each is one per process (``outage(name)``), so every loop of the
process shares what it says.
"""

from __future__ import annotations

import logging
import threading
import time

__all__ = ["Outage", "OutageFilter", "outage"]

logger = logging.getLogger("ragstream.outages")


def _reason(exc: BaseException | str) -> str:
    text = exc if isinstance(exc, str) else (str(exc) or type(exc).__name__)
    return " ".join(text.split())  # one line, whatever the driver's message


class Outage:
    """Whether ``name`` answers in this process, logged once per change of state."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._down_since: float | None = None
        self._lock = threading.Lock()

    @property
    def down(self) -> bool:
        return self._down_since is not None

    def failed(self, exc: BaseException | str) -> None:
        """A call to the dependency failed: logged if it was up until now."""
        with self._lock:
            if self._down_since is not None:
                return
            self._down_since = time.monotonic()
        logger.warning("%s is unavailable: %s (retrying until it is back)", self.name, _reason(exc))

    def recovered(self) -> None:
        """A call to the dependency succeeded: logged if it was down."""
        if self._down_since is None:  # the common case: no lock
            return
        with self._lock:
            since, self._down_since = self._down_since, None
        if since is not None:
            logger.warning("%s is back after %.0f s", self.name, time.monotonic() - since)


_outages: dict[str, Outage] = {}


def outage(name: str) -> Outage:
    """The process's ``Outage`` of ``name`` (``"Redis"``, ``"PostgreSQL"``, ``"the thread store"``)."""
    return _outages.setdefault(name, Outage(name))


class OutageFilter(logging.Filter):
    """For a library's logger whose retry loops log per attempt (SAQ's tracebacks, psycopg's pool
    warnings): a record whose exception is one of ``errors``, or whose message starts with one of
    ``messages``, reports to ``outage`` and is dropped; others pass."""

    def __init__(
        self, target: Outage, errors: tuple[type[BaseException], ...], messages: tuple[str, ...] = ()
    ) -> None:
        super().__init__()
        self.target = target
        self.errors = errors
        self.messages = messages

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and isinstance(exc, self.errors):
            self.target.failed(exc)
            return False
        if self.messages and (message := record.getMessage()).startswith(self.messages):
            self.target.failed(message)
            return False
        return True
