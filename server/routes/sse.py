"""Server-Sent Events responses over a run's event log, through ``sse_starlette``.

A run's events arrive from the engine as batches of ``(sequence, encoded event)``; each batch is
framed once (``id:`` is the event's sequence number, so a client reconnects with
``Last-Event-ID``) and written as one chunk. ``EventSourceResponse`` brings the rest: keep-alive
comments, client-disconnect detection (the subscriber closes, which starts the run's disconnect
policy), a per-write send timeout for clients that stop reading, and draining on server shutdown.
Frames are separated by ``\\n`` only: ``@ag-ui/client`` splits on ``\\n\\n``, and
sse-starlette's default ``\\r\\n`` would break it.

sse-starlette (3.7) bounds every write by the send timeout but the last, the end of the body it
sends once the stream is exhausted. A client that stops reading (and keeps its socket open) after
a large batch, such as a reconnect replaying a finished run, took the whole replay into the
transport's buffer and then held the response, its task and that buffer until it closed the
socket, which may be never. ``_BoundedEnd`` puts that last write under the same timeout.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
from sse_starlette import EventSourceResponse, ServerSentEvent
from sse_starlette.sse import SendTimeoutError
from starlette.types import Message, Receive, Scope, Send

__all__ = ["SEND_TIMEOUT_SECONDS", "SHUTDOWN_GRACE_SECONDS", "sse_frame", "sse_response"]

SEND_TIMEOUT_SECONDS = 30.0
SHUTDOWN_GRACE_SECONDS = 5.0
"""How long a stream may go on after the server is told to stop: under ``ragstream serve``'s
10 s graceful-shutdown timeout, and far longer than a run takes to write its ``shutdown`` end."""
_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def sse_frame(seq: int, data: bytes) -> bytes:
    """One SSE message with its id."""
    return b"id: %d\ndata: %s\n\n" % (seq, data)


async def _frames(batches: AsyncIterator[list[tuple[int, bytes]]]) -> AsyncIterator[bytes]:
    try:
        async for batch in batches:
            yield b"".join(sse_frame(seq, data) for seq, data in batch)
    finally:
        await batches.aclose()  # type: ignore[attr-defined]


class _BoundedEnd(EventSourceResponse):
    """``EventSourceResponse`` whose end of body is bounded by the send timeout like every other
    write (see the module doc); a client that stopped reading is then cut off, not waited for."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def bounded(message: Message) -> None:
            if message["type"] != "http.response.body" or message.get("more_body", False):
                await send(message)
                return
            with anyio.move_on_after(self.send_timeout) as scope_:
                await send(message)
            if scope_.cancelled_caught:
                raise SendTimeoutError()

        await super().__call__(scope, receive, bounded)


def _ping() -> ServerSentEvent:
    return ServerSentEvent(comment="ping", sep="\n")


def sse_response(
    batches: AsyncIterator[list[tuple[int, bytes]]], *, keepalive: float, stopping: anyio.Event | None = None
) -> EventSourceResponse:
    """The SSE response streaming ``batches`` (from ``RunManager.subscribe``).

    When the server is told to stop, sse-starlette sets ``stopping`` (``Services.stopping``: the
    local runs then end with ``RUN_ERROR`` ``shutdown``) and lets the stream run on for up to
    ``SHUTDOWN_GRACE_SECONDS``, so the client reads that terminal event before the connection
    closes instead of a cut stream.
    """
    return _BoundedEnd(
        _frames(batches),
        headers=_HEADERS,
        ping=keepalive,
        sep="\n",
        ping_message_factory=_ping,
        send_timeout=SEND_TIMEOUT_SECONDS,
        shutdown_event=stopping,
        shutdown_grace_period=SHUTDOWN_GRACE_SECONDS if stopping is not None else 0,
    )
