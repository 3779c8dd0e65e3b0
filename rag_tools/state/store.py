"""Where thread state lives between runs: one small interface, several backends.

A ``ThreadRecord`` is everything persisted for a thread: its owner, the namespaced state
(``ToolContext.dump_namespaces()``), and ``extras`` that belong to the application (the server
keeps the message history and pending interrupts there). A record is written whole, in one
atomic step, with optimistic concurrency: ``save`` succeeds only if the stored version is still the
one the record was read at, so two writers can never overwrite each other's work.

Backends here: ``MemoryThreadStore`` (tests, one process) and ``SQLiteThreadStore`` (the durable
embedded default). ``rag_tools.state.redis_store`` adds Redis for several workers or hosts, and
``rag_tools.state.postgres_store`` PostgreSQL, the durable record shared by several hosts.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

__all__ = [
    "ListPosition",
    "MemoryThreadStore",
    "SQLiteThreadStore",
    "SchemaVersionError",
    "StoreError",
    "StoreUnusable",
    "ThreadInfo",
    "ThreadRecord",
    "ThreadStore",
    "VersionConflictError",
]


class StoreError(RuntimeError):
    """The store cannot read or write (unreachable, read-only, corrupt)."""


class StoreUnusable(StoreError):
    """The store answers but cannot be used as configured (a database that does not exist, a
    read-only directory, a schema newer than this code): waiting will not help, so ``serve`` stops
    at start with this one line instead of answering 503 until someone looks."""


class SchemaVersionError(StoreUnusable):
    """The store's ragstream schema is newer than this code knows (refused, left untouched)."""


def check_schema(found: int, current: int, where: str) -> None:
    """The upgrade rule of every store: a store stamped with a schema newer than ``current`` (the
    version this code writes) is refused, untouched; an older one is migrated forward on open."""
    if found > current:
        raise SchemaVersionError(
            f"{where} has ragstream schema version {found}, newer than this ragstream writes "
            f"({current}): upgrade ragstream, or point it at another store"
        )


class VersionConflictError(StoreError):
    """Someone else saved the thread since this record was read."""


@dataclass
class ThreadRecord:
    """A thread as stored. ``version`` 0 means it has never been saved."""

    thread_id: str
    owner: str | None = None
    title: str | None = None
    version: int = 0
    state: dict[str, dict[str, Any]] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)
    updated_at: float = 0.0


@dataclass(frozen=True)
class ThreadInfo:
    """A line of a thread listing."""

    thread_id: str
    owner: str | None
    title: str | None
    version: int
    updated_at: float

    @property
    def position(self) -> ListPosition:
        """Where this line sits in a listing: pass it as ``after`` for the lines that follow."""
        return (self.updated_at, self.thread_id)


#: A place in a thread listing, ``(updated_at, thread_id)``; listings run from the greatest down.
ListPosition = tuple[float, str]


def listing_start(after: ListPosition | None) -> ListPosition:
    """Where a listing page begins: just after ``after``, or above every thread for the first page."""
    return after if after is not None else (float("inf"), "")


