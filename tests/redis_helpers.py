"""Real Redis and real worker processes for the scale-out tests."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.servers import free_port

ROOT = Path(__file__).resolve().parent.parent


def redis_running(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@contextmanager
def private_redis(port: int | None = None) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """A redis-server of our own (it can be killed and restarted), on a free or given port."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
    port = port or free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while not redis_running(port):
        if time.monotonic() > deadline or process.poll() is not None:
            process.kill()
            raise RuntimeError(f"redis-server did not start on port {port}")
        time.sleep(0.05)
    try:
        yield port, process
    finally:
        process.kill()
        process.wait(10)


class Worker:
    """One server process (tests/worker.py) on its own loopback port."""

    def __init__(self, env: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.worker", str(self.port)],
            cwd=ROOT,
            env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    async def ready(self, timeout: float = 60) -> Worker:
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient() as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"worker exited: {self.process.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
                try:
                    if (await client.get(f"{self.url}/capabilities", timeout=1)).status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)
        raise TimeoutError(f"worker on port {self.port} did not start")

    def kill(self) -> None:
        """SIGKILL: no cleanup at all, as when a host dies."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def worker_env(config: Any, redis_url: str, prefix: str, **extra: str) -> dict[str, str]:
    return {
        "RAGSTREAM_DATA_DIR": str(config.data_dir),
        "RAGSTREAM_REDIS_URL": redis_url,
        "RAGSTREAM_REDIS_PREFIX": prefix,
        "RAGSTREAM_TOOL_DIRS": "[]",
        **extra,
    }
