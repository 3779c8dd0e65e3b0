"""Jobs on SAQ: a PostgreSQL queue (with a database URL) or a Redis queue.

Every server process is a SAQ worker (concurrency 1) inside its own event loop. The job's record
lives in the SAQ job's ``meta`` and is saved every second while it runs, which is also the job's
heartbeat: a job whose worker died stops beating, SAQ's sweep (on any live worker) aborts it and
retries it while attempts remain, else marks it aborted (``failed`` here). The uploaded bytes, the
owners' job lists and the cancel requests are kept beside the queue (``stores``), not in the job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from saq import Job, Queue, Status, Worker  # the postgres and the redis extras bring SAQ

from rag_tools.extras import extra_imports
from rag_tools.kb import KnowledgeBase

from ..observe.logs import RepeatedLines
from ..observe.outages import Outage, OutageFilter, outage
from .base import KEEP_SECONDS, MAX_ATTEMPTS, IngestJobs, JobPage, JobQueueUnavailable, check_cursor
from .models import FINISHED, WORKER_LOST, IngestFailed, IngestJob, JobContext, JobState, run_job
from .stores import JobStore, PostgresJobStore, RedisJobStore

__all__ = ["SaqIngestJobs"]

logger = logging.getLogger("ragstream.jobs")


def _limit_repeats(
    saq_logger: logging.Logger,
    target: Outage,
    errors: tuple[type[BaseException], ...],
    messages: tuple[str, ...] = (),
) -> None:
    """SAQ's upkeep loops log a traceback every second while their server is down: a connection
    failure is the outage's one line (``observe.outages``), anything else once a minute at most
    (this backend logs each job's own failure under ``ragstream.jobs``)."""
    if not any(isinstance(f, OutageFilter) for f in saq_logger.filters):
        saq_logger.addFilter(OutageFilter(target, errors, messages))
    if not any(isinstance(f, RepeatedLines) for f in saq_logger.filters):
        saq_logger.addFilter(RepeatedLines())


FUNCTION = "ingest_upload"
SYNC_FUNCTION = "sync_source"

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

    #: The dependency whose outage a connection failure of the queue is, and what such a failure is.
    server: Outage = outage("the ingestion queue")
    connection_errors: tuple[type[BaseException], ...] = (OSError,)

    def __init__(self, kb: KnowledgeBase, queue: Queue, store: JobStore, *, heartbeat: float) -> None:
        self.kb = kb
        self.queue = queue
        self.store = store
        self.leases = store.leases
        self.heartbeat = max(1, round(heartbeat))
        self.worker = _Worker(
            queue,
            self._ping,
            functions=[(FUNCTION, self._run), (SYNC_FUNCTION, self._run)],
            concurrency=1,
            timers={"sweep": self.heartbeat, "worker_info": 10, "abort": 1, "schedule": 1},
            shutdown_grace_period_s=0,
        )
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()

    @classmethod
    def for_postgres(cls, kb: KnowledgeBase, url: str, *, name: str, heartbeat: float) -> SaqIngestJobs:
        """A PostgreSQL queue (SAQ's tables in that database) with its store's tables beside them."""
        with extra_imports("postgres"):  # SAQ's PostgreSQL queue imports psycopg here
            queue = Queue.from_url(url, name=name, min_size=1, max_size=4)
            from psycopg import OperationalError
            from psycopg_pool import PoolTimeout
        jobs = cls(kb, queue, PostgresJobStore(url), heartbeat=heartbeat)
        jobs.server, jobs.connection_errors = outage("PostgreSQL"), (OSError, OperationalError, PoolTimeout)
        # the drivers' pools log each attempt to reconnect: psycopg's (SAQ's queue) a warning, asyncpg's
        # (the job store's and the thread store's) a traceback; both are the outage's line
        import asyncpg

        _limit_repeats(
            logging.getLogger("psycopg.pool"),
            jobs.server,
            jobs.connection_errors,
            messages=("error connecting", "discarding closed connection"),
        )
        _limit_repeats(
            logging.getLogger("asyncpg.pool"),
            jobs.server,
            (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError),
        )
        return jobs

    @classmethod
    def for_redis(
        cls, kb: KnowledgeBase, url: str, *, name: str, prefix: str, heartbeat: float
    ) -> SaqIngestJobs:
        """A Redis queue with its store's keys under ``prefix``."""
        with extra_imports("redis"):
            from .saq_redis import RagstreamRedisQueue
        queue = RagstreamRedisQueue.from_url(url, name=name)
        queue.sweep_every = max(1, round(heartbeat))
        from redis.exceptions import ConnectionError, TimeoutError

        jobs = cls(kb, queue, RedisJobStore(queue, prefix), heartbeat=heartbeat)
        jobs.server, jobs.connection_errors = outage("Redis"), (OSError, ConnectionError, TimeoutError)
        return jobs

    async def start(self) -> None:
        """Connect and work in the background: a queue that is down at start is retried, and the
        routes answer 503 until it is up (the server itself starts either way)."""
        _limit_repeats(logging.getLogger("saq"), self.server, self.connection_errors)
        self._task = asyncio.create_task(self._serve())

    async def _serve(self) -> None:
        delay = 0.5
        while True:
            try:
                await self.connect()
                break
            except Exception as exc:  # one line for the outage, one when it is back
                self.server.failed(f"the ingestion queue cannot connect: {exc}")
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
        self.server.recovered()
        await self.worker.start()

    async def connect(self) -> None:
        """Connect the queue and its store (``start`` does it; alone, it makes a process that
        submits and reads jobs without working on them)."""
        await self.queue.connect()
        await self.store.open()
        self._ready.set()

    async def _ping(self) -> None:
        try:
            await self.store.ping()  # the store shares the queue's server
        except Exception as exc:  # the worker pings before every poll: the outage's two lines
            self.server.failed(exc)
            raise
        self.server.recovered()

    async def close(self) -> None:
        if self._task is not None:
            await self.worker.stop()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(Exception):
            await self.store.close()
        with contextlib.suppress(Exception):
            await self.queue.disconnect()

    async def submit(self, job: IngestJob, uploads: dict[int, bytes]) -> None:
        await self._check_connected()
        try:
            await self.store.put(job.id, uploads)
            await self.store.index(job)
            await self.queue.enqueue(
                SYNC_FUNCTION if job.kind == "sync" else FUNCTION,
                key=job.id,
                timeout=0,  # a big PDF may take long; a dead worker is found by its heartbeat
                heartbeat=self.heartbeat * 3,
                retries=MAX_ATTEMPTS,
                ttl=KEEP_SECONDS,
                meta={"record": job.model_dump(mode="json")},
            )
        except Exception as exc:
            raise JobQueueUnavailable(f"the ingestion queue is unavailable: {exc}") from exc

    async def _check_connected(self) -> None:
        """Wait briefly for the first connection (a request right after start), else 503."""
        if not self._ready.is_set():
            try:
                await asyncio.wait_for(self._ready.wait(), CONNECT_WAIT_SECONDS)
            except TimeoutError:
                raise JobQueueUnavailable("the ingestion queue is not connected yet") from None

    async def ping(self) -> None:
        if not self._ready.is_set():
            raise JobQueueUnavailable("the ingestion queue is not connected")
        if self._task is None or self._task.done():
            raise JobQueueUnavailable("the ingestion worker is not running")
        await self._ping()

    async def get(self, job_id: str) -> IngestJob | None:
        jobs = await self._records([job_id])
        return jobs[0] if jobs else None

    async def list(self, owner: str, *, limit: int, cursor: str | None = None) -> JobPage:
        after = check_cursor(cursor)
        await self._check_connected()
        try:
            ids, next_cursor = await self.store.page(owner, limit, after)
        except Exception as exc:
            raise JobQueueUnavailable(f"the job index is unavailable: {exc}") from exc
        return JobPage([job for job in await self._records(ids) if job.owner == owner], next_cursor)

    async def _records(self, job_ids: list[str]) -> list[IngestJob]:
        """The records of these jobs that still exist, in order, as their owners see them."""
        await self._check_connected()
        try:
            found = [j for j in await self.queue.jobs(job_ids) if j is not None and "record" in j.meta]
            waiting = [j.key for j in found if j.meta["record"].get("state") == "queued"]
            cancelling = await self.store.cancel_requested(waiting)
        except Exception as exc:
            raise JobQueueUnavailable(f"the ingestion queue is unavailable: {exc}") from exc
        return [_record(j, j.key in cancelling) for j in found]

    async def request_cancel(self, job_id: str) -> None:
        await self._check_connected()
        try:
            await self.store.request_cancel(job_id)
        except Exception as exc:
            raise JobQueueUnavailable(f"the job index is unavailable: {exc}") from exc

    async def claim_slot(self, name: str, slot: int) -> tuple[bool, str | None]:
        await self._check_connected()
        return await self.store.claim_slot(name, slot)

    async def record_slot_job(self, name: str, job_id: str) -> None:
        await self.store.record_slot_job(name, job_id)

    async def _run(self, ctx: dict[str, Any]) -> None:
        saq_job = ctx["job"]
        record = IngestJob.model_validate(saq_job.meta["record"])
        record.attempts = saq_job.attempts

        async def save(job: IngestJob) -> None:
            await saq_job.update(meta={"record": job.model_dump(mode="json")})

        async def read(index: int) -> bytes:
            return await self.store.get(record.id, index)

        async def cancel_requested() -> bool:
            return record.id in await self.store.cancel_requested([record.id])

        try:
            await run_job(self.kb, record, JobContext(save, read, cancel_requested, self.leases))
        except Exception as exc:
            if not saq_job.retryable:
                record.error = str(exc) if isinstance(exc, IngestFailed) else "ingestion failed"
                await save(record)
                await self.store.delete(record.id)
            logger.warning("ingestion job %s failed (attempt %d)", record.id, saq_job.attempts, exc_info=True)
            raise
        await self.store.delete(record.id)


def _record(saq_job: Job, cancelling: bool) -> IngestJob:
    """A job's record with the queue's word on its state: a job the queue finished ends as its body
    said (``done``, or ``cancelled`` / ``failed``); a job asked to stop before its worker began it
    is cancelled (the worker that takes it only records that); a job the queue gave up on failed."""
    record = IngestJob.model_validate(saq_job.meta["record"])
    state = _STATES.get(saq_job.status, record.state)
    if saq_job.status == Status.COMPLETE and record.state in FINISHED:
        state = record.state
    if cancelling and state in ("queued", "running"):  # its worker has not begun it (record queued)
        state = "cancelled"
        record = record.cancelled()
    record.state = state
    record.attempts = saq_job.attempts
    if record.state == "failed":
        record = record.failed(WORKER_LOST)  # keeps the job's own error when it had one
    return record
