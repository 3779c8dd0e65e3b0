"""``GET /health``, ``GET /ready`` and ``GET /capabilities``: public routes with details for signed-in
callers; ``GET /metrics``: Prometheus metrics, for authenticated callers.

They answer without a token (load balancers and orchestrators probe health and readiness; a client
asks what the agent can do before it signs in), but anonymous callers, when sign-in is configured,
see only the public part: the status (and, for readiness, which dependency is down), and the
agent's identity, transport and state key (a page needs it to read its state). Counts, worker ids,
tools, features and the model need a token.

``/health`` is liveness: 200 while the process serves, whatever its dependencies do (restarting a
process would not bring a database back). ``/ready`` is readiness: the knowledge base, the thread
store, Redis (when configured) and the ingestion queue are each asked, at once and with a time
limit; 503 names what is down.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from ag_ui.core import Tool
from ag_ui.core.capabilities import (
    AgentCapabilities,
    ExecutionCapabilities,
    HumanInTheLoopCapabilities,
    IdentityCapabilities,
    StateCapabilities,
    ToolsCapabilities,
    TransportCapabilities,
)
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from rag_tools.kb import SUPPORTED_SUFFIXES, KnowledgeBase, KnowledgeBaseDamaged, KnowledgeBaseUnavailable

from ..auth import principal_of
from ..errors import (
    JOB_QUEUE_UNAVAILABLE,
    REDIS_UNAVAILABLE,
    SIGN_IN_UNAVAILABLE,
    UNAVAILABLE_RETRY_SECONDS,
    error_response,
)
from ..observe import metrics
from ..observe.outages import outage
from ..oidc import KeySet
from ._common import reader, services_of

__all__ = ["capabilities", "health", "metrics_page", "ready"]

_KNOWLEDGE_BASE = outage("the knowledge base")

#: Seconds each readiness check may take before its dependency counts as down.
CHECK_SECONDS = 5.0

#: Each dependency /ready checks: its name in the answer, how the message says it, its error code.
_DEPENDENCIES = {
    "knowledgeBase": ("the knowledge base", "knowledge_base_unavailable"),
    "threadStore": ("the thread store", "store_unavailable"),
    "redis": ("Redis", REDIS_UNAVAILABLE),
    "jobQueue": ("the ingestion queue", JOB_QUEUE_UNAVAILABLE),
    "identityProvider": ("the identity provider", SIGN_IN_UNAVAILABLE),
}


async def health(request: Request) -> Response:
    """Liveness: 200 while the process serves; the worker and its runs for a signed-in caller."""
    if principal_of(request) is None:
        return JSONResponse({"status": "ok"})
    runs = services_of(request).runs
    return JSONResponse({"status": "ok", "activeRuns": len(runs.active), "worker": runs.worker_id})


async def _check(probe: Callable[[], Awaitable[Any]]) -> tuple[bool, Any]:
    try:
        return True, await asyncio.wait_for(probe(), CHECK_SECONDS)
    except Exception as exc:  # a dependency that fails in any way, or too slowly, is down
        return False, exc


async def _knowledge_base(kb: KnowledgeBase) -> int:
    """The knowledge base answers and its data files read (not only its manifest: a truncated file
    is not ready); the documents it holds. What it says goes to the log once (``observe.outages``)."""
    try:
        await kb.check_readable()
        count = await kb.count_documents()
    except KnowledgeBaseUnavailable as exc:
        _KNOWLEDGE_BASE.failed(exc)
        raise
    _KNOWLEDGE_BASE.recovered()
    return count


async def ready(request: Request) -> Response:
    """Readiness: 200 when every dependency answers; 503 naming the ones that do not."""
    services = services_of(request)
    probes: dict[str, Callable[[], Awaitable[Any]]] = {
        "knowledgeBase": lambda: _knowledge_base(services.kb),
        "threadStore": lambda: services.store.version("__ready__"),
        "jobQueue": services.jobs.ping,
    }
    if services.redis is not None:
        probes["redis"] = services.redis.ping
    identity_provider: KeySet | None = getattr(request.app.state, "identity_provider", None)
    if identity_provider is not None:  # OpenID Connect: its keys held, or fetched now
        probes["identityProvider"] = identity_provider.ready
    names = [name for name in _DEPENDENCIES if name in probes]
    results = dict(zip(names, await asyncio.gather(*(_check(probes[name]) for name in names)), strict=True))
    checks = {name: "ok" if ok else "down" for name, (ok, _) in results.items()}
    down = [name for name, (ok, _) in results.items() if not ok]
    damaged = results["knowledgeBase"][1]
    if isinstance(damaged, KnowledgeBaseDamaged):  # not an outage: waiting will not help, say why
        checks["knowledgeBase"] = "damaged"
        down.remove("knowledgeBase")
    if down or isinstance(damaged, KnowledgeBaseDamaged):
        said = []
        if what := [_DEPENDENCIES[name][0] for name in down]:
            listed = what[0] if len(what) == 1 else f"{', '.join(what[:-1])} and {what[-1]}"
            said.append(f"{listed} {'is' if len(what) == 1 else 'are'} unavailable")
        if isinstance(damaged, KnowledgeBaseDamaged):
            said.insert(
                0,
                f'the knowledge base is damaged ({damaged.reason}): rebuild it (docs/knowledge-base.md, "Rebuilding a damaged knowledge base")',
            )
        return error_response(
            503,
            f"not ready: {'; '.join(said)}",
            code=_DEPENDENCIES["knowledgeBase" if isinstance(damaged, KnowledgeBaseDamaged) else down[0]][1],
            details={"checks": checks},
            headers={"Retry-After": str(UNAVAILABLE_RETRY_SECONDS)},
        )
    body: dict[str, Any] = {"status": "ready", "checks": checks}
    if principal_of(request) is not None:  # the documents this caller may read
        view = services.kb.restricted(reader(request))
        everything = view is services.kb  # a reader of every document: the probe counted them
        body["documents"] = results["knowledgeBase"][1] if everything else await view.count_documents()
    return JSONResponse(body)


_IDENTITY = IdentityCapabilities(
    name="ragstream",
    type="pydantic-ai",
    description="Answers questions about a document collection, with citations.",
    provider="ragstream",
)


def _tools(request: Request) -> list[Tool]:
    tools = []
    for toolset in services_of(request).toolkit.toolsets:
        for tool in getattr(toolset, "tools", {}).values():
            definition = tool.tool_def
            tools.append(
                Tool(
                    name=definition.name,
                    description=definition.description or "",
                    parameters=definition.parameters_json_schema,
                )
            )
    return tools


async def capabilities(request: Request) -> Response:
    """What this agent supports, in AG-UI's capabilities vocabulary."""
    services = services_of(request)
    features = services.toolkit.features
    if principal_of(request) is None:
        public = AgentCapabilities(
            identity=_IDENTITY,
            transport=TransportCapabilities(streaming=True, websocket=False, resumable=True),
        )
        return JSONResponse(public.model_dump(mode="json", by_alias=True, exclude_none=True))
    described = AgentCapabilities(
        identity=_IDENTITY,
        transport=TransportCapabilities(streaming=True, websocket=False, resumable=True),
        tools=ToolsCapabilities(
            supported=True, items=_tools(request), parallel_calls=True, client_provided=True
        ),
        state=StateCapabilities(snapshots=True, deltas=True, memory=True, persistent_state=True),
        human_in_the_loop=HumanInTheLoopCapabilities(
            supported=True, approvals=True, interrupts=True, approve_with_edits=True
        ),
        execution=ExecutionCapabilities(
            code_execution="analysis" in features,
            sandboxed="analysis" in features or None,
            max_execution_time=int(services.config.run_timeout),
        ),
        custom={
            "features": features,
            "model": services.config.model or "offline-extractive",
            "stateKey": services.config.state_key,
            "liveQuestions": True,
            "uploadFormats": sorted(SUPPORTED_SUFFIXES),
        },
    )
    return JSONResponse(described.model_dump(mode="json", by_alias=True, exclude_none=True))


def metrics_page(request: Request) -> Response:
    """The Prometheus metrics of every worker of this server (a thread: reading them is file I/O)."""
    return Response(metrics.render(), media_type=metrics.CONTENT_TYPE)
