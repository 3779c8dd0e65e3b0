"""Helpers every route uses: the services, the caller, bounded bodies, ids, SSE responses."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

from starlette.requests import ClientDisconnect, Request

from ..auth import authenticate
from ..errors import ApiError
from ..services import Services
from ..sse import EventStreamResponse

__all__ = ["check_id", "principal_of", "read_body", "services_of", "sse_response"]

_ID = re.compile(r"[\w.:@~+=-]{1,200}")
SSE_HEADERS = {"X-Accel-Buffering": "no", "Cache-Control": "no-store"}


def services_of(request: Request) -> Services:
    return request.app.state.services  # type: ignore[no-any-return]


def principal_of(request: Request) -> str:
    return authenticate(request, services_of(request).config.tokens)


def check_id(value: str, what: str) -> str:
    """``value`` if it is a usable thread or run id; ``ApiError(422)`` otherwise."""
    if not _ID.fullmatch(value):
        raise ApiError(
            422,
            f"{what} must be 1-200 letters, digits or . : @ ~ + = - _ characters",
            details=[{"loc": [what]}],
        )
    return value


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing (413) to read more than ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            too_big = int(declared) > limit
        except ValueError:
            raise ApiError(400, "Content-Length is not a number") from None
        if too_big:
            raise ApiError(413, f"request body is larger than the limit of {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ApiError(413, f"request body is larger than the limit of {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect:  # nobody is left to answer; not an error of ours
        raise ApiError(400, "the client disconnected before sending the whole body") from None
    return b"".join(chunks)


def sse_response(frames: AsyncIterator[bytes], keepalive: float) -> EventStreamResponse:
    """An SSE response over pre-framed events, with keep-alive comments."""
    return EventStreamResponse(frames, keepalive=keepalive, headers=SSE_HEADERS)
