"""Jobs without Redis or PostgreSQL: one process, records in the SQLite thread database.

No job library covers this case: SAQ and arq need Redis, procrastinate PostgreSQL (its in-memory
connector is for tests and keeps nothing), and the embedded mode has neither. So this runner is
deliberately small: jobs and their uploads are rows of ``threads.sqlite3`` (the thread store's
database, one file to back up), one task works them in order, and at start every job a previous
process left ``running`` is queued again while it has attempts left, else marked failed (a job a
stopping server puts back itself, its attempt not spent: a deploy is not a crash). It does
what the SAQ backend does for one process, with the same records, so the routes cannot tell them
apart. The owner and the cancel request are columns of the job's row (the listing reads the
owner's rows in creation order); the schedule slots and the sync holds live in memory, since one
process is all there is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from rag_tools.kb import KnowledgeBase
from rag_tools.state import StoreError

from ..runs import MemoryRunLocks
from .base import KEEP_SECONDS, MAX_ATTEMPTS, IngestJobs, JobPage, check_cursor
from .models import WORKER_LOST, IngestFailed, IngestJob, JobContext, run_job

__all__ = ["LocalIngestJobs"]

logger = logging.getLogger("ragstream.jobs")

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS ragstream_ingest_jobs (
    id TEXT PRIMARY KEY, state TEXT NOT NULL, record TEXT NOT NULL, created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS ragstream_uploads (
    job_id TEXT NOT NULL, idx INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (job_id, idx)
);
"""

#: Columns added since the first version of the table, with how existing rows get their value.
_ADDED = {
    "owner": ("TEXT", "json_extract(record, '$.owner')"),
    "cancel": ("INTEGER NOT NULL DEFAULT 0", None),
}

_INDEX = "CREATE INDEX IF NOT EXISTS ragstream_ingest_jobs_owner ON ragstream_ingest_jobs (owner, created_at)"

#: A row's place in the listing, as ``IngestJob.sort_key`` writes it.
_SORT_KEY = "printf('%016d:%s', CAST(created_at * 1000000 AS INTEGER), id)"


