"""Errors the HTTP layer answers with, and the one JSON shape they all take.

Every error response is ``{"error": {"status", "code", "message", "details"?}}`` with a 4xx or 503
status. Exceptions that are not ``ApiError`` never reach a client as text: they are logged and
answered with a generic 500 body carrying a reference to the log line.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from pydantic import ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from rag_tools.kb import KnowledgeBaseError
from rag_tools.state import StoreError

from .runs.locks import BackendUnavailable

__all__ = ["ApiError", "error_response", "exception_handlers", "validation_details"]

logger = logging.getLogger("ragstream.server")

_CODES = {
    400: "bad_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    503: "unavailable",
}


class ApiError(Exception):
    """An error with a status, a stable code and a message meant for the client."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        details: Any = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code or _CODES.get(status, "error")
        self.details = details
        self.headers = headers


def error_response(
    status: int,
    message: str,
    *,
    code: str | None = None,
    details: Any = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {"status": status, "code": code or _CODES.get(status, "error"), "message": message}
    if details is not None:
        body["details"] = details
    return JSONResponse({"error": body}, status_code=status, headers=headers)


def validation_details(error: ValidationError, prefix: tuple[str | int, ...] = ()) -> list[dict[str, Any]]:
    """Field errors without echoing the input back: where, what kind, and the message."""
    return [
        {"loc": [*prefix, *e["loc"]], "type": e["type"], "message": e["msg"]}
        for e in error.errors(include_url=False, include_input=False, include_context=False)
    ]


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.message, code=exc.code, details=exc.details, headers=exc.headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = exc.detail if isinstance(exc.detail, str) and exc.detail else "request failed"
    return error_response(exc.status_code, message, headers=getattr(exc, "headers", None))


async def _unexpected(request: Request, exc: Exception) -> Response:
    reference = uuid.uuid4().hex[:12]
    logger.error(
        "unhandled error (reference %s) on %s %s", reference, request.method, request.url.path, exc_info=exc
    )
    return error_response(500, f"internal error (reference {reference})", code="internal_error")


async def _unavailable(request: Request, exc: Exception) -> Response:
    logger.warning("backend unavailable on %s %s: %s", request.method, request.url.path, exc)
    return error_response(503, "the thread store is unavailable; retry shortly", code="unavailable")


async def _knowledge_base_unavailable(request: Request, exc: Exception) -> Response:
    logger.warning("knowledge base unavailable on %s %s: %s", request.method, request.url.path, exc)
    return error_response(
        503, "the knowledge base is unavailable; retry shortly", code="knowledge_base_unavailable"
    )


exception_handlers: dict[Any, Any] = {
    ApiError: _api_error,
    HTTPException: _http_error,
    StoreError: _unavailable,
    BackendUnavailable: _unavailable,
    KnowledgeBaseError: _knowledge_base_unavailable,
    Exception: _unexpected,
}
