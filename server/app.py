"""``create_app``: the Starlette application serving AG-UI runs, threads and documents.

The route table below is the whole HTTP surface. Two decisions are made here for every route at
once, so a new route is covered by default: authentication (every route needs a principal except
the ones listed as public) and the request body limit (the default unless a route is given its own).
"""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from pydantic_ai import Agent
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import BaseRoute, Route

from rag_tools import Toolkit
from rag_tools.state import ThreadStore

from .agui._upstream import install_fast_stream_locks, install_handoff_drain_fix
from .auth import AuthBackend, Scheme, StaticTokens, auth_error, load_scheme
from .config import AppConfig
from .errors import exception_handlers
from .middleware import BodyLimitMiddleware, tracing_middleware
from .observe import metrics, tracing
from .oidc import OIDCScheme
from .routes.agui import agui
from .routes.documents import (
    PATCH_BODY_LIMIT,
    cancel_job,
    delete_document,
    get_document,
    get_job,
    get_page_image,
    list_documents,
    list_jobs,
    patch_document,
    upload_documents,
)
from .routes.meta import capabilities, health, metrics_page, ready
from .routes.static import static_routes
from .routes.threads import (
    ANSWER_BODY_LIMIT,
    POLICY_BODY_LIMIT,
    answer_question,
    fork,
    get_attachment,
    get_state_item,
    get_thread,
    list_all,
    put_approval_policy,
    remove_thread,
    run_events,
    stop_run,
    switch,
)
from .services import Services

if TYPE_CHECKING:  # the mcp extra is optional: imported only when MCP is served
    from .mcp.endpoint import MCPEndpoint

__all__ = ["CORS_HEADERS", "create_app", "create_mcp_app", "create_served_app", "sign_in_schemes"]

#: Request headers a browser of an allowed origin may always send: sign-in, JSON bodies, the
#: reconnect of a run's events, and the W3C trace context a traced page forwards.
CORS_HEADERS = ("Authorization", "Content-Type", "Last-Event-ID", "traceparent", "tracestate")


def create_app(
    config: AppConfig | None = None,
    *,
    agent: Agent[Any, Any] | None = None,
    toolkit: Toolkit | None = None,
    store: ThreadStore | None = None,
    freeze_gc: bool = False,
    fast_stream_locks: bool = False,
    handoff_drain_fix: bool = False,
    **backends: Any,
) -> Starlette:
    """The ragstream ASGI app; services start in its lifespan.

    ``agent``, ``toolkit`` and ``store`` replace the configured defaults (tests, embedding apps).
    Two process-wide tunings are off by default and on in ``ragstream serve``
    (``create_served_app``), since they change the whole process, not just this app:
    ``freeze_gc`` moves everything alive after startup (models, tables, schemas) out of the
    garbage collector's scans with ``gc.freeze()``, so full collections take milliseconds instead
    of pausing every stream; ``fast_stream_locks`` patches pydantic-ai's per-event stream locks
    (``agui._upstream``). ``handoff_drain_fix`` patches pydantic-ai so that a run stopped as it
    hands work between its tasks leaves none behind (``agui._upstream``; a leak otherwise, about one
    stop in forty under load); it too is on in ``ragstream serve``.
    """
    config = config or AppConfig()
    tracing.configure_tracing()  # on only when OTEL_* variables ask for it
    if handoff_drain_fix:
        install_handoff_drain_fix()
    if fast_stream_locks:
        install_fast_stream_locks()

    mcp = _mcp_endpoint(config, allow_writes=config.mcp_allow_writes) if config.mcp else None

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        services = await Services.start(config, agent=agent, toolkit=toolkit, store=store, **backends)
        app.state.services = services
        if freeze_gc:
            gc.collect()
            gc.freeze()
        try:
            async with mcp.serving(services.kb) if mcp is not None else contextlib.nullcontext():
                yield
        finally:
            await services.close()
            metrics.mark_process_dead()

    upload = Route("/documents", upload_documents, methods=["POST"])
    regroup = Route("/documents/{document_id}", patch_document, methods=["PATCH"])
    policy = Route("/threads/{thread_id}/approval-policy", put_approval_policy, methods=["PUT"])
    answers = Route("/threads/{thread_id}/runs/{run_id}/answers", answer_question, methods=["POST"])
    public: list[BaseRoute] = [
        Route("/health", health, methods=["GET"]),
        Route("/ready", ready, methods=["GET"]),
        Route("/capabilities", capabilities, methods=["GET"]),
        *static_routes(),  # the chat page asks for a token itself
    ]
    routes: list[BaseRoute] = [
        Route("/agui", agui, methods=["POST"]),
        Route("/threads", list_all, methods=["GET"]),
        Route("/threads/{thread_id}", get_thread, methods=["GET"]),
        Route("/threads/{thread_id}", remove_thread, methods=["DELETE"]),
        Route("/threads/{thread_id}/switch", switch, methods=["POST"]),
        Route("/threads/{thread_id}/fork", fork, methods=["POST"]),
        Route("/threads/{thread_id}/state/{field}", get_state_item, methods=["GET"]),
        Route("/threads/{thread_id}/state/{field}/{key}", get_state_item, methods=["GET"]),
        Route("/threads/{thread_id}/attachments/{ref}", get_attachment, methods=["GET"]),
        policy,
        Route("/threads/{thread_id}/runs/{run_id}/stop", stop_run, methods=["POST"]),
        answers,
        Route("/threads/{thread_id}/runs/{run_id}/events", run_events, methods=["GET"]),
        Route("/documents", list_documents, methods=["GET"]),
        upload,
        Route("/documents/jobs", list_jobs, methods=["GET"]),
        Route("/documents/jobs/{job_id}", get_job, methods=["GET"]),
        Route("/documents/jobs/{job_id}", cancel_job, methods=["DELETE"]),
        Route("/documents/{document_id}", get_document, methods=["GET"]),
        Route("/documents/{document_id}/page", get_page_image, methods=["GET"]),
        Route("/documents/{document_id}", delete_document, methods=["DELETE"]),
        regroup,
        *([Route("/mcp", mcp)] if mcp is not None else []),  # the knowledge base over MCP (server/mcp/)
        # on its own listener instead when RAGSTREAM_METRICS_ADDRESS is set (``ragstream serve``)
        *(
            [Route("/metrics", metrics_page, methods=["GET"])]
            if config.metrics and not config.metrics_address
            else []
        ),
        *public,  # last: the chat page's catch-alls must not shadow the API
    ]
    schemes = sign_in_schemes(config)
    middleware = [tracing_middleware(routes)] if tracing.enabled() else []
    if config.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=config.cors_origins,
                allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
                allow_headers=[*CORS_HEADERS, *config.cors_headers],
                expose_headers=["Content-Type"],
            )
        )
    middleware += _sign_in_and_limits(
        config,
        schemes,
        public,
        limits=[
            (upload, config.max_upload_bytes),
            (policy, POLICY_BODY_LIMIT),
            (answers, ANSWER_BODY_LIMIT),
            (regroup, PATCH_BODY_LIMIT),
        ],
    )
    app = Starlette(
        routes=routes, middleware=middleware, lifespan=lifespan, exception_handlers=exception_handlers
    )
    # /ready asks the identity provider too: a server that can check no token serves no signed-in user
    app.state.identity_provider = next((s.keys for s in schemes if isinstance(s, OIDCScheme)), None)
    return app


