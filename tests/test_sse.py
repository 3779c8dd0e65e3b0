"""SSE responses (``sse_starlette.EventSourceResponse`` via ``ragstream.routes.sse``) on a real uvicorn
server: frames in order with ``\n`` separators, keep-alive comments, clients leaving."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ragstream.routes.sse import sse_response
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
    # no grace for a reconnect: the replays below would otherwise be one and keep the run
    scenario_config.disconnect_grace_seconds = 0
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


async def test_a_reconnect_within_the_grace_keeps_the_run_and_then_it_is_cancelled(
    scenario_config: Any,
) -> None:
    """With the cancel policy a run outlives its client by ``disconnect_grace_seconds``: a client
    that reconnects within it keeps the run (a reloaded page); once nobody has been back for that
    long the run is cancelled and the thread stays as it was."""
    scenario_config.run_timeout = 3600
    scenario_config.disconnect_grace_seconds = 1.0
    async with serve(scenario_app(scenario_config)) as url, httpx.AsyncClient(base_url=url) as client:
        saved = await client.post("/agui", json=run_body("back", "r1"))
        assert parse_sse(saved.text)[-1][1]["type"] == "RUN_FINISHED"
        before = (await client.get("/threads/back")).json()

        async def leave_after(path: str, method: str, seconds: float, **kwargs: Any) -> list[str]:
            seen: list[str] = []
            async with client.stream(method, path, **kwargs) as response:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(seconds):
                        async for chunk in response.aiter_text():
                            seen.append(chunk)
            return seen

        await leave_after("/agui", "POST", 0.3, json=run_body("back", "r2", "hang"))
        # back within the grace, and staying twice as long as it: the run is still there
        again = "".join(await leave_after("/threads/back/runs/r2/events", "GET", 2.0))
        assert "RUN_STARTED" in again and "RUN_FINISHED" not in again
        assert (await client.get("/threads/back")).json()["activeRunId"] == "r2"
        # gone for good (watched without reconnecting): cancelled once the grace has passed
        async with asyncio.timeout(HANG_GUARD):
            while (await client.get("/threads/back")).json()["activeRunId"] is not None:
                await asyncio.sleep(0.1)
        replay = [e for _, e in parse_sse((await client.get("/threads/back/runs/r2/events")).text)]
        assert replay[-1]["type"] == "RUN_FINISHED" and replay[-1]["outcome"]["type"] == "cancelled"
        after = (await client.get("/threads/back")).json()
        assert after["messages"] == before["messages"] and after["state"] == before["state"]


async def test_a_new_threads_first_run_has_a_view_to_follow(scenario_config: Any) -> None:
    """A page reloaded during a new chat's first answer finds the run to follow: while it streams,
    ``GET /threads/{id}`` shows its owner the thread unsaved (nothing kept yet) with the active
    run, and to anyone else nothing; after the run the thread is saved, or does not exist if the
    run was stopped."""
    scenario_config.run_timeout = 3600
    scenario_config.tokens = {name: SecretStr(f"{name}-token") for name in ("alice", "bob")}
    alice = {"Authorization": "Bearer alice-token"}
    bob = {"Authorization": "Bearer bob-token"}
    async with serve(scenario_app(scenario_config)) as url, httpx.AsyncClient(base_url=url) as client:
        for thread, question, stop in (("kept", "slow answer please", False), ("dropped", "hang", True)):
            body = run_body(thread, "r1", question)
            async with client.stream("POST", "/agui", json=body, headers=alice) as response:
                text, chunks = "", response.aiter_text()
                async for chunk in chunks:
                    text += chunk
                    if "RUN_STARTED" in text:
                        break
                view = (await client.get(f"/threads/{thread}", headers=alice)).json()
                assert view["saved"] is False and view["activeRunId"] == "r1"
                assert view["messages"] == [] and view["branches"] == {} and view["interrupts"] == []
                assert (await client.get(f"/threads/{thread}", headers=bob)).status_code == 404
                assert (await client.get(f"/threads/{thread}")).status_code == 401
                assert thread not in [
                    t["threadId"] for t in (await client.get("/threads", headers=alice)).json()["threads"]
                ]
                if stop:
                    stopped = await client.post(f"/threads/{thread}/runs/r1/stop", headers=alice)
                    assert stopped.status_code == 202 and stopped.json()["stopping"] is True
                async for chunk in chunks:
                    text += chunk
            assert parse_sse(text)[-1][1]["type"] == "RUN_FINISHED"
            after = await client.get(f"/threads/{thread}", headers=alice)
            if stop:
                assert after.status_code == 404  # a stopped first run keeps nothing
            else:
                saved = after.json()
                assert saved["saved"] is True and saved["activeRunId"] is None
                assert [m["role"] for m in saved["messages"]] == ["user", "assistant"]


async def test_a_client_that_stops_reading_after_the_last_batch_is_cut_off_by_the_send_timeout(
    monkeypatch: Any,
) -> None:
    """A reader that stops reading must not hold its response, and the batch it did not read, forever.

    sse-starlette bounded every write by the send timeout but the end of the body: a reconnect
    replaying a finished run (one large batch, taken whole into the transport's buffer) whose client
    then stopped reading, socket open, held the response and that buffer until the client closed it.
    The client here never reads; the response must end by itself.
    """
    import socket

    import ragstream.routes.sse

    monkeypatch.setattr(ragstream.routes.sse, "SEND_TIMEOUT_SECONDS", 0.5)
    ended = asyncio.Event()
    replay = [
        (i + 1, b'{"text": "%s"}' % (b"x" * 2000)) for i in range(4000)
    ]  # 8 MB, more than any socket buffer

    async def batches() -> AsyncIterator[list[tuple[int, bytes]]]:
        yield replay

    inner = stream_app(batches(), keepalive=5)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        try:
            await inner(scope, receive, send)
        finally:
            if scope["type"] == "http":
                ended.set()

    async with serve(app) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.socket() as reader:
            reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            reader.connect((host, int(port)))
            reader.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
            try:  # the reader never reads, and keeps its socket open
                await asyncio.wait_for(ended.wait(), HANG_GUARD)
            except TimeoutError:
                raise AssertionError("the response of a client that stopped reading never ended") from None
