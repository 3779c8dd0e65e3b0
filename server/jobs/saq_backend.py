"""Ingestion jobs on SAQ: a PostgreSQL queue (with a database URL) or a Redis queue.

Every server process is a SAQ worker (concurrency 1) inside its own event loop. The job's record
lives in the SAQ job's ``meta`` and is saved every second while it runs, which is also the job's
heartbeat: a job whose worker died stops beating, SAQ's sweep (on any live worker) aborts it and
retries it while attempts remain, else marks it aborted (``failed`` here). The uploaded bytes are
staged beside the queue (a PostgreSQL table, or a Redis hash), not in the job, so polling a job
never moves the upload around.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import asyncpg
from saq import Queue, Status, Worker
from saq.queue.redis import RedisQueue

from rag_tools.kb import KnowledgeBase

from ..runs import BackendUnavailable
from .base import KEEP_SECONDS, MAX_ATTEMPTS, IngestJobs
from .models import IngestFailed, IngestJob, JobState, run_ingest

__all__ = ["SaqIngestJobs"]

logger = logging.getLogger("ragstream.jobs")

FUNCTION = "ingest_upload"

#: How long a request waits for the queue's first connection before it is answered 503.
CONNECT_WAIT_SECONDS = 5.0

_STATES: dict[Status, JobState] = {
    Status.NEW: "queued",
    Status.QUEUED: "queued",
    Status.ACTIVE: "running",
    Status.ABORTING: "running",
    Status.COMPLETE: "done",
    Status.FAILED: "failed",
    Status.ABORTED: "failed",
}


class Staging(Protocol):
    """Where uploaded bytes wait for their job."""

    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def ping(self) -> None: ...
    async def put(self, job_id: str, uploads: dict[int, bytes]) -> None: ...
    async def get(self, job_id: str, index: int) -> bytes: ...
    async def delete(self, job_id: str) -> None: ...


class RedisStaging:
    """Uploads as one Redis hash per job, expiring after ``KEEP_SECONDS``."""

    def __init__(self, queue: RedisQueue, prefix: str) -> None:
        self.queue = queue
        self.prefix = prefix

    def _key(self, job_id: str) -> str:
        return f"{self.prefix}upload:{job_id}"

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def ping(self) -> None:
        await self.queue.redis.ping()

    async def put(self, job_id: str, uploads: dict[int, bytes]) -> None:
        if uploads:
            async with self.queue.redis.pipeline(transaction=True) as pipe:
                pipe.hset(self._key(job_id), mapping={str(i): data for i, data in uploads.items()})
                pipe.expire(self._key(job_id), KEEP_SECONDS)
                await pipe.execute()

    async def get(self, job_id: str, index: int) -> bytes:
        data = await self.queue.redis.hget(self._key(job_id), str(index))  # type: ignore[misc]
        if data is None:
            raise IngestFailed("the uploaded file is no longer available")
        return bytes(data)

    async def delete(self, job_id: str) -> None:
        await self.queue.redis.delete(self._key(job_id))


class PostgresStaging:
    """Uploads as rows of ``ragstream_uploads``; rows older than ``KEEP_SECONDS`` go at start."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.pool: asyncpg.Pool | None = None

    async def open(self) -> None:
        self.pool = await asyncpg.create_pool(self.url, min_size=1, max_size=2, timeout=10)
        async with self.pool.acquire() as conn:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS ragstream_uploads (job_id text, idx int, data bytea NOT NULL,"
                " created_at double precision NOT NULL, PRIMARY KEY (job_id, idx))"
            )
            await conn.execute(
                "DELETE FROM ragstream_uploads WHERE created_at < $1", time.time() - KEEP_SECONDS
            )

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()

    async def ping(self) -> None:
        await self._pool().fetchval("SELECT 1", timeout=5)

    def _pool(self) -> asyncpg.Pool:
        assert self.pool is not None, "staging used before open()"
        return self.pool

    async def put(self, job_id: str, uploads: dict[int, bytes]) -> None:
        now = time.time()
        await self._pool().executemany(
            "INSERT INTO ragstream_uploads (job_id, idx, data, created_at) VALUES ($1, $2, $3, $4)",
            [(job_id, i, data, now) for i, data in uploads.items()],
        )

    async def get(self, job_id: str, index: int) -> bytes:
        data = await self._pool().fetchval(
            "SELECT data FROM ragstream_uploads WHERE job_id = $1 AND idx = $2", job_id, index
        )
        if data is None:
            raise IngestFailed("the uploaded file is no longer available")
        return bytes(data)

    async def delete(self, job_id: str) -> None:
        await self._pool().execute("DELETE FROM ragstream_uploads WHERE job_id = $1", job_id)


class _RedisQueue(RedisQueue):
    """SAQ's Redis queue, sweeping at the heartbeat's pace.

    Its sweep takes a lock for ``lock`` seconds (default 60) so that only one worker sweeps per
    period, and the worker calls it without arguments: a dead worker's job would wait up to a
    minute. Here the period is ``sweep_every`` (the heartbeat), as on the PostgreSQL queue.
    """

    sweep_every: int = 60

    async def sweep(self, lock: int | None = None, abort: float = 5.0) -> list[str]:
        return await super().sweep(lock=self.sweep_every if lock is None else lock, abort=abort)