class LocalIngestJobs(IngestJobs):
    """Jobs of a single server process, persisted in a SQLite file."""

    def __init__(self, kb: KnowledgeBase, path: str | Path) -> None:
        self.kb = kb
        self.path = Path(path)
        self._schema_ready = False
        self._recovered = False
        self._lock = asyncio.Lock()
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._slots: dict[str, tuple[int, str | None]] = {}
        self.leases = MemoryRunLocks()

    async def _db(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on a connection of its own (nothing stays open between uses); SQLite
        failures (a read-only or missing data directory) become ``StoreError`` (503)."""
        async with self._lock:
            try:
                return await asyncio.to_thread(self._with_connection, fn)
            except sqlite3.Error as exc:
                raise StoreError(f"the job records cannot be read or written: {exc}") from exc

    def _with_connection(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=10, isolation_level=None)
        try:
            if not self._schema_ready:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.executescript(_SCHEMA)
                _add_columns(conn)
                self._schema_ready = True
            return fn(conn)
        finally:
            conn.close()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._work())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _recover_once(self) -> None:
        """Requeue what a previous process left (once; retried on use while the file is unusable)."""
        if not self._recovered:
            for job_id in await self._db(_recover):
                self._queue.put_nowait(job_id)
            self._recovered = True

    async def submit(self, job: IngestJob, uploads: dict[int, bytes]) -> None:
        await self._recover_once()

        def insert(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
                # A process may live for weeks: every submission also ends the retention of the
                # finished jobs past it, as SAQ's ``ttl`` does, not only the next start.
                _expire(conn)
                conn.execute(
                    "INSERT INTO ragstream_ingest_jobs (id, state, record, created_at, owner) VALUES (?, ?, ?, ?, ?)",
                    (job.id, job.state, job.model_dump_json(), job.created_at, job.owner),
                )
                conn.executemany(
                    "INSERT INTO ragstream_uploads (job_id, idx, data) VALUES (?, ?, ?)",
                    [(job.id, i, data) for i, data in uploads.items()],
                )

        await self._db(insert)
        self._queue.put_nowait(job.id)

    async def get(self, job_id: str) -> IngestJob | None:
        await self._recover_once()
        row = await self._db(
            lambda c: c.execute("SELECT record FROM ragstream_ingest_jobs WHERE id = ?", (job_id,)).fetchone()
        )
        return None if row is None else IngestJob.model_validate_json(row[0])

    async def list(self, owner: str, *, limit: int, cursor: str | None = None) -> JobPage:
        await self._recover_once()
        after = check_cursor(cursor)
        rows = await self._db(
            lambda c: c.execute(
                f"SELECT record FROM ragstream_ingest_jobs WHERE owner = ? AND (? IS NULL OR {_SORT_KEY} < ?)"
                " ORDER BY created_at DESC, id DESC LIMIT ?",
                (owner, after, after, limit + 1),
            ).fetchall()
        )
        jobs = [IngestJob.model_validate_json(raw) for (raw,) in rows]
        more = len(jobs) > limit
        return JobPage(jobs[:limit], jobs[limit - 1].sort_key if more else None)

    async def request_cancel(self, job_id: str) -> None:
        """Mark the row; a queued job is cancelled right away (the runner skips it)."""

        def mark(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
                row = conn.execute(
                    "SELECT state, record FROM ragstream_ingest_jobs WHERE id = ?", (job_id,)
                ).fetchone()
                conn.execute("UPDATE ragstream_ingest_jobs SET cancel = 1 WHERE id = ?", (job_id,))
                if row is not None and row[0] == "queued":
                    job = IngestJob.model_validate_json(row[1]).cancelled()
                    conn.execute(
                        "UPDATE ragstream_ingest_jobs SET state = ?, record = ? WHERE id = ?",
                        (job.state, job.model_dump_json(), job_id),
                    )
                    conn.execute("DELETE FROM ragstream_uploads WHERE job_id = ?", (job_id,))

        await self._db(mark)

    async def _cancel_requested(self, job_id: str) -> bool:
        row = await self._db(
            lambda c: c.execute("SELECT cancel FROM ragstream_ingest_jobs WHERE id = ?", (job_id,)).fetchone()
        )
        return bool(row and row[0])

    async def claim_slot(self, name: str, slot: int) -> tuple[bool, str | None]:
        last_slot, last_job = self._slots.get(name, (-1, None))
        if slot <= last_slot:
            return False, last_job
        self._slots[name] = (slot, last_job)
        return True, last_job

    async def record_slot_job(self, name: str, job_id: str) -> None:
        self._slots[name] = (self._slots.get(name, (-1, None))[0], job_id)

    async def ping(self) -> None:
        if self._task is None or self._task.done():
            raise RuntimeError("the ingestion worker is not running")
        await self._db(lambda c: c.execute("SELECT count(*) FROM ragstream_ingest_jobs").fetchone())

    async def _save(self, job: IngestJob) -> None:
        await self._db(
            lambda c: c.execute(
                "UPDATE ragstream_ingest_jobs SET state = ?, record = ? WHERE id = ?",
                (job.state, job.model_dump_json(), job.id),
            )
        )

    async def _read(self, job_id: str, index: int) -> bytes:
        row = await self._db(
            lambda c: c.execute(
                "SELECT data FROM ragstream_uploads WHERE job_id = ? AND idx = ?", (job_id, index)
            ).fetchone()
        )
        if row is None:
            raise IngestFailed("the uploaded file is no longer available")
        return bytes(row[0])

    async def _work(self) -> None:
        delay = 1.0
        while not self._recovered:
            try:
                await self._recover_once()
            except StoreError as exc:
                logger.warning("ingestion jobs cannot be recovered yet (retrying): %s", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
        while True:
            job_id = await self._queue.get()
            try:
                await self._run(job_id)
            except StoreError:  # the record could not be written: it stays queued/running for a restart
                logger.warning("ingestion job %s could not be run", job_id, exc_info=True)

    async def _run(self, job_id: str) -> None:
        job = await self.get(job_id)
        if job is None or job.state != "queued":
            return
        job.attempts += 1
        context = JobContext(
            self._save,
            lambda i, j=job_id: self._read(j, i),
            lambda j=job_id: self._cancel_requested(j),
            self.leases,
        )
        try:
            await run_job(self.kb, job, context)
        except asyncio.CancelledError:
            # the server is stopping (``close``), which is no failure of the job: it goes back to the
            # queue as it stands, its attempt not spent, and the next start goes on from its next file
            job.attempts -= 1
            job.state = "queued"
            with contextlib.suppress(StoreError):
                await self._save(job)
            raise
        except Exception as exc:
            logger.warning("ingestion job %s failed (attempt %d)", job_id, job.attempts, exc_info=True)
            if job.attempts < MAX_ATTEMPTS:
                job.state = "queued"
                await self._save(job)
                self._queue.put_nowait(job_id)
                return
            job = job.failed(str(exc) if isinstance(exc, IngestFailed) else "ingestion failed")
            await self._save(job)
        await self._db(lambda c, j=job_id: c.execute("DELETE FROM ragstream_uploads WHERE job_id = ?", (j,)))


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection) -> Any:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _add_columns(conn: sqlite3.Connection) -> None:
    """Bring a job table of an earlier version up to date (idempotent)."""
    present = {row[1] for row in conn.execute("PRAGMA table_info(ragstream_ingest_jobs)")}
    for name, (kind, backfill) in _ADDED.items():
        if name not in present:
            conn.execute(f"ALTER TABLE ragstream_ingest_jobs ADD COLUMN {name} {kind}")
            if backfill:
                conn.execute(f"UPDATE ragstream_ingest_jobs SET {name} = {backfill}")
    conn.execute(_INDEX)


def _expire(conn: sqlite3.Connection) -> None:
    """Remove finished jobs older than ``KEEP_SECONDS`` (in the caller's transaction)."""
    cutoff = time.time() - KEEP_SECONDS
    old = [
        r[0]
        for r in conn.execute(
            "SELECT id FROM ragstream_ingest_jobs WHERE state IN ('done', 'failed', 'cancelled')"
            " AND created_at < ?",
            (cutoff,),
        )
    ]
    for job_id in old:
        conn.execute("DELETE FROM ragstream_ingest_jobs WHERE id = ?", (job_id,))
        conn.execute("DELETE FROM ragstream_uploads WHERE job_id = ?", (job_id,))


def _recover(conn: sqlite3.Connection) -> list[str]:
    """Jobs a previous process left unfinished: ``running`` ones go back to the queue while they have
    attempts left, else fail (or end cancelled, when that was asked); finished jobs older than
    ``KEEP_SECONDS`` are removed. Returns the queued ids, oldest first."""
    queued: list[str] = []
    with _transaction(conn):
        _expire(conn)
        rows = conn.execute(
            "SELECT record, cancel FROM ragstream_ingest_jobs WHERE state IN ('queued', 'running')"
            " ORDER BY created_at"
        ).fetchall()
        for raw, cancel in rows:
            job = IngestJob.model_validate_json(raw)
            if cancel:
                job = job.cancelled()
                conn.execute("DELETE FROM ragstream_uploads WHERE job_id = ?", (job.id,))
            elif job.state == "running" and job.attempts >= MAX_ATTEMPTS:
                job = job.failed(WORKER_LOST)
                conn.execute("DELETE FROM ragstream_uploads WHERE job_id = ?", (job.id,))
            else:
                job.state = "queued"
                queued.append(job.id)
            conn.execute(
                "UPDATE ragstream_ingest_jobs SET state = ?, record = ? WHERE id = ?",
                (job.state, job.model_dump_json(), job.id),
            )
    return queued
