"""``GET /health`` and ``GET /capabilities``: public routes with details for authenticated callers;
``GET /metrics``: Prometheus metrics, for authenticated callers.

Both answer without a token (load balancers probe health; a client asks what the agent can do
before it signs in), but anonymous callers, when tokens are configured, see only the public part:
``status`` of the health check, and the agent's identity, transport and state key (a page needs it
to read its state). Counts, worker ids, tools, features and the model need a token.
"""

from __future__ import annotations

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

from ..auth import principal_of
from ..errors import error_response
from ..observe import metrics
from ._common import services_of

__all__ = ["capabilities", "health", "metrics_page"]


async def health(request: Request) -> Response:
    """Liveness and readiness: 503 when the knowledge base or the thread store cannot be read."""
    services = services_of(request)
    checks: dict[str, Any] = {}
    try:
        checks["documents"] = await services.kb.count_documents()
    except Exception:
        return error_response(503, "the knowledge base is unavailable", code="knowledge_base_unavailable")
    try:
        await services.store.version("__health__")
    except Exception:
        return error_response(503, "the thread store is unavailable", code="store_unavailable")
    if principal_of(request) is None:
        return JSONResponse({"status": "ok"})
    return JSONResponse(
        {"status": "ok", **checks, "activeRuns": len(services.runs.active), "worker": services.runs.worker_id}
    )


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
        },
    )
    return JSONResponse(described.model_dump(mode="json", by_alias=True, exclude_none=True))


def metrics_page(request: Request) -> Response:
    """The Prometheus metrics of every worker of this server (a thread: reading them is file I/O)."""
    return Response(metrics.render(), media_type=metrics.CONTENT_TYPE)
