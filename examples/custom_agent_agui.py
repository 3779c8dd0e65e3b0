"""A minimal AG-UI server: your own pydantic-ai agent with the RAG toolkit, streaming with state sync.

    python examples/custom_agent_agui.py [--port 8010]

This is the pattern to copy into an existing Starlette/FastAPI app. It uses pydantic-ai's own
``AGUIAdapter.dispatch_request``; what the toolkit adds is the state: ``AgentDeps`` is an AG-UI
state handler, so the tools' state changes (citations, searches, QA history) reach the frontend
as STATE_DELTA events, and the document filter the frontend sets comes back as client state.

Kept minimal on purpose: thread contexts live in memory and the browser keeps the message
history. ``ragstream serve`` is this plus what production needs (persistence, one run per
thread, resumable streams, auth, several workers).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import uvicorn
from pydantic_ai import Agent
from pydantic_ai.ui.ag_ui import AGUIAdapter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from rag_tools import (
    AgentDeps,
    KnowledgeBase,
    RagConfig,
    ToolContextCache,
    build_toolkit,
    create_extractive_model,
)

CORPUS = Path(__file__).resolve().parent / "corpus"


def create_app(config: RagConfig) -> Starlette:
    kb = KnowledgeBase.from_config(config)
    toolkit = build_toolkit(config, features=["search", "documents", "qa"])
    agent = Agent(
        config.model or create_extractive_model(kb.embedding_model),  # offline without a model
        deps_type=AgentDeps,
        toolsets=toolkit.toolsets,
        capabilities=toolkit.capabilities,
        instructions=toolkit.prompt,
    )
    contexts = ToolContextCache(prepare=toolkit.prepare)  # in memory; pass a store to persist

    async def run(request: Request) -> Response:
        run_input = AGUIAdapter.build_run_input(await request.body())
        context, _ = await contexts.get_or_create(run_input.thread_id)
        deps = AgentDeps(client=kb, tool_context=context)  # one per request: the adapter writes deps.state
        return await AGUIAdapter.dispatch_request(request, agent=agent, deps=deps)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await kb.open()
        await kb.ingest_paths([CORPUS])  # unchanged files are skipped
        yield
        kb.close()

    return Starlette(routes=[Route("/agui", run, methods=["POST"])], lifespan=lifespan)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, default=8010)
    args = parser.parse_args()
    config = RagConfig(
        data_dir=Path(os.environ.get("RAGSTREAM_DATA_DIR", ".ragstream/data")),
        model=os.environ.get("RAGSTREAM_MODEL") or None,
    )
    uvicorn.run(create_app(config), host="127.0.0.1", port=args.port, log_level="warning")
