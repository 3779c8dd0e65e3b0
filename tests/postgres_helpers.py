"""Real PostgreSQL for the tests: the machine's server when it answers, else a private one.

A private server is a fresh cluster (``initdb``) in a temporary directory, started with ``pg_ctl``
from Debian's ``postgresql`` package on a free loopback port; it can be stopped and started again
(the outage tests do). Each test gets a database of its own, dropped afterwards.
"""

from __future__ import annotations

import asyncio
import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import asyncpg

from tests.servers import free_port

T = TypeVar("T")

MACHINE_URL = "postgresql://postgres@127.0.0.1:5432"


def run_async(factory: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to the end on its own loop in a thread (safe from sync fixtures and tests)."""

    async def main() -> T:
        return await factory()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, main()).result()


def postgres_answers(url: str) -> bool:
    """Whether a PostgreSQL server at ``url`` accepts a connection."""

    async def probe() -> None:
        conn = await asyncpg.connect(f"{url}/postgres", timeout=2)
        await conn.close()

    try:
        run_async(probe)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
        return False
    return True


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}")) or [shutil.which(name)]
    if not found[-1]:
        raise RuntimeError(f"{name} is not installed (apt-get install postgresql)")
    return str(found[-1])


class PrivatePostgres:
    """A PostgreSQL cluster of our own in ``directory`` on ``port``: it can be stopped and started."""

    def __init__(self, directory: Path, port: int) -> None:
        self.directory = directory
        self.port = port
        self.url = f"postgresql://postgres@127.0.0.1:{port}"
        # initdb and postgres refuse to run as root: as root, run them as the package's user
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self._as:
            shutil.chown(directory, "postgres")
        self._pg(
            _bin("initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"
        )

    @property
    def data(self) -> Path:
        return self.directory / "data"

    def _pg(self, *command: str) -> None:
        subprocess.run([*self._as, *command], check=True, capture_output=True, timeout=60)

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.directory}"
            " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        log = str(self.directory / "server.log")
        self._pg(_bin("pg_ctl"), "-D", str(self.data), "-l", log, "-o", options, "-w", "-t", "30", "start")

    def stop(self) -> None:
        """A fast shutdown: open connections are closed, as in a restart or an outage."""
        self._pg(_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "-t", "30", "stop")

    def running(self) -> bool:
        return postgres_answers(self.url)


@contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """A fresh private server on a free port, removed afterwards."""
    directory = Path(tempfile.mkdtemp(prefix="ragstream-pg-"))
    try:
        server = PrivatePostgres(directory, free_port())
        server.start()
        try:
            yield server
        finally:
            if server.running():
                subprocess.run(
                    [*server._as, _bin("pg_ctl"), "-D", str(server.data), "-m", "immediate", "stop"],
                    capture_output=True,
                    timeout=60,
                )
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def create_database(server_url: str) -> str:
    """A new empty database on the server; returns its URL."""
    name = f"ragstream_test_{uuid.uuid4().hex[:12]}"

    async def create() -> None:
        conn = await asyncpg.connect(f"{server_url}/postgres", timeout=10)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()

    run_async(create)
    return f"{server_url}/{name}"


def drop_database(url: str) -> None:
    """Drop a database made by ``create_database``, closing whatever still uses it."""
    server_url, name = url.rsplit("/", 1)

    async def drop() -> None:
        conn = await asyncpg.connect(f"{server_url}/postgres", timeout=10)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()

    run_async(drop)
