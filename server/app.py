"""``create_app``: the Starlette application serving AG-UI runs, threads and documents."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from pydantic_ai import Agent
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import Route

from rag_tools import Toolkit
from rag_tools.state import ThreadStore

from .config import AppConfig
from .errors import exception_handlers
from .routes.agui import agui
from .routes.documents import list_documents, upload_documents
from .routes.meta import capabilities, health
from .routes.static import static_routes
from .routes.threads import get_thread, list_all, put_approval_policy, remove_thread, run_events, stop_run
from .runs import fastlocks
from .services import Services

__all__ = ["create_app", "create_served_app"]


def create_app(
    config: AppConfig | None = None,
    *,
    agent: Agent[Any, Any] | None = None,
    toolkit: Toolkit | None = None,
    store: ThreadStore | None = None,
    freeze_gc: bool = False,
    **backends: Any,
) -> Starlette:
    """The ragstream ASGI app; services start in its lifespan.

    ``agent``, ``toolkit`` and ``store`` replace the configured defaults (tests, embedding apps).
    ``freeze_gc`` moves everything alive after startup (models, tables, schemas) out of the garbage
    collector's scans with ``gc.freeze()``: full collections then take a few milliseconds instead of
    pausing every stream for hundreds. It changes the whole process, so only ``ragstream serve``
    (``create_served_app``) turns it on. Creating an app also makes pydantic-ai's per-event stream
    locks skip their event-loop yield (``runs.fastlocks``).
    """
    config = config or AppConfig()
    fastlocks.install()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        services = await Services.start(config, agent=agent, toolkit=toolkit, store=store, **backends)
        app.state.services = services
        if freeze_gc:
            gc.collect()
            gc.freeze()
        try:
            yield
        finally:
            await services.close()

    routes = [
        Route("/agui", agui, methods=["POST"]),
        Route("/threads", list_all, methods=["GET"]),
        Route("/threads/{thread_id}", get_thread, methods=["GET"]),
        Route("/threads/{thread_id}", remove_thread, methods=["DELETE"]),
        Route("/threads/{thread_id}/approval-policy", put_approval_policy, methods=["PUT"]),
        Route("/threads/{thread_id}/runs/{run_id}/stop", stop_run, methods=["POST"]),
        Route("/threads/{thread_id}/runs/{run_id}/events", run_events, methods=["GET"]),
        Route("/documents", list_documents, methods=["GET"]),
        Route("/documents", upload_documents, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
        Route("/capabilities", capabilities, methods=["GET"]),
        # the chat page last: the API routes keep precedence
        *static_routes(),
    ]
    middleware = []
    if config.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=config.cors_origins,
                allow_methods=["GET", "POST", "PUT", "DELETE"],
                allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
                expose_headers=["Content-Type"],
            )
        )
    return Starlette(
        routes=routes, middleware=middleware, lifespan=lifespan, exception_handlers=exception_handlers
    )


def create_served_app() -> Starlette:
    """The app as ``ragstream serve`` runs it in each worker: configured from the environment."""
    return create_app(freeze_gc=True)