class ThreadStore(ABC):
    """Persistence of ``ThreadRecord``s with compare-and-set saves."""

    #: True when other processes may write the same threads (caches must revalidate).
    shared: bool = False

    @abstractmethod
    async def load(self, thread_id: str) -> ThreadRecord | None:
        """The stored record, or ``None``."""

    @abstractmethod
    async def save(self, record: ThreadRecord) -> ThreadRecord:
        """Store ``record`` if the stored version is still ``record.version``; returns the new record.

        Raises ``VersionConflictError`` otherwise.
        """

    @abstractmethod
    async def version(self, thread_id: str) -> int | None:
        """The stored version (cheap), or ``None`` when the thread does not exist."""

    @abstractmethod
    async def delete(self, thread_id: str) -> bool:
        """Remove a thread; ``False`` when there was none."""

    @abstractmethod
    async def list_threads(
        self, owner: str | None, *, limit: int = 100, after: ListPosition | None = None
    ) -> list[ThreadInfo]:
        """Threads of ``owner`` (``None``: unowned threads), most recently updated first (ties by
        thread id, descending); with ``after``, those that come after that position (the next page)."""

    async def open(self) -> None:  # noqa: B027 - optional hook
        """Connect and prepare (a database schema, say); stores that need it also do it on first use."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""


def _encode(record: ThreadRecord) -> tuple[bytes, bytes]:
    return orjson.dumps(record.state), orjson.dumps(record.extras)


class MemoryThreadStore(ThreadStore):
    """Records in a dict of encoded bytes: nothing survives the process, nothing is shared by reference."""

    def __init__(self) -> None:
        self._rows: dict[str, tuple[str | None, str | None, int, float, bytes, bytes]] = {}

    async def load(self, thread_id: str) -> ThreadRecord | None:
        row = self._rows.get(thread_id)
        if row is None:
            return None
        owner, title, version, updated, state, extras = row
        return ThreadRecord(
            thread_id, owner, title, version, orjson.loads(state), orjson.loads(extras), updated
        )

    async def save(self, record: ThreadRecord) -> ThreadRecord:
        current = self._rows.get(record.thread_id)
        if (current[2] if current else 0) != record.version:
            raise VersionConflictError(f"thread {record.thread_id!r} was changed by another writer")
        saved = replace(record, version=record.version + 1, updated_at=time.time())
        self._rows[record.thread_id] = (
            saved.owner,
            saved.title,
            saved.version,
            saved.updated_at,
            *_encode(saved),
        )
        return saved

    async def version(self, thread_id: str) -> int | None:
        row = self._rows.get(thread_id)
        return row[2] if row else None

    async def delete(self, thread_id: str) -> bool:
        return self._rows.pop(thread_id, None) is not None

    async def list_threads(
        self, owner: str | None, *, limit: int = 100, after: ListPosition | None = None
    ) -> list[ThreadInfo]:
        rows = [ThreadInfo(tid, r[0], r[1], r[2], r[3]) for tid, r in self._rows.items() if r[0] == owner]
        rows = [info for info in rows if after is None or info.position < after]
        rows.sort(key=lambda info: info.position, reverse=True)
        return rows[:limit]


#: The schema this code writes in a SQLite thread store, stamped as the file's ``user_version``. A file
#: without a stamp (ragstream 0.1.0) has version 1's tables and is stamped on open.
SQLITE_SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS threads (
    thread_id TEXT PRIMARY KEY,
    owner TEXT,
    title TEXT,
    version INTEGER NOT NULL,
    updated_at REAL NOT NULL,
    state BLOB NOT NULL,
    extras BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS threads_by_owner ON threads (owner, updated_at);
"""


