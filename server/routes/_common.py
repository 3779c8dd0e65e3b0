"""What every route reads from a request: the services, the caller, the body, ids, query numbers."""

from __future__ import annotations

import re

from starlette.requests import ClientDisconnect, Request

from rag_tools.kb.access import Reader

from ..access import reader_of
from ..auth import groups_of, principal_of
from ..errors import ApiError
from ..observe import logs
from ..services import Services
from ..validation import check_id

__all__ = [
    "caller",
    "int_param",
    "media_type",
    "path_id",
    "read_body",
    "read_json_body",
    "reader",
    "services_of",
]

_INTEGER = re.compile(r"-?[0-9]{1,18}")


def services_of(request: Request) -> Services:
    return request.app.state.services  # type: ignore[no-any-return]


def caller(request: Request) -> str:
    """The authenticated principal (every non-public route has one: the auth middleware saw to it)."""
    principal = principal_of(request)
    if principal is None:  # a public route asked for a caller it cannot have
        raise ApiError(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
    logs.bind(
        principal=principal, thread=request.path_params.get("thread_id")
    )  # for this request's log lines
    return principal


def media_type(request: Request) -> str:
    """The request body's media type, lower case, without parameters (``""`` when not given)."""
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def reader(request: Request) -> Reader:
    """Whose documents the caller reads (``access.reader_of``): what every read of the KB applies."""
    config = services_of(request).config
    return reader_of(
        caller(request), groups_of(request), editors=config.editors, sign_in_required=config.sign_in_required
    )


def path_id(request: Request, name: str, what: str) -> str:
    """A thread or run id from the path, checked (``InvalidRequest`` otherwise)."""
    return check_id(request.path_params[name], what)


async def read_body(request: Request) -> bytes:
    """The request body (its size is bounded by the body-limit middleware: 413 beyond it)."""
    try:
        return await request.body()
    except ClientDisconnect:  # nobody is left to answer; not an error of ours
        raise ApiError(400, "the client disconnected before sending the whole body") from None


async def read_json_body(request: Request) -> bytes:
    """The body of a route that takes JSON: 415 unless it is sent as ``application/json``."""
    content_type = media_type(request)
    if content_type != "application/json":
        raise ApiError(415, f"Content-Type must be application/json, got {content_type or 'nothing'!r}")
    return await read_body(request)


def int_param(request: Request, name: str, default: int, *, low: int, high: int) -> int:
    """An integer query parameter within ``[low, high]``; 422 otherwise.

    Plain decimal digits only: Python's ``int`` also reads ``1_0``, `` 5``, ``+1`` and other
    scripts' digits, which ``Last-Event-ID`` (the same cursor as ``after``) does not take.
    """
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not _INTEGER.fullmatch(raw):
        raise ApiError(422, f"{name} must be an integer", details=[{"loc": ["query", name]}])
    value = int(raw)
    if not low <= value <= high:
        raise ApiError(422, f"{name} must be between {low} and {high}", details=[{"loc": ["query", name]}])
    return value
