"""How a streamed run shares the event loop (``ragstream.agui._upstream.install_fast_stream_locks``), through the real server.

pydantic-ai's per-event stream locks no longer yield to the loop when uncontended, so the checks
here are the ones that change could break: each event still passes through the loop exactly where
pydantic-ai hands it from the agent's task to the consumer (no more, no fewer turns), a stream that
never waits for anything (an unpaced model) does not starve other runs, and a stop still reaches
it mid-stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

from rag_tools import ChatDeps
from ragstream.agui._upstream import install_fast_stream_locks
from tests.protocol import last_user_text, parse_sse, run_body
from tests.servers import serve


async def _words(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    """As many words as the prompt says, as fast as the consumer takes them (never awaits)."""
    for i in range(int(last_user_text(messages))):
        yield f"w{i} "


def _agent() -> Agent[ChatDeps, Any]:
    return Agent(
        FunctionModel(stream_function=_words, model_name="words"),
        deps_type=ChatDeps,
        output_type=[str, DeferredToolRequests],
    )


async def _loop_turns_per_event(tokens: int) -> float:
    stop = asyncio.Event()
    turns = 0

    async def ticker() -> None:
        nonlocal turns
        while not stop.is_set():
            turns += 1
            await asyncio.sleep(0)

    agent = Agent(FunctionModel(stream_function=_words))
    task = asyncio.create_task(ticker())
    events = 0
    async with agent.run_stream_events(str(tokens)) as stream:
        async for _ in stream:
            events += 1
    stop.set()
    await task
    return turns / events


async def test_each_streamed_event_passes_through_the_loop_once() -> None:
    install_fast_stream_locks()
    # the hand-off from the agent's task to the consumer: one send, one receive
    assert 1.9 <= await _loop_turns_per_event(2000) <= 2.1


async def test_an_unpaced_stream_neither_starves_other_runs_nor_ignores_a_stop(scenario_config: Any) -> None:
    from ragstream.app import create_app

    scenario_config.tool_dirs = []
    app = create_app(scenario_config, agent=_agent(), fast_stream_locks=True)
    long_tokens = 200_000
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        long_events: list[dict[str, Any]] = []
        streaming = asyncio.Event()

        async def long_run() -> None:
            body = run_body("long", "long-1", str(long_tokens))
            async with client.stream("POST", "/agui", json=body) as response:
                assert response.status_code == 200
                text = ""
                async for chunk in response.aiter_text():
                    text += chunk
                    if "TEXT_MESSAGE_CONTENT" in chunk:
                        streaming.set()
            long_events.extend(e for _, e in parse_sse(text))

        task = asyncio.create_task(long_run())
        await asyncio.wait_for(streaming.wait(), 30)

        short = await client.post("/agui", json=run_body("short", "short-1", "5"))
        short_events = [e for _, e in parse_sse(short.text)]
        assert short_events[-1]["type"] == "RUN_FINISHED"
        assert not task.done(), "the short run had to wait for the unpaced one to finish"

        stopped = await client.post("/threads/long/runs/long-1/stop")
        assert stopped.status_code == 202, stopped.text
        await asyncio.wait_for(task, 30)

    assert long_events[-1]["type"] == "RUN_FINISHED"
    assert long_events[-1]["outcome"]["type"] == "cancelled"
    tokens = sum(e["type"] == "TEXT_MESSAGE_CONTENT" for e in long_events)
    assert 0 < tokens < long_tokens
