"""SSE responses (``sse_starlette.EventSourceResponse`` via ``server.routes.sse``) on a real uvicorn
server: frames in order with ``\n`` separators, keep-alive comments, clients leaving."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from server.routes.sse import sse_response
from tests.conftest import scenario_app
from tests.protocol import parse_sse, run_body
from tests.servers import serve

HANG_GUARD = 10.0  # seconds; only stops a broken test from hanging, the waits end far sooner


def stream_app(batches: AsyncIterator[list[tuple[int, bytes]]], keepalive: float) -> Starlette:
    async def endpoint(request: Request) -> Response:
        await request.body()
        return sse_response(batches, keepalive=keepalive)

    return Starlette(routes=[Route("/", endpoint, methods=["POST"])])


async def test_frames_arrive_in_order_with_keepalives_while_the_stream_is_quiet() -> None:
    async def batches() -> AsyncIterator[list[tuple[int, bytes]]]:
        for i in range(3):
            await asyncio.sleep(0.2)
            yield [(i + 1, b'{"n": %d}' % i)]
        yield [(4, b'{"n": 3}'), (5, b'{"n": 4}')]  # a batch of ready events: one write

    async with serve(stream_app(batches(), keepalive=0.05)) as url, httpx.AsyncClient(base_url=url) as client:
        response = await client.post("/", json={})
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert response.headers["cache-control"] == "no-store"
    assert response.headers["x-accel-buffering"] == "no"
    assert parse_sse(response.text) == [(i + 1, {"n": i}) for i in range(5)]
    assert response.text.startswith(": ping\n\n")  # the stream was quiet before its first frame
    assert "\r" not in response.text  # @ag-ui/client splits frames on "\n\n" only


async def test_a_client_leaving_a_quiet_stream_closes_it_at_once() -> None:
    started, closed = asyncio.Event(), asyncio.Event()

    async def frames() -> AsyncIterator[list[tuple[int, bytes]]]:
        try:
            yield [(1, b"{}")]
            started.set()
            await asyncio.sleep(3600)  # quiet: only the client leaving can end this
            yield [(2, b"{}")]
        finally:
            closed.set()

    async with serve(stream_app(frames(), keepalive=0)) as url, httpx.AsyncClient(base_url=url) as client:
        async with client.stream("POST", "/", json={}) as response:
            async for _ in response.aiter_bytes():
                break
            await asyncio.wait_for(started.wait(), HANG_GUARD)
        await asyncio.wait_for(closed.wait(), HANG_GUARD)


async def test_a_quiet_run_whose_client_left_is_cancelled(scenario_config: Any) -> None:
    scenario_config.run_timeout = 3600
    async with serve(scenario_app(scenario_config)) as url, httpx.AsyncClient(base_url=url) as client:
        async with client.stream("POST", "/agui", json=run_body("left", "r1", "hang")) as response:
            async for chunk in response.aiter_text():
                if "RUN_STARTED" in chunk:
                    break
        # the model is waiting forever; the client is gone, so the "cancel" policy stops the run
        replay: list[dict[str, Any]] = []
        async with asyncio.timeout(HANG_GUARD):
            while not replay or replay[-1]["type"] != "RUN_FINISHED":
                await asyncio.sleep(0.05)
                events = await client.get("/threads/left/runs/r1/events")
                replay = [e for _, e in parse_sse(events.text)]
        assert replay[-1]["outcome"]["type"] == "cancelled"
        retry = await client.post("/agui", json=run_body("left", "r2"))  # the thread is free again
        assert parse_sse(retry.text)[-1][1]["type"] == "RUN_FINISHED"
