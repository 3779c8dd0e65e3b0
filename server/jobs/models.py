"""What an ingestion job is and does: its record, and the body that ingests its files one by one.

The record (``IngestJob``) is the whole story a client polls: state, progress and one outcome per
file. The backends (``saq_backend``, ``local``) store it next to the job and run ``run_ingest``;
they differ only in where the record, the queue and the uploaded bytes live.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from rag_tools.kb import KnowledgeBase
from rag_tools.kb.models import IngestProgress

from ..observe import metrics, tracing

__all__ = ["FileOutcome", "IngestJob", "JobProgress", "JobState", "run_ingest"]

JobState = Literal["queued", "running", "done", "failed"]

#: Seconds between saves of a running job's record (progress); each save is also its heartbeat.
PULSE_SECONDS = 1.0


class _Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class FileOutcome(_Camel):
    """One uploaded file: ``pending`` until ingested, then what the knowledge base did with it."""

    name: str
    status: Literal["pending", "added", "updated", "unchanged", "error"] = "pending"
    document_id: str | None = None
    chunks: int = 0
    error: str | None = None


class JobProgress(_Camel):
    """Files finished so far, and chunks embedded of the chunks parsed so far (the total grows)."""

    files_total: int
    files_done: int = 0
    chunks_done: int = 0
    chunks_total: int = 0


class IngestJob(_Camel):
    """An upload's ingestion, as ``GET /documents/jobs/{id}`` shows it."""

    id: str
    owner: str
    state: JobState = "queued"
    progress: JobProgress
    files: list[FileOutcome]
    error: str | None = None
    attempts: int = 0
    created_at: float = Field(default_factory=time.time)

    @classmethod
    def new(cls, job_id: str, owner: str, names: list[str]) -> IngestJob:
        """A queued job for these file names."""
        return cls(
            id=job_id,
            owner=owner,
            progress=JobProgress(files_total=len(names)),
            files=[FileOutcome(name=n) for n in names],
        )

    def public(self) -> dict[str, object]:
        """The JSON a client gets (the owner is the caller; not repeated)."""
        return self.model_dump(mode="json", by_alias=True, exclude={"owner"})


async def run_ingest(
    kb: KnowledgeBase,
    job: IngestJob,
    read: Callable[[int], Awaitable[bytes]],
    save: Callable[[IngestJob], Awaitable[None]],
) -> IngestJob:
    """Ingest the job's pending files in order, saving the record after each file and every
    ``PULSE_SECONDS`` meanwhile.

    A file already settled by an earlier attempt (the job is retried after its worker died) is
    not ingested again, so its outcome stays what that attempt saw. Each file's ingestion is one
    knowledge-base commit, so a crash leaves every file either ingested or not at all.

    A job is a trace of its own (``ingest.job``, a ``kb.ingest`` span per file) when tracing is on.
    """
    metrics.INGEST_JOBS.labels("running").inc()
    with tracing.span("ingest.job", **{"ragstream.job_id": job.id, "ragstream.job.files": len(job.files)}):
        try:
            await _ingest_files(kb, job, read, save)
        except BaseException:
            metrics.INGEST_JOBS.labels("failed").inc()
            raise
    metrics.INGEST_JOBS.labels("done").inc()
    return job


async def _ingest_files(
    kb: KnowledgeBase,
    job: IngestJob,
    read: Callable[[int], Awaitable[bytes]],
    save: Callable[[IngestJob], Awaitable[None]],
) -> None:
    job.state = "running"
    settled = [f for f in job.files if f.status != "pending"]
    job.progress.files_done = len(settled)
    job.progress.chunks_done = job.progress.chunks_total = sum(f.chunks for f in settled)
    await save(job)

    async def pulse() -> None:
        while True:
            await asyncio.sleep(PULSE_SECONDS)
            await save(job)

    beat = asyncio.create_task(pulse())
    try:
        for index, entry in enumerate(job.files):
            if entry.status != "pending":
                continue
            base_done, base_total = job.progress.chunks_done, job.progress.chunks_total

            def progress(p: IngestProgress, done: int = base_done, total: int = base_total) -> None:
                job.progress.chunks_done = done + p.chunks_done
                job.progress.chunks_total = total + max(p.chunks_total, p.chunks_done)

            try:
                outcome = await kb.ingest_bytes(await read(index), name=entry.name, on_progress=progress)
            except Exception as exc:  # the KB is unreachable: fail the job (it may be retried)
                raise IngestFailed(f"the knowledge base could not ingest {entry.name!r}") from exc
            entry.status = outcome.status
            entry.document_id = outcome.document_id
            entry.chunks = outcome.chunks
            entry.error = outcome.error
            if outcome.status in ("added", "updated"):
                metrics.CHUNKS_EMBEDDED.inc(outcome.chunks)
            job.progress.files_done += 1
            job.progress.chunks_done = base_done + outcome.chunks
            job.progress.chunks_total = base_total + outcome.chunks
            await save(job)
    finally:
        beat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beat
    job.state = "done"
    await save(job)


class IngestFailed(RuntimeError):
    """A job could not finish; the message is safe to show to its owner."""
