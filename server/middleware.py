"""Pure ASGI middleware of the app: request body limits chosen per route, and request spans.

Starlette's ``RequestBodyLimitMiddleware`` limits every body to one size; routes here need
different ones (a run request, an upload, a small JSON policy). ``BodyLimitMiddleware`` picks the
limit of the route a request matches, else the default, and applies it with Starlette's own
``RequestBodyLimitResponder``, so every route is limited unless the app says otherwise. A declared
``Content-Length`` above the limit is answered here, before the app runs, in the API's JSON error
shape (Starlette's responder would answer it in plain text); a streamed body that grows past the
limit raises Starlette's 413 ``HTTPException`` inside the app, which the app's handlers answer the
same way. A body sent with a ``Content-Encoding`` (gzip, ...) is refused here too (415): every route
reads bodies as sent, and would otherwise report the compressed bytes as invalid JSON or a missing
file. (Pure ASGI rather than ``BaseHTTPMiddleware``, which would add a hop to every chunk of a
stream.)

``tracing_middleware`` is OpenTelemetry's own ASGI middleware (``opentelemetry-instrumentation-asgi``,
pure ASGI too), used only when tracing is on: one server span per request, continuing a W3C
``traceparent`` the client sent, named after the matched route's template (``POST /agui``,
``GET /threads/{thread_id}``). Its per-message ``send``/``receive`` spans are left out: a stream
would get one per chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.middleware.body_limit import RequestBodyLimitResponder
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from rag_tools.extras import extra_imports

from .errors import error_response, too_large_message

__all__ = ["BodyLimitMiddleware", "tracing_middleware"]

_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})


class BodyLimitMiddleware:
    """Refuse request bodies above the limit of the matching route, or ``default`` (413), and
    content-encoded ones (415)."""

    def __init__(self, app: ASGIApp, default: int, limits: Sequence[tuple[BaseRoute, int]] = ()) -> None:
        self.app = app
        self.default = default
        self.limits = list(limits)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = next(
            (size for route, size in self.limits if route.matches(scope)[0] == Match.FULL), self.default
        )
        headers = Headers(scope=scope)
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if encoding != "identity" and scope["method"] in _WITH_BODY:
            message = f"Content-Encoding {encoding!r} is not supported: send the body uncompressed"
            await error_response(415, message)(scope, receive, send)
            return
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await error_response(413, too_large_message(limit))(scope, receive, send)
            return
        await RequestBodyLimitResponder(self.app, limit)(scope, receive, send)


def tracing_middleware(routes: Sequence[BaseRoute]) -> Middleware:
    """The request-span middleware, naming spans after ``routes``' templates."""
    with extra_imports("otel"):
        from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

    def span_details(scope: Scope) -> tuple[str, dict[str, Any]]:
        method = scope.get("method", "HTTP")
        for route in routes:
            if route.matches(scope)[0] == Match.FULL:
                template = getattr(route, "path", "")
                return f"{method} {template}", {"http.route": template}
        return method, {}

    return Middleware(
        OpenTelemetryMiddleware, exclude_spans=["receive", "send"], default_span_details=span_details
    )
