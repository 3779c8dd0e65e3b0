"""Background jobs: an upload, or a run of a configured sync, becomes a job that any worker or host
can run, report on, list and cancel.

``open_ingest_jobs`` picks the backend from the configuration, like the thread store: SAQ on
PostgreSQL when a database URL is set (the durable record), else SAQ on Redis, else the small
in-process runner over the SQLite thread database (``local``). Why SAQ: server/NOTES.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rag_tools.extras import extra_imports
from rag_tools.kb import KnowledgeBase

from ..config import AppConfig
from .base import MAX_ATTEMPTS, IngestJobs, InvalidCursor, JobPage, JobQueueUnavailable
from .local import LocalIngestJobs
from .models import FINISHED, FileOutcome, IngestJob, JobProgress, JobState
from .sync import SyncScheduler

if TYPE_CHECKING:
    from .saq_backend import SaqIngestJobs

__all__ = [
    "FINISHED",
    "MAX_ATTEMPTS",
    "FileOutcome",
    "IngestJob",
    "IngestJobs",
    "InvalidCursor",
    "JobPage",
    "JobProgress",
    "JobQueueUnavailable",
    "JobState",
    "LocalIngestJobs",
    "SaqIngestJobs",
    "SyncScheduler",
    "open_ingest_jobs",
]


def __getattr__(name: str) -> Any:
    """``SaqIngestJobs`` is imported on first use: SAQ comes with the postgres or redis extra."""
    if name == "SaqIngestJobs":
        from .saq_backend import SaqIngestJobs

        return SaqIngestJobs
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_ingest_jobs(config: AppConfig, kb: KnowledgeBase) -> IngestJobs:
    """The job system this configuration shares with every other process that has the same one."""
    name = f"{config.redis_prefix}ingest"
    if config.database_url:
        with extra_imports("postgres"):
            from .saq_backend import SaqIngestJobs
        return SaqIngestJobs.for_postgres(
            kb, config.database_url, name=name, heartbeat=config.job_heartbeat_seconds
        )
    if config.redis_url:
        with extra_imports("redis"):
            from .saq_backend import SaqIngestJobs
        return SaqIngestJobs.for_redis(
            kb,
            config.redis_url,
            name=name,
            prefix=config.redis_prefix,
            heartbeat=config.job_heartbeat_seconds,
        )
    return LocalIngestJobs(kb, config.data_dir / "threads.sqlite3")
