"""A real uvicorn server on 127.0.0.1 in a background thread, for synchronous (hypothesis) tests.

``tests/servers.py`` serves in the test's own event loop, which a synchronous ``@given`` test does
not have; here the server gets its own loop in a daemon thread, and the test talks to it with a
blocking client. ``ServerLog`` collects what the server logged at ERROR level, so a test can
assert that no request ended in an unhandled exception, even one whose answer never arrived.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from tests.servers import free_port

__all__ = ["ServerLog", "serve_in_thread"]


class ServerLog(logging.Handler):
    """Records of ERROR and above from the server's loggers (and uvicorn's)."""

    LOGGERS = ("ragstream", "uvicorn.error", "uvicorn.asgi")

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.records: list[logging.LogRecord] = []
        self._lock_records = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self._lock_records:
            self.records.append(record)

    def take(self) -> list[str]:
        """The messages recorded since the last call (with the exception's type, if any)."""
        with self._lock_records:
            records, self.records = self.records, []
        out = []
        for r in records:
            text = r.getMessage()
            if r.exc_info and r.exc_info[1] is not None:
                text += f" [{type(r.exc_info[1]).__name__}: {r.exc_info[1]}]"
            out.append(text)
        return out

    @contextmanager
    def attached(self) -> Iterator[ServerLog]:
        loggers = [logging.getLogger(name) for name in self.LOGGERS]
        for logger in loggers:
            logger.addHandler(self)
        try:
            yield self
        finally:
            for logger in loggers:
                logger.removeHandler(self)


@contextmanager
def serve_in_thread(app: Any, **config: Any) -> Iterator[str]:
    """Serve ``app`` on a free loopback port from a background thread; yields the base URL."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", **config)
    )
    failure: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(server.serve())
        except BaseException as exc:  # reported to the test below
            failure.append(exc)

    thread = threading.Thread(target=run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    for _ in range(3000):
        if server.started or failure or not thread.is_alive():
            break
        threading.Event().wait(0.01)
    if not server.started:
        server.should_exit = True
        thread.join(15)
        raise RuntimeError(f"the test server did not start: {failure or 'timeout'}")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
        if thread.is_alive():  # pragma: no cover - reported, never silently leaked
            server.force_exit = True
            thread.join(10)
        assert not thread.is_alive(), "the test server did not shut down"