class _Worker(Worker[Any]):
    """SAQ's worker inside a server process.

    Without its own signal handlers (the server owns SIGINT/SIGTERM), and with a check of the
    queue's backend before each dequeue: SAQ's worker asks again at once after a failed dequeue,
    which while Redis or PostgreSQL is down would spin; here it waits, up to 10 s, then asks again.
    """

    SIGNALS: list[Any] = []  # noqa: RUF012 - SAQ reads this class attribute

    def __init__(self, queue: Queue, ping: Callable[[], Awaitable[None]], **kwargs: Any) -> None:
        super().__init__(queue, **kwargs)
        self._ping = ping
        self._delay = 0.5

    async def process(self) -> bool:
        try:
            await self._ping()
        except Exception:
            await asyncio.sleep(self._delay)
            self._delay = min(self._delay * 2, 10.0)
            return False
        self._delay = 0.5
        return await super().process()


class SaqIngestJobs(IngestJobs):
    """Jobs in a SAQ queue shared by every process and host that uses the same URL and name."""

    def __init__(self, kb: KnowledgeBase, queue: Queue, staging: Staging, *, heartbeat: float) -> None:
        self.kb = kb
        self.queue = queue
        self.staging = staging
        self.heartbeat = max(1, round(heartbeat))
        self.worker = _Worker(
            queue,
            self._ping,
            functions=[(FUNCTION, self._run)],
            concurrency=1,
            timers={"sweep": self.heartbeat, "worker_info": 10, "abort": 1, "schedule": 1},
            shutdown_grace_period_s=0,
        )
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()

    @classmethod
    def for_postgres(cls, kb: KnowledgeBase, url: str, *, name: str, heartbeat: float) -> SaqIngestJobs:
        """A PostgreSQL queue (SAQ's tables in that database) with uploads in ``ragstream_uploads``."""
        queue = Queue.from_url(url, name=name, min_size=1, max_size=4)
        return cls(kb, queue, PostgresStaging(url), heartbeat=heartbeat)

    @classmethod
    def for_redis(
        cls, kb: KnowledgeBase, url: str, *, name: str, prefix: str, heartbeat: float
    ) -> SaqIngestJobs:
        """A Redis queue with uploads in Redis hashes under ``prefix``."""
        queue = _RedisQueue.from_url(url, name=name)
        queue.sweep_every = max(1, round(heartbeat))
        return cls(kb, queue, RedisStaging(queue, prefix), heartbeat=heartbeat)

    async def start(self) -> None:
        """Connect and work in the background: a queue that is down at start is retried, and the
        routes answer 503 until it is up (the server itself starts either way)."""
        self._task = asyncio.create_task(self._serve())

    async def _serve(self) -> None:
        delay = 0.5
        while True:
            try:
                await self.connect()
                break
            except Exception as exc:
                logger.warning("the ingestion queue is unavailable (retrying): %s", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
        await self.worker.start()

    async def connect(self) -> None:
        """Connect the queue and the staging store (``start`` does it; alone, it makes a process
        that submits and reads jobs without working on them)."""
        await self.queue.connect()
        await self.staging.open()
        self._ready.set()

    async def _ping(self) -> None:
        await self.staging.ping()  # the staging store shares the queue's server

    async def close(self) -> None:
        if self._task is not None:
            await self.worker.stop()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(Exception):
            await self.staging.close()
        with contextlib.suppress(Exception):
            await self.queue.disconnect()

    async def submit(self, job: IngestJob, uploads: dict[int, bytes]) -> None:
        await self._check_connected()
        try:
            await self.staging.put(job.id, uploads)
            await self.queue.enqueue(
                FUNCTION,
                key=job.id,
                timeout=0,  # a big PDF may take long; a dead worker is found by its heartbeat
                heartbeat=self.heartbeat * 3,
                retries=MAX_ATTEMPTS,
                ttl=KEEP_SECONDS,
                meta={"record": job.model_dump(mode="json")},
            )
        except Exception as exc:
            raise BackendUnavailable(f"the ingestion queue is unavailable: {exc}") from exc

    async def _check_connected(self) -> None:
        """Wait briefly for the first connection (a request right after start), else 503."""
        if not self._ready.is_set():
            try:
                await asyncio.wait_for(self._ready.wait(), CONNECT_WAIT_SECONDS)
            except TimeoutError:
                raise BackendUnavailable("the ingestion queue is not connected yet") from None

    async def ping(self) -> None:
        if not self._ready.is_set():
            raise BackendUnavailable("the ingestion queue is not connected")
        if self._task is None or self._task.done():
            raise BackendUnavailable("the ingestion worker is not running")
        await self.staging.ping()

    async def get(self, job_id: str) -> IngestJob | None:
        await self._check_connected()
        try:
            saq_job = await self.queue.job(job_id)
        except Exception as exc:
            raise BackendUnavailable(f"the ingestion queue is unavailable: {exc}") from exc
        if saq_job is None or "record" not in saq_job.meta:
            return None
        record = IngestJob.model_validate(saq_job.meta["record"])
        record.state = _STATES.get(saq_job.status, record.state)
        record.attempts = saq_job.attempts
        if record.state == "failed" and not record.error:
            record.error = "ingestion stopped: its worker was lost (attempts exhausted)"
        return record

    async def _run(self, ctx: dict[str, Any]) -> None:
        saq_job = ctx["job"]
        record = IngestJob.model_validate(saq_job.meta["record"])
        record.attempts = saq_job.attempts

        async def save(job: IngestJob) -> None:
            await saq_job.update(meta={"record": job.model_dump(mode="json")})

        async def read(index: int) -> bytes:
            return await self.staging.get(record.id, index)

        try:
            await run_ingest(self.kb, record, read, save)
        except Exception as exc:
            if not saq_job.retryable:
                record.error = str(exc) if isinstance(exc, IngestFailed) else "ingestion failed"
                await save(record)
                await self.staging.delete(record.id)
            logger.warning("ingestion job %s failed (attempt %d)", record.id, saq_job.attempts, exc_info=True)
            raise
        await self.staging.delete(record.id)