class SQLiteThreadStore(ThreadStore):
    """Threads in a SQLite file (WAL mode) in the data directory; survives restarts.

    Several processes on one machine may open the same file: saves are compare-and-set in a
    transaction, so the store is ``shared``. Calls run in a worker thread, except indexed reads that
    WAL mode never blocks and that are cheaper than the hop to a thread: ``version`` (every run
    makes it), and ``load`` of a missing thread or of one under ``inline_load_bytes``.
    """

    shared = True

    inline_load_bytes = 64 * 1024

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._conn: sqlite3.Connection | None = None
        self._lock = asyncio.Lock()

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            conn: sqlite3.Connection | None = None
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(self.path, timeout=10, check_same_thread=False, isolation_level=None)
                (found,) = conn.execute("PRAGMA user_version").fetchone()
                check_schema(found, SQLITE_SCHEMA_VERSION, f"the thread store {self.path}")
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.executescript(_SCHEMA)
                if found < SQLITE_SCHEMA_VERSION:
                    conn.execute(f"PRAGMA user_version = {SQLITE_SCHEMA_VERSION}")
            except SchemaVersionError:
                if conn is not None:
                    conn.close()
                raise
            except (sqlite3.Error, OSError) as exc:
                if conn is not None:  # a half-opened connection holds the file: close it, do not leak it
                    conn.close()
                raise StoreError(f"cannot open the thread store at {self.path}: {exc}") from exc
            self._conn = conn
        return self._conn

    async def open(self) -> None:
        """Open the file and check its schema stamp (``SchemaVersionError`` when it is newer)."""
        await self._run(lambda conn: None, inline=True)

    async def _run(self, fn: Any, *args: Any, inline: bool = False) -> Any:
        async with self._lock:
            try:
                if inline:  # an indexed single-value read: cheaper than the hop to a thread
                    return fn(self._connect(), *args)
                return await asyncio.to_thread(fn, self._connect(), *args)
            except sqlite3.Error as exc:
                raise StoreError(f"thread store error ({self.path}): {exc}") from exc

    async def load(self, thread_id: str) -> ThreadRecord | None:
        size = await self._run(_sqlite_size, thread_id, inline=True)
        if size is None:
            return None
        return await self._run(_sqlite_load, thread_id, inline=size <= self.inline_load_bytes)

    async def save(self, record: ThreadRecord) -> ThreadRecord:
        return await self._run(_sqlite_save, record)

    async def version(self, thread_id: str) -> int | None:
        return await self._run(_sqlite_version, thread_id, inline=True)

    async def delete(self, thread_id: str) -> bool:
        return await self._run(_sqlite_delete, thread_id)

    async def list_threads(
        self, owner: str | None, *, limit: int = 100, after: ListPosition | None = None
    ) -> list[ThreadInfo]:
        return await self._run(_sqlite_list, owner, limit, after)

    async def close(self) -> None:
        async with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _sqlite_load(conn: sqlite3.Connection, thread_id: str) -> ThreadRecord | None:
    row = conn.execute(
        "SELECT owner, title, version, updated_at, state, extras FROM threads WHERE thread_id = ?",
        (thread_id,),
    ).fetchone()
    if row is None:
        return None
    owner, title, version, updated, state, extras = row
    return ThreadRecord(thread_id, owner, title, version, orjson.loads(state), orjson.loads(extras), updated)


def _sqlite_save(conn: sqlite3.Connection, record: ThreadRecord) -> ThreadRecord:
    saved = replace(record, version=record.version + 1, updated_at=time.time())
    state, extras = _encode(saved)
    try:
        conn.execute("BEGIN IMMEDIATE")
        if record.version == 0:
            cursor = conn.execute(
                "INSERT OR IGNORE INTO threads VALUES (?, ?, ?, ?, ?, ?, ?)",
                (saved.thread_id, saved.owner, saved.title, saved.version, saved.updated_at, state, extras),
            )
        else:
            cursor = conn.execute(
                "UPDATE threads SET owner = ?, title = ?, version = ?, updated_at = ?, state = ?, extras = ?"
                " WHERE thread_id = ? AND version = ?",
                (
                    saved.owner,
                    saved.title,
                    saved.version,
                    saved.updated_at,
                    state,
                    extras,
                    saved.thread_id,
                    record.version,
                ),
            )
        if cursor.rowcount != 1:
            raise VersionConflictError(f"thread {record.thread_id!r} was changed by another writer")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return saved


def _sqlite_size(conn: sqlite3.Connection, thread_id: str) -> int | None:
    row = conn.execute(
        "SELECT length(state) + length(extras) FROM threads WHERE thread_id = ?", (thread_id,)
    ).fetchone()
    return row[0] if row else None


def _sqlite_version(conn: sqlite3.Connection, thread_id: str) -> int | None:
    row = conn.execute("SELECT version FROM threads WHERE thread_id = ?", (thread_id,)).fetchone()
    return row[0] if row else None


def _sqlite_delete(conn: sqlite3.Connection, thread_id: str) -> bool:
    return conn.execute("DELETE FROM threads WHERE thread_id = ?", (thread_id,)).rowcount > 0


def _sqlite_list(
    conn: sqlite3.Connection, owner: str | None, limit: int, after: ListPosition | None
) -> list[ThreadInfo]:
    updated, thread = listing_start(after)
    rows = conn.execute(
        "SELECT thread_id, owner, title, version, updated_at FROM threads WHERE owner IS ?"
        " AND (updated_at < ? OR (updated_at = ? AND thread_id < ?))"
        " ORDER BY updated_at DESC, thread_id DESC LIMIT ?",
        (owner, updated, updated, thread, limit),
    ).fetchall()
    return [ThreadInfo(*row) for row in rows]
