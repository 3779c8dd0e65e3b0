"""The MCP server on the official ``mcp`` SDK: over stdio, and as the streamable HTTP endpoint that
``ragstream.app`` serves at ``/mcp``.

Over HTTP the endpoint is stateless (the SDK's ``stateless_http``): every POST is answered on its
own, so any worker or host answers any request and the caller is decided per request by the app's
sign-in (a session id would otherwise stand for whoever opened it). The SDK's DNS-rebinding check
is on when the server listens on a loopback address, as the SDK does by default.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version

from mcp.server.mcpserver import MCPServer
from starlette.types import Receive, Scope, Send

from rag_tools.kb import KnowledgeBase, KnowledgeBaseUnavailable

from ..auth import Principal
from ..config import AppConfig
from .tools import KnowledgeBaseTools

__all__ = ["INSTRUCTIONS", "MCPEndpoint", "create_mcp_server", "serve_stdio", "served_knowledge_base"]

logger = logging.getLogger("ragstream.server")

INSTRUCTIONS = (
    "ragstream's knowledge base. search finds passages (cite them by document_id and passage_id), "
    "list_documents lists or finds documents, read_document reads a document or one passage, ask "
    "answers a question with numbered citations."
)


def _version() -> str:
    try:
        return version("ragstream")
    except PackageNotFoundError:  # run from a source tree
        return "0"


def create_mcp_server(tools: KnowledgeBaseTools) -> MCPServer:
    """An SDK server named ``ragstream`` carrying ``tools``.

    The SDK's constructor configures the root logger (``logging.basicConfig``) when it has no
    handler yet, which would change the host's own log lines (``RAGSTREAM_LOG_FORMAT=json``); a
    handler held on the root meanwhile makes that a no-op.
    """
    root = logging.getLogger()
    guard = logging.NullHandler()
    root.addHandler(guard)
    try:
        server: MCPServer = MCPServer("ragstream", instructions=INSTRUCTIONS, version=_version())
    finally:
        root.removeHandler(guard)
    tools.register(server)
    return server


class MCPEndpoint:
    """The MCP server as the ASGI app of the route ``/mcp`` (streamable HTTP, stateless).

    Serve it behind the app's sign-in middleware: a tool called without a signed-in principal
    refuses. ``serving(kb)`` runs it (the SDK's session manager) in the app's lifespan.
    """

    def __init__(self, tools: KnowledgeBaseTools, *, host: str) -> None:
        self.tools = tools
        self.server = create_mcp_server(tools)
        self._app = self.server.streamable_http_app(
            streamable_http_path="/mcp", stateless_http=True, host=host
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)

    @asynccontextmanager
    async def serving(self, kb: KnowledgeBase) -> AsyncIterator[None]:
        """Answer requests with ``kb`` (the open knowledge base) until the block ends."""
        self.tools.kb = kb
        try:
            async with self.server.session_manager.run():
                yield
        finally:
            self.tools.kb = None


@asynccontextmanager
async def served_knowledge_base(config: AppConfig) -> AsyncIterator[KnowledgeBase]:
    """The configured knowledge base, opened, for as long as the block serves it. A store that is
    down at start is no reason to stop, as for ``serve``: every call tries again."""
    kb = KnowledgeBase.from_config(config)
    try:
        await kb.open()
    except KnowledgeBaseUnavailable as exc:
        logger.warning("%s; serving anyway, every call tries again", exc)
    try:
        yield kb
    finally:
        kb.close()


async def serve_stdio(config: AppConfig, *, allow_writes: bool, operator: Principal | None) -> None:
    """Serve the knowledge base over stdin and stdout until the client closes them (``ragstream mcp``).

    ``operator`` is the caller: ``None`` for the local operator, or the principal of ``--token``.
    """
    tools = KnowledgeBaseTools(config, allow_writes=allow_writes, operator=operator)
    server = create_mcp_server(tools)
    async with served_knowledge_base(config) as kb:
        tools.kb = kb
        await server.run_stdio_async()
