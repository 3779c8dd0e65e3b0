"""``IngestJobs``: submit a job, read its record, list an owner's jobs, cancel one, run jobs here.

Each backend keeps, beside its queue, a small index of its own: the jobs of each owner in
creation order (for the listing: the queues have no per-owner index), the cancel requests, the
schedule slots of the configured syncs, and the holds (leases) that keep one sync per source.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from typing import NamedTuple

from ..runs import BackendUnavailable, RunLocks
from .models import FINISHED, IngestJob

__all__ = ["KEEP_SECONDS", "MAX_ATTEMPTS", "IngestJobs", "InvalidCursor", "JobPage", "check_cursor"]

#: Attempts a job gets: a job whose worker died (or that failed) runs once more, then fails.
MAX_ATTEMPTS = 2

#: How long finished jobs (and unclaimed uploads) are kept, in seconds.
KEEP_SECONDS = 86_400

_CURSOR = re.compile(r"^\d{16}:[0-9A-Za-z_-]{1,128}$")


class InvalidCursor(ValueError):
    """A listing cursor this server did not hand out."""


class JobQueueUnavailable(BackendUnavailable):
    """The ingestion queue (or its job index) cannot be reached or is not running."""


def check_cursor(cursor: str | None) -> str | None:
    """The cursor, checked (``IngestJob.sort_key`` of the last job of the previous page)."""
    if cursor is not None and not _CURSOR.match(cursor):
        raise InvalidCursor("cursor must be the 'next' value of the previous page")
    return cursor


class JobPage(NamedTuple):
    """A page of an owner's jobs, newest first; ``next`` is the cursor of the following page."""

    jobs: list[IngestJob]
    next: str | None


class IngestJobs(ABC):
    """The job system of a server process: it queues jobs and is one of their workers."""

    #: The holds on sync sources, shared by every worker of this job system.
    leases: RunLocks

    @abstractmethod
    async def start(self) -> None:
        """Connect, recover jobs a dead worker left behind, start working."""

    @abstractmethod
    async def close(self) -> None:
        """Stop working (an interrupted job is retried by a worker later) and disconnect."""

    @abstractmethod
    async def submit(self, job: IngestJob, uploads: dict[int, bytes]) -> None:
        """Store the uploaded bytes (file index -> bytes, none for a sync) with the job and queue it."""

    @abstractmethod
    async def get(self, job_id: str) -> IngestJob | None:
        """The job's record as any worker or host last saved it, or ``None``."""

    @abstractmethod
    async def list(self, owner: str, *, limit: int, cursor: str | None = None) -> JobPage:
        """The owner's jobs, newest first, ``limit`` at a time, after ``cursor``."""

    @abstractmethod
    async def request_cancel(self, job_id: str) -> None:
        """Record that the job is to stop; its worker (or the next one to take it) stops it."""

    async def cancel(self, job_id: str) -> IngestJob | None:
        """Ask the job to stop, and its record after asking: ``cancelled`` at once when it was still
        queued, else still ``running`` until its worker stops between two files. ``None`` when
        there is no such job; a finished job is returned unchanged."""
        job = await self.get(job_id)
        if job is None or job.state in FINISHED:
            return job
        await self.request_cancel(job_id)
        return await self.get(job_id)

    @abstractmethod
    async def claim_slot(self, name: str, slot: int) -> tuple[bool, str | None]:
        """Claim schedule slot ``slot`` of ``name`` (one process in all wins it, and only once);
        with the id of the last job recorded for ``name``."""

    @abstractmethod
    async def record_slot_job(self, name: str, job_id: str) -> None:
        """Remember ``job_id`` as the last job of ``name``'s schedule."""

    @abstractmethod
    async def ping(self) -> None:
        """Raise unless jobs can be queued and read now, and this process's worker is running."""
