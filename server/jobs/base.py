"""``IngestJobs``: submit an upload's ingestion, read its record, run jobs in this process."""

from __future__ import annotations

from abc import ABC, abstractmethod

from .models import IngestJob

__all__ = ["MAX_ATTEMPTS", "IngestJobs"]

#: Attempts a job gets: a job whose worker died (or that failed) runs once more, then fails.
MAX_ATTEMPTS = 2

#: How long finished jobs (and unclaimed uploads) are kept, in seconds.
KEEP_SECONDS = 86_400


class IngestJobs(ABC):
    """The job system of a server process: it queues jobs and is one of their workers."""

    @abstractmethod
    async def start(self) -> None:
        """Connect, recover jobs a dead worker left behind, start working."""

    @abstractmethod
    async def close(self) -> None:
        """Stop working (an interrupted job is retried by a worker later) and disconnect."""

    @abstractmethod
    async def submit(self, job: IngestJob, uploads: dict[int, bytes]) -> None:
        """Store the uploaded bytes (file index -> bytes) with the job and queue it."""

    @abstractmethod
    async def get(self, job_id: str) -> IngestJob | None:
        """The job's record as any worker or host last saved it, or ``None``."""

    @abstractmethod
    async def ping(self) -> None:
        """Raise unless jobs can be queued and read now, and this process's worker is running."""
