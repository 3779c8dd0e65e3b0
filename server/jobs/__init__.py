"""Background ingestion: an upload becomes a job that any worker or host can run and report on.

``open_ingest_jobs`` picks the backend from the configuration, like the thread store: SAQ on
PostgreSQL when a database URL is set (the durable record), else SAQ on Redis, else the small
in-process runner over the SQLite thread database (``local``). Why SAQ: server/NOTES.md.
"""

from __future__ import annotations

from rag_tools.kb import KnowledgeBase

from ..config import AppConfig
from .base import MAX_ATTEMPTS, IngestJobs
from .local import LocalIngestJobs
from .models import FileOutcome, IngestJob, JobProgress, JobState
from .saq_backend import SaqIngestJobs

__all__ = [
    "MAX_ATTEMPTS",
    "FileOutcome",
    "IngestJob",
    "IngestJobs",
    "JobProgress",
    "JobState",
    "LocalIngestJobs",
    "SaqIngestJobs",
    "open_ingest_jobs",
]


def open_ingest_jobs(config: AppConfig, kb: KnowledgeBase) -> IngestJobs:
    """The job system this configuration shares with every other process that has the same one."""
    name = f"{config.redis_prefix}ingest"
    if config.database_url:
        return SaqIngestJobs.for_postgres(
            kb, config.database_url, name=name, heartbeat=config.job_heartbeat_seconds
        )
    if config.redis_url:
        return SaqIngestJobs.for_redis(
            kb,
            config.redis_url,
            name=name,
            prefix=config.redis_prefix,
            heartbeat=config.job_heartbeat_seconds,
        )
    return LocalIngestJobs(kb, config.data_dir / "threads.sqlite3")
