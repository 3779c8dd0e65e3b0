"""``PostgresThreadStore``: thread records in PostgreSQL, the durable record shared by every host.

The driver is asyncpg with its own pool, chosen over psycopg 3 for two properties this store
relies on: every call takes a timeout (connect, pool checkout and each query), so nothing waits
on an unreachable server for longer than ``timeout``; and a pooled connection that the server
closed (a restart, an idle-connection reaper) is noticed by the event loop and replaced at the
next checkout, so the pool recovers after a restart without a ping before every query.

A thread is one row of ``ragstream_threads``; ``state`` and ``extras`` are the exact orjson bytes
(``bytea``: no re-parsing on write, and JSON ``jsonb`` would refuse, such as ``\\u0000``, is
kept). A save is a single ``INSERT ... ON CONFLICT DO NOTHING`` (a new thread) or ``UPDATE ...
WHERE version = $n`` (an existing one): it writes only when the stored version is still the one the
record was read at, so two hosts can never overwrite each other's changes
(``VersionConflictError``). ``updated_at`` is the database's clock, one clock for every host.

The schema is versioned in ``ragstream_schema``. ``open`` (called at start, and again on first use
while it has not succeeded) creates or migrates it under an advisory lock, so workers starting
together do not race: ``migrations[n]`` takes a database from version ``n`` to ``n + 1``. A
database whose schema is newer than this code is refused with ``SchemaVersionError`` and left
untouched. Connection failures and timeouts become ``StoreError``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlsplit

import orjson

from ..extras import extra_imports
from .store import (
    ListPosition,
    SchemaVersionError,
    StoreError,
    StoreUnusable,
    ThreadInfo,
    ThreadRecord,
    ThreadStore,
    VersionConflictError,
    check_schema,
    listing_start,
)

with extra_imports("postgres"):
    import asyncpg

__all__ = ["PostgresThreadStore", "SchemaVersionError"]

T = TypeVar("T")

#: Serialises schema changes across processes (``pg_advisory_xact_lock``); any fixed 64-bit number.
_SCHEMA_LOCK = 0x7261_6773_7472_6D31  # "ragstrm1"

_MIGRATIONS: tuple[str, ...] = (
    # 0 -> 1: threads, listed by owner newest first
    """
    CREATE TABLE ragstream_threads (
        thread_id text PRIMARY KEY,
        owner text,
        title text,
        version bigint NOT NULL,
        updated_at double precision NOT NULL,
        state bytea NOT NULL,
        extras bytea NOT NULL
    );
    CREATE INDEX ragstream_threads_by_owner ON ragstream_threads (owner, updated_at DESC);
    """,
)

_NOW = "extract(epoch from clock_timestamp())::double precision"

_INSERT = f"""
INSERT INTO ragstream_threads (thread_id, owner, title, version, updated_at, state, extras)
VALUES ($1, $2, $3, 1, {_NOW}, $4, $5)
ON CONFLICT (thread_id) DO NOTHING
RETURNING updated_at
"""

_UPDATE = f"""
UPDATE ragstream_threads
SET owner = $2, title = $3, version = version + 1, updated_at = {_NOW}, state = $4, extras = $5
WHERE thread_id = $1 AND version = $6
RETURNING updated_at
"""

_LOAD = "SELECT owner, title, version, updated_at, state, extras FROM ragstream_threads WHERE thread_id = $1"
_VERSION = "SELECT version FROM ragstream_threads WHERE thread_id = $1"
_DELETE = "DELETE FROM ragstream_threads WHERE thread_id = $1"
_LIST_COLUMNS = "SELECT thread_id, owner, title, version, updated_at FROM ragstream_threads"
_PAGE = "(updated_at, thread_id) < ($2, $3) ORDER BY updated_at DESC, thread_id DESC LIMIT $4"
_LIST_OWNED = f"{_LIST_COLUMNS} WHERE owner = $1 AND {_PAGE}"
# $1 (the owner, NULL here) stays in the query so that both take the same arguments
_LIST_UNOWNED = f"{_LIST_COLUMNS} WHERE owner IS NULL AND $1::text IS NULL AND {_PAGE}"

#: What a lost connection, a refused connection, a timeout or a server error looks like.
_FAILURES = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)


class PostgresThreadStore(ThreadStore):
    """Threads in PostgreSQL; ``shared``: caches in front of it revalidate before every transaction.

    ``url`` is a libpq URL (``postgresql://user@host:5432/db``). ``timeout`` bounds connecting,
    waiting for a pooled connection and every statement; ``max_connections`` bounds the pool of
    this process (connections open on demand and close after ``idle_seconds`` unused).
    """

    shared = True

    #: ``migrations[n]`` takes the schema from version ``n`` to ``n + 1``; the last is current. All
    #: pending steps run in one transaction at start, each within ``timeout``.
    migrations: ClassVar[tuple[str, ...]] = _MIGRATIONS

    def __init__(
        self, url: str, *, timeout: float = 5.0, max_connections: int = 10, idle_seconds: float = 300.0
    ) -> None:
        self.url = url
        self.timeout = timeout
        self.max_connections = max_connections
        self.idle_seconds = idle_seconds
        self._pool: asyncpg.Pool | None = None
        self._opened = False
        self._opening = asyncio.Lock()

    @property
    def schema_version(self) -> int:
        """The schema version this code writes."""
        return len(self.migrations)

    async def open(self) -> None:
        """Connect and create or migrate the schema; ``SchemaVersionError`` when it is newer."""
        async with self._opening:
            if self._opened:
                return
            if self._pool is None:
                pool = asyncpg.create_pool(
                    self.url,
                    min_size=0,
                    max_size=self.max_connections,
                    max_inactive_connection_lifetime=self.idle_seconds,
                    timeout=self.timeout,
                    command_timeout=self.timeout,
                )
                self._pool = await self._guard(pool)  # with min_size=0 this connects nothing yet
            await self._guard(self._with_connection(self._migrate))
            self._opened = True

    async def _migrate(self, conn: asyncpg.Connection) -> None:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _SCHEMA_LOCK)
            await conn.execute("CREATE TABLE IF NOT EXISTS ragstream_schema (version integer NOT NULL)")
            found = await conn.fetchval("SELECT max(version) FROM ragstream_schema")
            current = found or 0
            check_schema(current, self.schema_version, f"the PostgreSQL database {_where(self.url)}")
            for step in range(current, self.schema_version):
                await conn.execute(self.migrations[step])
            if found is None:
                await conn.execute("INSERT INTO ragstream_schema (version) VALUES ($1)", self.schema_version)
            elif current != self.schema_version:
                await conn.execute("UPDATE ragstream_schema SET version = $1", self.schema_version)

    async def _with_connection(self, fn: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        assert self._pool is not None
        async with self._pool.acquire(timeout=self.timeout) as conn:
            return await fn(conn)

    async def _guard(self, operation: Awaitable[T]) -> T:
        try:
            async with asyncio.timeout(self.timeout * 3):  # a backstop over the driver's own timeouts
                return await operation
        except StoreError:
            raise
        except asyncpg.InvalidCatalogNameError as exc:  # waiting will not create it
            raise StoreUnusable(
                f"the PostgreSQL database {_where(self.url)} does not exist ({exc}): create it, or fix "
                "RAGSTREAM_DATABASE_URL"
            ) from exc
        except _FAILURES as exc:
            raise StoreError(f"PostgreSQL thread store unavailable: {_describe(exc)}") from exc

    async def _call(self, fn: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        if not self._opened:
            await self.open()
        return await self._guard(self._with_connection(fn))

    async def load(self, thread_id: str) -> ThreadRecord | None:
        row = await self._call(lambda conn: conn.fetchrow(_LOAD, thread_id))
        if row is None:
            return None
        owner, title, version, updated, state, extras = row
        return ThreadRecord(
            thread_id, owner, title, version, orjson.loads(state), orjson.loads(extras), updated
        )

    async def save(self, record: ThreadRecord) -> ThreadRecord:
        state, extras = orjson.dumps(record.state), orjson.dumps(record.extras)
        if record.version == 0:
            args: tuple[Any, ...] = (_INSERT, record.thread_id, record.owner, record.title, state, extras)
        else:
            args = (_UPDATE, record.thread_id, record.owner, record.title, state, extras, record.version)
        updated = await self._call(lambda conn: conn.fetchval(*args))
        if updated is None:
            raise VersionConflictError(f"thread {record.thread_id!r} was changed by another writer")
        return ThreadRecord(
            record.thread_id,
            record.owner,
            record.title,
            record.version + 1,
            record.state,
            record.extras,
            updated,
        )

    async def version(self, thread_id: str) -> int | None:
        value = await self._call(lambda conn: conn.fetchval(_VERSION, thread_id))
        return int(value) if value is not None else None

    async def delete(self, thread_id: str) -> bool:
        status = await self._call(lambda conn: conn.execute(_DELETE, thread_id))
        return bool(status != "DELETE 0")

    async def list_threads(
        self, owner: str | None, *, limit: int = 100, after: ListPosition | None = None
    ) -> list[ThreadInfo]:
        updated, thread = listing_start(after)
        query = _LIST_OWNED if owner is not None else _LIST_UNOWNED
        rows = await self._call(lambda conn: conn.fetch(query, owner, updated, thread, limit))
        return [ThreadInfo(*row) for row in rows]

    async def close(self) -> None:
        pool, self._pool, self._opened = self._pool, None, False
        if pool is None:
            return
        try:
            await asyncio.wait_for(pool.close(), self.timeout)
        except (TimeoutError, *_FAILURES):
            pool.terminate()


def _where(url: str) -> str:
    """``url`` without its password, for messages."""
    parts = urlsplit(url)
    host = parts.hostname or "localhost"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.path.lstrip('/') or '(default)'!r} on {host}{port}"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__