def _sign_in_and_limits(
    config: AppConfig,
    schemes: list[Scheme],
    public: list[BaseRoute],
    limits: list[tuple[BaseRoute, int]] | None = None,
) -> list[Middleware]:
    """Who calls (every route but ``public`` needs a principal: 401 otherwise) and how large a body
    may be (``limits`` per route, else ``max_body_bytes``)."""
    return [
        Middleware(AuthenticationMiddleware, backend=AuthBackend(schemes, public), on_error=auth_error),
        Middleware(BodyLimitMiddleware, default=config.max_body_bytes, limits=limits or []),
    ]


def _mcp_endpoint(config: AppConfig, *, allow_writes: bool) -> MCPEndpoint:
    """The knowledge base's MCP endpoint; ``RuntimeError`` naming the extra when the SDK is missing."""
    from .mcp import MISSING_EXTRA, mcp_problem

    if mcp_problem() is not None:
        raise RuntimeError(MISSING_EXTRA)
    from .mcp.endpoint import MCPEndpoint
    from .mcp.tools import KnowledgeBaseTools

    return MCPEndpoint(KnowledgeBaseTools(config, allow_writes=allow_writes), host=config.host)


def create_mcp_app(config: AppConfig | None = None, *, allow_writes: bool = False) -> Starlette:
    """The knowledge base as an MCP server alone, at ``/mcp`` (``ragstream mcp --http``): the
    configured knowledge base and sign-in, none of the chat server's threads or runs.

    ``allow_writes`` offers the ingest and delete tools (to editors only).
    """
    config = config or AppConfig()
    mcp = _mcp_endpoint(config, allow_writes=allow_writes)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        from .mcp.endpoint import served_knowledge_base

        async with served_knowledge_base(config) as kb, mcp.serving(kb):
            yield

    return Starlette(
        routes=[Route("/mcp", mcp)],
        middleware=_sign_in_and_limits(config, sign_in_schemes(config), []),
        lifespan=lifespan,
    )


def sign_in_schemes(config: AppConfig) -> list[Scheme]:
    """The configured ways to sign in, in the order they are asked: static tokens, OpenID Connect,
    then the ``RAGSTREAM_AUTH`` hook. None: every caller is the one local user."""
    schemes: list[Scheme] = []
    if config.tokens:
        schemes.append(StaticTokens(config.tokens))
    if config.oidc_issuer:
        schemes.append(OIDCScheme.from_config(config))
    if config.auth:
        schemes.append(load_scheme(config.auth))
    return schemes


def create_served_app() -> Starlette:
    """The app as ``ragstream serve`` runs it in each worker (see ``ragstream.commands``)."""
    config = AppConfig.from_worker_payload()
    if config.log_format == "json":
        logging.captureWarnings(True)  # Python's warnings become log lines too: stderr stays JSON
    return create_app(config, freeze_gc=True, fast_stream_locks=True, handoff_drain_fix=True)
