"""How the HTTP API answers errors: one JSON shape, and one table from domain errors to statuses.

Every error response is ``{"error": {"status", "code", "message", "details"?}}`` with a 4xx or 503
status (a 429 or a 503 says when to retry in ``Retry-After``). The layers below raise domain errors that say what happened (``RunConflict``,
``ThreadNotFound``, ``InvalidRequest``, ``StoreError``, ...); ``ERROR_TABLE`` below is the only
place that decides which status and code each gets. ``ApiError`` is for what only the web layer
knows (content types, request bodies, query strings). Exceptions that are not in the table never
reach a client as text: they are logged and answered with a generic 500 carrying a log reference.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from starlette.exceptions import HTTPException
from starlette.middleware.body_limit import MAX_BODY_SIZE_SCOPE_KEY
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from rag_tools.kb import DocumentChanged, KnowledgeBaseError
from rag_tools.kb.access import InvalidGroups
from rag_tools.state import StoreError

from .access import (
    DocumentForbidden,
    DocumentNotFound,
    JobFinished,
    JobNotFound,
    MessageNotFound,
    NotAnEditor,
    StateItemNotFound,
    ThreadNotFound,
)
from .jobs import InvalidCursor, JobQueueUnavailable
from .quotas import LargerThanQuota, QuotaExceeded
from .runs import BackendUnavailable, FailureCode, QuestionNotFound, RunConflict, RunNotFound
from .validation import InvalidRequest

__all__ = [
    "ERROR_TABLE",
    "JOB_QUEUE_UNAVAILABLE",
    "REDIS_UNAVAILABLE",
    "SIGN_IN_UNAVAILABLE",
    "UNAVAILABLE_RETRY_SECONDS",
    "ApiError",
    "ErrorAnswer",
    "answer_for",
    "error_response",
    "exception_handlers",
    "too_large_message",
]

logger = logging.getLogger("ragstream.server")

#: Seconds a client is asked to wait before retrying a 503 (a dependency that is down).
UNAVAILABLE_RETRY_SECONDS = 5

#: The 503 codes of the dependencies that can be down, shared by the API's answers and ``/ready``.
REDIS_UNAVAILABLE = "redis_unavailable"
JOB_QUEUE_UNAVAILABLE = "job_queue_unavailable"
SIGN_IN_UNAVAILABLE = "sign_in_unavailable"

_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    429: "too_many_requests",
    503: "unavailable",
}


class ApiError(Exception):
    """An error only the web layer knows, with a status, a stable code and a message for the client."""

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


@dataclass(frozen=True)
class _Answer:
    status: int
    code: str | None = None  # None: the error's own ``code`` attribute, else the status's code
    message: str | None = None  # None: ``str(error)``, which the raising layer wrote for the client
    log: bool = False


#: Domain error type -> how the API answers it. Checked in order; the first matching type wins.
ERROR_TABLE: tuple[tuple[type[Exception], _Answer], ...] = (
    (InvalidRequest, _Answer(422)),
    (ThreadNotFound, _Answer(404)),
    (JobNotFound, _Answer(404)),
    (JobFinished, _Answer(409)),
    (InvalidCursor, _Answer(422)),
    (NotAnEditor, _Answer(403)),
    (DocumentNotFound, _Answer(404)),
    (DocumentForbidden, _Answer(403)),
    (InvalidGroups, _Answer(422, "invalid_groups")),
    (RunNotFound, _Answer(404)),
    (QuestionNotFound, _Answer(404)),
    (StateItemNotFound, _Answer(404)),
    (MessageNotFound, _Answer(404)),
    (RunConflict, _Answer(409)),
    (QuotaExceeded, _Answer(429)),
    (LargerThanQuota, _Answer(413)),
    (
        JobQueueUnavailable,
        _Answer(503, JOB_QUEUE_UNAVAILABLE, "the ingestion queue is unavailable; retry shortly", log=True),
    ),
    (BackendUnavailable, _Answer(503, REDIS_UNAVAILABLE, "Redis is unavailable; retry shortly", log=True)),
    (
        StoreError,
        _Answer(
            503, FailureCode.STORE_UNAVAILABLE, "the thread store is unavailable; retry shortly", log=True
        ),
    ),
    (DocumentChanged, _Answer(409, "document_changed")),
    (
        KnowledgeBaseError,
        _Answer(
            503,
            FailureCode.KNOWLEDGE_BASE_UNAVAILABLE,
            "the knowledge base is unavailable; retry shortly",
            log=True,
        ),
    ),
)


def too_large_message(limit: int) -> str:
    """What a 413 says."""
    return f"request body is larger than the limit of {limit} bytes"


def error_response(
    status: int,
    message: str,
    *,
    code: str | None = None,
    details: Any = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """The JSON error response every failure takes."""
    body: dict[str, Any] = {"status": status, "code": code or _CODES.get(status, "error"), "message": message}
    if details is not None:
        body["details"] = details
    return JSONResponse({"error": body}, status_code=status, headers=headers)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.message, code=exc.code, details=exc.details, headers=exc.headers)


@dataclass(frozen=True)
class ErrorAnswer:
    """How a domain error is answered: its status, stable code and the client's message."""

    status: int
    code: str
    message: str
    log: bool


def answer_for(exc: Exception) -> ErrorAnswer | None:
    """What ``ERROR_TABLE`` says to answer ``exc`` (``None``: not a domain error, never shown)."""
    answer = next((answer for kind, answer in ERROR_TABLE if isinstance(exc, kind)), None)
    if answer is None:
        return None
    code = answer.code or getattr(exc, "code", None)
    return ErrorAnswer(
        answer.status,
        str(code) if code else _CODES.get(answer.status, "error"),
        answer.message or str(exc),
        answer.log,
    )


async def _domain_error(request: Request, exc: Exception) -> Response:
    answer = answer_for(exc)
    assert answer is not None, "registered for the table's types only"
    if answer.log:
        logger.warning("%s on %s %s: %s", type(exc).__name__, request.method, request.url.path, exc)
    headers = getattr(exc, "headers", None)
    if answer.status == 503:
        headers = {**(headers or {}), "Retry-After": str(UNAVAILABLE_RETRY_SECONDS)}
    return error_response(
        answer.status,
        answer.message,
        code=answer.code,
        details=getattr(exc, "details", None),
        headers=headers,
    )


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 413 and MAX_BODY_SIZE_SCOPE_KEY in request.scope:
        message = too_large_message(request.scope[MAX_BODY_SIZE_SCOPE_KEY])
    else:
        message = exc.detail if isinstance(exc.detail, str) and exc.detail else "request failed"
    return error_response(exc.status_code, message, headers=getattr(exc, "headers", None))


async def _unexpected(request: Request, exc: Exception) -> Response:
    reference = uuid.uuid4().hex[:12]
    logger.error(
        "unhandled error (reference %s) on %s %s", reference, request.method, request.url.path, exc_info=exc
    )
    return error_response(500, f"internal error (reference {reference})", code="internal_error")


exception_handlers: dict[Any, Any] = {
    ApiError: _api_error,
    HTTPException: _http_error,
    **{kind: _domain_error for kind, _ in ERROR_TABLE},
    Exception: _unexpected,
}
