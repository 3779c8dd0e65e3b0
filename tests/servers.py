"""Run ASGI apps on a real uvicorn server on 127.0.0.1 for tests."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn

ROOT = Path(__file__).resolve().parent.parent
RAGSTREAM = [sys.executable, "-m", "ragstream.cli"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def serve(app: Any, port: int | None = None, **config: Any) -> AsyncIterator[str]:
    """Serve ``app`` in this event loop on ``port`` (default: a free loopback port); yields the base
    URL. A port again: a server that restarts where its clients know it."""
    async with serving(app, port, **config) as (url, _):
        yield url


@asynccontextmanager
async def serving(
    app: Any, port: int | None = None, **config: Any
) -> AsyncIterator[tuple[str, uvicorn.Server]]:
    """``serve``, yielding the uvicorn server too (``server.should_exit = True`` is what its signal
    handler does on SIGTERM)."""
    port = port or free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", **config)
    )
    task = asyncio.create_task(server.serve())
    for _ in range(500):
        if server.started:
            break
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}", server
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)


async def wait_ready(http: httpx.AsyncClient, url: str = "", *, timeout: float = 60) -> httpx.Response:
    """Poll ``/ready`` until it answers 200 (dependencies that come back reconnect with backoff);
    the last answer, whatever it was, after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        response = await http.get(f"{url}/ready")
        if response.status_code == 200 or time.monotonic() > deadline:
            return response
        await asyncio.sleep(0.2)


@asynccontextmanager
async def served(
    env: dict[str, str],
    data: Path,
    *,
    ready: int = 200,
    args: Sequence[str] = (),
    command: Sequence[str] = ("serve",),
    probe: str = "GET /ready",
) -> AsyncIterator[str]:
    """``ragstream serve`` (or another ``command``) as its own process (a host of its own) on a free
    port, with ``env`` on top of this process's environment and ``args`` after its own; yields its
    base URL once ``probe`` (``METHOD /path``) answers ``ready`` (a status)."""
    port = free_port()
    full = {**os.environ, **env, "PYTHONPATH": str(ROOT), "RAGSTREAM_TOOL_DIRS": "[]"}
    data.mkdir(parents=True, exist_ok=True)
    log = data / f"serve-{port}.log"  # a file, not a pipe: a chatty server never blocks on it
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [*RAGSTREAM, *command, "--port", str(port), "--data-dir", str(data), *args],
            env=full,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=sink,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            deadline = time.monotonic() + 180  # a hang guard, generous for a loaded machine
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"{command[0]} exited: {log.read_text(errors='replace')[-2000:]}")
                try:
                    method, _, path = probe.partition(" ")
                    if (await http.request(method, f"{url}{path}")).status_code == ready:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, f"{command[0]} did not become healthy"
                await asyncio.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
