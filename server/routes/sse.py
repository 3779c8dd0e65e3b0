"""Server-Sent Events responses over a run's event log, through ``sse_starlette``.

A run's events arrive from the engine as batches of ``(sequence, encoded event)``; each batch is
framed once (``id:`` is the event's sequence number, so a client reconnects with
``Last-Event-ID``) and written as one chunk. ``EventSourceResponse`` brings the rest: keep-alive
comments, client-disconnect detection (the subscriber closes, which starts the run's disconnect
policy), a per-write send timeout for clients that stop reading, and draining on server shutdown.
Frames are separated by ``\\n`` only: ``@ag-ui/client`` splits on ``\\n\\n``, and
sse-starlette's default ``\\r\\n`` would break it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
from sse_starlette import EventSourceResponse, ServerSentEvent

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
    return EventSourceResponse(
        _frames(batches),
        headers=_HEADERS,
        ping=keepalive,
        sep="\n",
        ping_message_factory=_ping,
        send_timeout=SEND_TIMEOUT_SECONDS,
        shutdown_event=stopping,
        shutdown_grace_period=SHUTDOWN_GRACE_SECONDS if stopping is not None else 0,
    )
