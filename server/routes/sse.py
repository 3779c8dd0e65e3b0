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

from sse_starlette import EventSourceResponse, ServerSentEvent

__all__ = ["SEND_TIMEOUT_SECONDS", "sse_frame", "sse_response"]

SEND_TIMEOUT_SECONDS = 30.0
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


def sse_response(batches: AsyncIterator[list[tuple[int, bytes]]], *, keepalive: float) -> EventSourceResponse:
    """The SSE response streaming ``batches`` (from ``RunManager.subscribe``)."""
    return EventSourceResponse(
        _frames(batches),
        headers=_HEADERS,
        ping=keepalive,
        sep="\n",
        ping_message_factory=_ping,
        send_timeout=SEND_TIMEOUT_SECONDS,
    )
