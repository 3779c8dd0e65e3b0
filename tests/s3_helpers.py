"""A real S3-compatible server for the object-storage tests: moto's server mode, and a proxy that cuts it.

``MotoServer`` runs ``python -m moto.server`` on a free loopback port (moto keeps everything in
memory, so stopping it loses the data: an outage is played by ``StoreProxy`` instead, a TCP
forwarder in front of it that can refuse connections and come back, like a network partition).

A process reaches a knowledge base on it with ``S3Location.env`` (the standard AWS variables plus
``RAGSTREAM_KB_URI``), or in-process with ``S3Location.storage_options``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field

import boto3

from tests.servers import free_port

__all__ = ["REGION", "MotoServer", "S3Location", "StoreProxy", "new_location"]

REGION = "us-east-1"
ACCESS_KEY = "ragstream-test"
SECRET_KEY = "ragstream-test-secret"
_WRITES = (b"PUT ", b"POST ", b"DELETE ")


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class MotoServer:
    """``moto.server`` in a subprocess on 127.0.0.1 (all of S3 in memory)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60) -> MotoServer:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "MOTO_ALLOW_NONEXISTENT_REGION": "true"},
        )
        deadline = time.monotonic() + timeout
        while not _answers(self.port):
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.stop()
                raise RuntimeError(f"moto server did not start on port {self.port}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)

    def create_bucket(self, name: str) -> None:
        client = boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )
        client.create_bucket(Bucket=name)


@dataclass
class S3Location:
    """A knowledge base location on an S3 endpoint, and how a process is configured to reach it."""

    uri: str
    endpoint: str

    @property
    def aws_env(self) -> dict[str, str]:
        """The standard AWS variables for this endpoint (plain http, so ``AWS_ALLOW_HTTP``)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
        }

    @property
    def env(self) -> dict[str, str]:
        """Everything a ``ragstream`` process needs for this knowledge base."""
        return {**self.aws_env, "RAGSTREAM_KB_URI": self.uri}

    @property
    def storage_options(self) -> dict[str, str]:
        """The same settings as LanceDB storage options (they override the process's AWS_* variables)."""
        return {
            "aws_endpoint": self.endpoint,
            "aws_access_key_id": ACCESS_KEY,
            "aws_secret_access_key": SECRET_KEY,
            "aws_region": REGION,
            "allow_http": "true",
        }

    def via(self, endpoint: str) -> S3Location:
        """The same bucket and prefix reached through another endpoint (a proxy)."""
        return S3Location(self.uri, endpoint)


def new_location(server: MotoServer) -> S3Location:
    """A fresh bucket on ``server`` and a knowledge base prefix in it."""
    bucket = f"ragstream-{uuid.uuid4().hex[:12]}"
    server.create_bucket(bucket)
    return S3Location(f"s3://{bucket}/kb", server.url)


@dataclass
class StoreProxy:
    """A TCP forwarder to ``upstream_port`` that can go down (connections refused) and come back.

    ``cut_after_writes(n)``: forward ``n`` more write requests (PUT, POST, DELETE), then go down
    on the next one without forwarding it, as a store lost in the middle of an ingest.
    """

    upstream_port: int
    port: int = field(default_factory=free_port)
    writes: int = 0
    _limit: int | None = None
    _server: asyncio.Server | None = None
    _streams: set[asyncio.StreamWriter] = field(default_factory=set)
    _loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> StoreProxy:
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.restore()
        return self

    def close(self) -> None:
        self.cut()
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._loop.close()

    def _call(self, coro: object) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)  # type: ignore[arg-type]

    def restore(self) -> None:
        """Accept and forward connections again."""
        self._limit = None
        self._call(self._listen())

    def cut(self) -> None:
        """Refuse new connections and drop the open ones."""
        self._call(self._down())

    def cut_after_writes(self, count: int) -> None:
        self._limit = self.writes + count

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    async def _down(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for stream in list(self._streams):
            stream.transport.abort()
        self._streams.clear()

    async def _accept(self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter) -> None:
        if self._server is None:
            client_out.transport.abort()
            return
        try:
            upstream_in, upstream_out = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            client_out.transport.abort()
            return
        self._streams.update((client_out, upstream_out))
        await asyncio.gather(
            self._pump(client_in, upstream_out, count=True),
            self._pump(upstream_in, client_out, count=False),
            return_exceptions=True,
        )

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, *, count: bool) -> None:
        try:
            while data := await source.read(65536):
                if count and data.startswith(_WRITES):
                    if self._limit is not None and self.writes >= self._limit:
                        await self._down()
                        return
                    self.writes += 1
                sink.write(data)
                await sink.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            with contextlib.suppress(Exception):
                sink.transport.abort()
            self._streams.discard(sink)
