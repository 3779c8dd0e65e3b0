"""What a job is and does: its record, and the bodies that ingest an upload or sync a source.

The record (``IngestJob``) is the whole story a client polls: kind, state, progress and one
outcome per file. The backends (``saq_backend``, ``local``) store it next to the job and run
``run_job``; they differ only in where the record, the queue and the uploaded bytes live.

A job is cancelled cooperatively: the backend keeps a cancel request beside the job, the running
body reads it with every pulse (and before it starts), and stops between files; a file already
being written is finished, one not written yet is not (``KnowledgeBase`` stops at the same points),
so a cancelled job leaves every file ingested whole or not at all. It ends ``cancelled`` with the
outcomes of the files it did.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from rag_tools.kb import (
    IngestOutcome,
    IngestProgress,
    KnowledgeBase,
    SyncPlan,
    SyncSourceError,
    document_id_for,
    open_sync_source,
    upload_origin,
)

from ..observe import metrics, tracing
from ..runs import RunLocks, lease_name

__all__ = [
    "FINISHED",
    "NOT_INGESTED",
    "WORKER_LOST",
    "FileOutcome",
    "IngestFailed",
    "IngestJob",
    "JobContext",
    "JobKind",
    "JobProgress",
    "JobState",
    "run_job",
    "sync_lease",
]

logger = logging.getLogger("ragstream.jobs")

JobState = Literal["queued", "running", "done", "failed", "cancelled"]
JobKind = Literal["upload", "sync"]
FileStatus = Literal["pending", "added", "updated", "unchanged", "deleted", "cancelled", "error"]

#: Why a job failed when the processes running it kept dying.
WORKER_LOST = "ingestion stopped: its worker was lost (attempts exhausted)"

#: A file's error when its job failed before reaching it.
NOT_INGESTED = "not ingested: the job failed before this file"

#: States a job does not leave.
FINISHED: frozenset[str] = frozenset({"done", "failed", "cancelled"})

#: Seconds between saves of a running job's record (progress); each save is also its heartbeat.
PULSE_SECONDS = 1.0

#: How long a sync's hold on its source lasts without a renewal (the pulse renews it).
SYNC_LEASE_SECONDS = 30.0


class _Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class FileOutcome(_Camel):
    """One file: ``pending`` until done, then what the knowledge base did with it."""

    name: str
    status: FileStatus = "pending"
    document_id: str | None = None
    chunks: int = 0
    error: str | None = None
    warnings: list[str] = Field(default_factory=list)


class JobProgress(_Camel):
    """Files finished so far, and chunks embedded of the chunks parsed so far (the total grows)."""

    files_total: int
    files_done: int = 0
    chunks_done: int = 0
    chunks_total: int = 0


class IngestJob(_Camel):
    """An upload's ingestion or a sync's run, as ``GET /documents/jobs/{id}`` shows it.

    A sync job lists its files once it has listed its source. ``target`` is what the job works
    on (a sync's folder or ``s3://`` prefix) and stays on the server; ``source`` is what its owner
    sees of it. ``groups``, when set, are who may read what the job ingests (``[]``: everyone);
    ``None`` keeps a known document's groups.
    """

    id: str
    owner: str
    kind: JobKind = "upload"
    source: str | None = None
    target: str | None = None
    state: JobState = "queued"
    progress: JobProgress
    files: list[FileOutcome]
    error: str | None = None
    attempts: int = 0
    created_at: float = Field(default_factory=time.time)
    groups: list[str] | None = None
    found: dict[str, list[str] | None] | None = None
    """An upload's view, when it was accepted, of each document it replaces: that document's groups
    (``None``: no document had the name). The job writes a file only while this still holds, so
    an upload checked against one document never lands on another (``_changed_since_queued``)."""

    @classmethod
    def new(cls, job_id: str, owner: str, names: list[str]) -> IngestJob:
        """A queued upload of these file names."""
        return cls(
            id=job_id,
            owner=owner,
            progress=JobProgress(files_total=len(names)),
            files=[FileOutcome(name=n) for n in names],
        )

    @classmethod
    def new_sync(cls, job_id: str, owner: str, target: str, source: str) -> IngestJob:
        """A queued sync of ``target`` (a folder or ``s3://bucket/prefix``), shown as ``source``."""
        return cls(
            id=job_id,
            owner=owner,
            kind="sync",
            source=source,
            target=target,
            progress=JobProgress(files_total=0),
            files=[],
        )

    @property
    def sort_key(self) -> str:
        """Newest last in this string order: the listing's order and its cursor."""
        return f"{int(self.created_at * 1_000_000):016d}:{self.id}"

    def cancelled(self) -> IngestJob:
        """This record ended as cancelled: files not done yet are ``cancelled``."""
        job = self.model_copy(deep=True)
        job.state = "cancelled"
        for entry in job.files:
            if entry.status == "pending":
                entry.status = "cancelled"
        return job

    def failed(self, error: str) -> IngestJob:
        """This record ended as failed with ``error`` (an earlier, more precise one is kept): files
        not done yet are ``error`` too, saying they were not ingested, so none reads as still to come."""
        job = self.model_copy(deep=True)
        job.state = "failed"
        job.error = job.error or error
        for entry in job.files:
            if entry.status == "pending":
                entry.status, entry.error = "error", NOT_INGESTED
        return job

    def public(self) -> dict[str, object]:
        """The JSON a client gets (the owner is the caller; not repeated; the target stays here)."""
        return self.model_dump(mode="json", by_alias=True, exclude={"owner", "target", "found"})


class IngestFailed(RuntimeError):
    """A job could not finish; the message is safe to show to its owner."""


class JobContext:
    """What a running job is given: where it saves its record, how it reads an upload's bytes,
    whether it was asked to stop, and the holds on sync sources shared by every worker."""

    def __init__(
        self,
        save: Callable[[IngestJob], Awaitable[None]],
        read: Callable[[int], Awaitable[bytes]],
        cancel_requested: Callable[[], Awaitable[bool]],
        leases: RunLocks,
    ) -> None:
        self.save = save
        self.read = read
        self.cancel_requested = cancel_requested
        self.leases = leases
        self.stopped = False


async def run_job(kb: KnowledgeBase, job: IngestJob, ctx: JobContext) -> IngestJob:
    """Run the job to its end (``done``, ``failed`` or ``cancelled``), saving the record after each
    file and every ``PULSE_SECONDS`` meanwhile. ``IngestFailed`` when the knowledge base is
    unavailable (the backend may retry the job)."""
    if await ctx.cancel_requested():  # cancelled while it waited in the queue: it never runs
        ctx.stopped = True
        return await _finish(job, ctx)
    job.state = "running"
    await ctx.save(job)
    metrics.INGEST_JOBS.labels("running").inc()
    span = {"ragstream.job_id": job.id, "ragstream.job.kind": job.kind, "ragstream.job.files": len(job.files)}
    with tracing.span("ingest.job", **span):  # a job is a trace of its own when tracing is on
        try:
            finished = await (_run_sync if job.kind == "sync" else _run_upload)(kb, job, ctx)
        except BaseException:
            metrics.INGEST_JOBS.labels("failed").inc()
            raise
    metrics.INGEST_JOBS.labels(finished.state).inc()
    return finished


@contextlib.asynccontextmanager
async def _pulse(
    job: IngestJob, ctx: JobContext, renew: Callable[[], Awaitable[object]] | None = None
) -> AsyncIterator[None]:
    """Save the record every ``PULSE_SECONDS`` (its heartbeat) and notice a cancel request."""

    async def beat() -> None:
        while True:
            await asyncio.sleep(PULSE_SECONDS)
            try:
                await ctx.save(job)
                if renew is not None:
                    await renew()
                if not ctx.stopped and await ctx.cancel_requested():
                    ctx.stopped = True
            except Exception:  # the store is briefly away: the next beat tries again
                logger.warning("job %s could not be saved", job.id, exc_info=True)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _finish(job: IngestJob, ctx: JobContext) -> IngestJob:
    if ctx.stopped:
        job = job.cancelled()
    else:
        job.state = "done"
    await ctx.save(job)
    return job


def _settle(entry: FileOutcome, outcome: IngestOutcome) -> None:
    entry.status = outcome.status
    entry.document_id = outcome.document_id
    entry.chunks = outcome.chunks
    entry.error = outcome.error
    entry.warnings = outcome.warnings
    if outcome.status in ("added", "updated"):
        metrics.CHUNKS_EMBEDDED.inc(outcome.chunks)


async def _run_upload(kb: KnowledgeBase, job: IngestJob, ctx: JobContext) -> IngestJob:
    """Ingest the upload's pending files in order.

    A file already settled by an earlier attempt (the job is retried after its worker died) is
    not ingested again, so its outcome stays what that attempt saw. Each file's ingestion is one
    knowledge-base commit, so a crash leaves every file either ingested or not at all.
    """
    settled = [f for f in job.files if f.status != "pending"]
    job.progress.files_done = len(settled)
    job.progress.chunks_done = job.progress.chunks_total = sum(f.chunks for f in settled)
    async with _pulse(job, ctx):
        for index, entry in enumerate(job.files):
            if entry.status != "pending":
                continue
            if ctx.stopped:
                break
            base_done, base_total = job.progress.chunks_done, job.progress.chunks_total

            def progress(p: IngestProgress, done: int = base_done, total: int = base_total) -> None:
                job.progress.chunks_done = done + p.chunks_done
                job.progress.chunks_total = total + max(p.chunks_total, p.chunks_done)

            if await _changed_since_queued(kb, job, entry.name):
                entry.status, entry.error = "error", CHANGED_SINCE_QUEUED
                job.progress.files_done += 1
                await ctx.save(job)
                continue
            try:
                data = await ctx.read(index)
                outcome = await kb.ingest_bytes(
                    data, name=entry.name, on_progress=progress, stop=lambda: ctx.stopped, groups=job.groups
                )
            except IngestFailed:
                raise
            except Exception as exc:  # the KB is unreachable: fail the job (it may be retried)
                raise IngestFailed(f"the knowledge base could not ingest {entry.name!r}") from exc
            if outcome.status == "cancelled":
                break
            _settle(entry, outcome)
            job.progress.files_done += 1
            job.progress.chunks_done = base_done + outcome.chunks
            job.progress.chunks_total = base_total + outcome.chunks
            await ctx.save(job)
    return await _finish(job, ctx)


CHANGED_SINCE_QUEUED = (
    "not ingested: the document of this name changed hands after the upload was accepted (another"
    " editor created it or changed who may read it); upload it again"
)


async def _changed_since_queued(kb: KnowledgeBase, job: IngestJob, name: str) -> bool:
    """Whether the document ``name`` would replace is no longer the one the upload was checked against.

    The upload route checks the caller may change the document the name holds; the job runs later,
    when another editor may have created that document or moved it to other groups. Finding the
    document as this job itself leaves it (an attempt that wrote it and died before saving the
    job) is not a change.
    """
    if job.found is None or name not in job.found:
        return False
    expected = job.found[name]
    document = await kb.get_document_by_id(document_id_for(upload_origin(name)))
    now = None if document is None else sorted(document.groups)
    own = job.groups if job.groups is not None else (expected if expected is not None else [])
    return now not in (None if expected is None else sorted(expected), sorted(own))


def sync_lease(target: str) -> str:
    """The name every worker uses for its hold on a sync source (the source's normalised root)."""
    return lease_name("sync", open_sync_source(target).root)


async def _run_sync(kb: KnowledgeBase, job: IngestJob, ctx: JobContext) -> IngestJob:
    """Mirror the job's source into the knowledge base, holding the source against other syncs.

    A retried sync starts over (unchanged files are skipped by content hash). A source that cannot
    be listed fails this run only: nothing is deleted, and the next scheduled run tries again.
    """
    assert job.target is not None, "a sync job names its source"
    lease = sync_lease(job.target)
    taken = await ctx.leases.acquire(lease, job.id, SYNC_LEASE_SECONDS)
    # a retry of this very job (its worker died) takes back the hold its first attempt left
    if not taken and not await ctx.leases.renew(lease, job.id, SYNC_LEASE_SECONDS):
        holder = await ctx.leases.holder(lease)
        job = job.failed(f"another sync of {job.source} is running (job {holder})")
        await ctx.save(job)
        return job
    job.files, job.progress = [], JobProgress(files_total=0)
    slots: dict[str, int] = {}

    def plan(p: SyncPlan) -> None:
        job.files = [FileOutcome(name=name) for name in p.names]
        job.progress = JobProgress(files_total=len(job.files))
        slots.update((name, i) for i, name in enumerate(p.names))

    def progress(p: IngestProgress) -> None:
        job.progress.chunks_done, job.progress.chunks_total = p.chunks_done, p.chunks_total
        job.progress.files_done = p.files_done
        if p.outcome is not None and p.outcome.source in slots:
            _settle(job.files[slots[p.outcome.source]], p.outcome)

    try:
        async with _pulse(job, ctx, lambda: ctx.leases.renew(lease, job.id, SYNC_LEASE_SECONDS)):
            try:
                await kb.sync(
                    job.target,
                    on_plan=plan,
                    on_progress=progress,
                    stop=lambda: ctx.stopped,
                    groups=job.groups,
                )
            except SyncSourceError as exc:
                job = job.failed(str(exc))
                await ctx.save(job)
                return job
            except Exception as exc:
                raise IngestFailed(f"the knowledge base could not sync {job.source}") from exc
    finally:
        await ctx.leases.release(lease, job.id)
    return await _finish(job, ctx)
