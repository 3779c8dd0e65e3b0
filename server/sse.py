"""``EventStreamResponse``: Server-Sent Events over frames that are already encoded.

Run streams arrive as ready SSE frames (``RunManager.subscribe``), so the response only writes
them. Beside the writer, one watcher task waits for the client to go away (the run's disconnect
policy starts from there, even while the run is quiet) and writes a keep-alive comment when
nothing was sent for ``keepalive`` seconds, so proxies keep the connection open.

It replaces ``sse_starlette.EventSourceResponse``, which does the same with four tasks per
response and a cancel scope around every write: about 0.1 ms before the first event of every run
and one more scope per batch of events, for features (per-write timeouts, its own shutdown signal,
string encoding) a stream of ready frames does not use.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

__all__ = ["EventStreamResponse"]

_PING = b": ping\n\n"


class EventStreamResponse(Response):
    """A ``text/event-stream`` response writing ``frames`` (complete SSE messages) as they come."""

    media_type = "text/event-stream"

    def __init__(
        self, frames: AsyncIterator[bytes], *, keepalive: float, headers: Mapping[str, str] | None = None
    ) -> None:
        self.frames = frames
        self.keepalive = keepalive
        self.status_code = 200
        self.background = None
        self.init_headers(headers)
        self._last_write = 0.0
        self._client_left = False
        self._finished = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        loop = asyncio.get_running_loop()
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        if scope.get("method") == "HEAD":
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            await _aclose(self.frames)
            return
        writer = asyncio.current_task()
        assert writer is not None
        self._last_write = loop.time()
        watcher = asyncio.create_task(self._watch(receive, send, writer))
        try:
            async for frame in self.frames:
                await send({"type": "http.response.body", "body": frame, "more_body": True})
                self._last_write = loop.time()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            # The watcher's cancel (the client left) ends the response quietly; any other (server
            # shutdown) goes on.
            if not self._client_left or writer.uncancel() > 0:
                raise
        except OSError:  # the connection broke under a write: the client is gone
            pass
        finally:
            self._finished = True  # from here on a disconnect must not cancel the cleanup
            watcher.cancel()
            await _aclose(self.frames)

    async def _watch(self, receive: Receive, send: Send, writer: asyncio.Task[object]) -> None:
        """Cancel ``writer`` when the client disconnects; write keep-alives while the stream is quiet."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                deadline = self._last_write + self.keepalive if self.keepalive > 0 else None
                try:
                    async with asyncio.timeout_at(deadline):
                        message = await receive()
                except TimeoutError:
                    if loop.time() >= self._last_write + self.keepalive:
                        self._last_write = loop.time()
                        await send({"type": "http.response.body", "body": _PING, "more_body": True})
                    continue
                if message["type"] == "http.disconnect":
                    break
        except OSError:  # a keep-alive found the connection broken
            pass
        if not self._finished:
            self._client_left = True
            writer.cancel()


async def _aclose(frames: AsyncIterator[bytes]) -> None:
    aclose = getattr(frames, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()
