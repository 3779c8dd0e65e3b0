"""The servers ``bench/stream.py`` compares, each run as its own uvicorn process.

    python -m bench.stream_servers {ragstream|bare|bare-sse|floor} PORT DATA_DIR

All of them stream what the same ``FunctionModel`` produces for a prompt ``"<tokens> <pace_ms>"``:
one state-changing tool call, then ``tokens`` text tokens, ``pace_ms`` apart (0: as fast as
possible).

- ``ragstream``: ``ragstream.app.create_app`` (state tracking, persistence, event log, SSE ids);
- ``bare``: pydantic-ai's ``AGUIAdapter.dispatch_request`` in a plain Starlette route, same agent
  and deps type, no persistence;
- ``bare-sse``: the bare adapter's events framed and sent as ragstream sends them, through
  ``ragstream.routes.sse.sse_response`` (sse-starlette, the transport the project requires): what
  that transport costs on its own, so the two gaps can be told apart;
- ``floor``: the same number of pre-encoded SSE frames from a Starlette route, same uvicorn
  settings: the transport's own cost.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import uvicorn
from pydantic import Field
from pydantic_ai import Agent, DeferredToolRequests, RunContext
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.toolsets import FunctionToolset
from pydantic_ai.ui.ag_ui import AGUIAdapter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from rag_tools import AgentDeps, ChatDeps, RagConfig, ToolContext, build_toolkit, emit_state_update
from rag_tools.kb import KnowledgeBase
from rag_tools.state import StateModel

__all__ = ["bench_agent", "parse_prompt"]


class Notes(StateModel):
    client_fields: ClassVar[frozenset[str]] = frozenset()
    notes: list[str] = Field(default_factory=list)


def parse_prompt(text: str) -> tuple[int, float]:
    tokens, pace = text.split()[:2]
    return int(tokens), float(pace) / 1000


async def _stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    last = messages[-1]
    if isinstance(last, ModelRequest) and not any(isinstance(p, ToolReturnPart) for p in last.parts):
        yield {0: DeltaToolCall(name="note", json_args=json.dumps({"text": "benchmark"}))}
        return
    prompt = next(
        p.content
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, UserPromptPart)
    )
    tokens, pace = parse_prompt(str(prompt))
    loop = asyncio.get_running_loop()
    start = loop.time()
    for i in range(tokens):
        if pace:  # on a fixed schedule: lateness is the server's, not accumulated sleep drift
            await asyncio.sleep(max(0.0, start + (i + 1) * pace - loop.time()))
        yield f"word{i} "


def _notes_toolset() -> FunctionToolset[Any]:
    toolset: FunctionToolset[Any] = FunctionToolset()

    @toolset.tool
    async def note(ctx: RunContext[AgentDeps], text: str) -> str:
        """Record a note (changes the thread state)."""
        notes = ctx.deps.tool_context.get_or_create("notes", Notes)
        notes.notes = [*notes.notes, text]
        ctx.deps.tool_context.mark_changed("notes")
        await emit_state_update(ctx)
        return "noted"

    return toolset


def bench_agent(deps_type: type[Any]) -> Agent[Any, Any]:
    return Agent(
        FunctionModel(stream_function=_stream, model_name="bench"),
        deps_type=deps_type,
        output_type=[str, DeferredToolRequests],
        toolsets=[_notes_toolset()],
    )


def ragstream_app(data_dir: Path) -> Starlette:
    from ragstream.app import create_app
    from ragstream.config import AppConfig

    config = AppConfig(data_dir=data_dir, tool_dirs=[], keepalive_seconds=15)  # RAGSTREAM_* env applies too
    toolkit = build_toolkit(config, [], namespaces={"notes": Notes})
    return create_app(
        config,
        agent=bench_agent(ChatDeps),
        toolkit=toolkit,
        freeze_gc=True,
        fast_stream_locks=True,
        handoff_drain_fix=True,
    )  # as served


def bare_app(data_dir: Path) -> Starlette:
    kb = KnowledgeBase(RagConfig(data_dir=data_dir).resolved_kb_uri)
    agent = bench_agent(AgentDeps)

    async def run(request: Request) -> Response:
        deps = AgentDeps(client=kb, tool_context=ToolContext())
        return await AGUIAdapter.dispatch_request(request, agent=agent, deps=deps)

    return Starlette(routes=[Route("/agui", run, methods=["POST"])])


def bare_sse_app(data_dir: Path) -> Starlette:
    from ragstream.routes.sse import sse_response

    kb = KnowledgeBase(RagConfig(data_dir=data_dir).resolved_kb_uri)
    agent = bench_agent(AgentDeps)

    async def run(request: Request) -> Response:
        adapter = await AGUIAdapter.from_request(request, agent=agent)
        events = adapter.run_stream(deps=AgentDeps(client=kb, tool_context=ToolContext()))

        async def batches() -> AsyncIterator[list[tuple[int, bytes]]]:
            seq = 0
            async for event in events:
                seq += 1
                yield [(seq, event.model_dump_json(by_alias=True, exclude_none=True).encode())]

        return sse_response(batches(), keepalive=15)

    return Starlette(routes=[Route("/agui", run, methods=["POST"])])


def floor_app() -> Starlette:
    def frames(tokens: int) -> list[bytes]:
        message = b'"messageId":"5f0e6b2c-1d5d-4f43-9f4e-3a2b1c0d9e8f"'
        out = [b'data: {"type":"RUN_STARTED","threadId":"t","runId":"r"}\n\n']
        out.append(b'data: {"type":"TEXT_MESSAGE_START",' + message + b',"role":"assistant"}\n\n')
        out += [
            b'data: {"type":"TEXT_MESSAGE_CONTENT","timestamp":1795310000000,'
            + message
            + b',"delta":"word%d "}\n\n' % i
            for i in range(tokens)
        ]
        out.append(b'data: {"type":"TEXT_MESSAGE_END",' + message + b"}\n\n")
        out.append(b'data: {"type":"RUN_FINISHED","threadId":"t","runId":"r"}\n\n')
        return out

    async def run(request: Request) -> Response:
        body = json.loads(await request.body())
        tokens, pace = parse_prompt(body["messages"][-1]["content"])
        prepared = frames(tokens)

        async def stream() -> AsyncIterator[bytes]:
            loop = asyncio.get_running_loop()
            start = loop.time()
            for i, frame in enumerate(prepared):
                if pace and 2 <= i < len(prepared) - 2:
                    await asyncio.sleep(max(0.0, start + (i - 1) * pace - loop.time()))
                yield frame

        return StreamingResponse(stream(), media_type="text/event-stream")

    return Starlette(routes=[Route("/agui", run, methods=["POST"])])


if __name__ == "__main__":
    kind, port, data = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    apps = {
        "ragstream": lambda: ragstream_app(data),
        "bare": lambda: bare_app(data),
        "bare-sse": lambda: bare_sse_app(data),
        "floor": floor_app,
    }
    uvicorn.run(apps[kind](), host="127.0.0.1", port=port, log_level="warning", access_log=False)
