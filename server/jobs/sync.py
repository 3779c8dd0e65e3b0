"""Scheduled syncs (``RAGSTREAM_SYNC``): each configured source becomes a sync job every interval.

Every server process runs the schedule, and the job system decides who acts: time is cut into
slots of ``interval_seconds``, and the process that claims a source's slot (once in all, through
the queue's store) queues its job, unless the source's last job is still queued or running, or a
sync of it holds the source. The job itself holds the source while it runs (``models._run_sync``),
so one sync per source runs at a time across workers and hosts whatever the schedule does.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Sequence
from pathlib import PurePath

from ..access import LOCAL_PRINCIPAL
from ..config import SyncEntry
from .base import IngestJobs
from .models import FINISHED, IngestJob, sync_lease

__all__ = ["SyncScheduler", "shown_source"]

logger = logging.getLogger("ragstream.jobs")

#: How often the schedule looks at the clock.
TICK_SECONDS = 1.0


def shown_source(target: str) -> str:
    """What a job's owner sees of its source: the ``s3://`` prefix, or a folder's name only (the
    server's paths stay on the server)."""
    return target if "://" in target else PurePath(target.rstrip("/\\")).name or target


class SyncScheduler:
    """Queues the configured syncs on ``jobs``, each once per interval across every process."""

    def __init__(self, jobs: IngestJobs, entries: Sequence[SyncEntry]) -> None:
        self.jobs = jobs
        self.entries = list(entries)
        self._seen: dict[str, int] = {}

    async def run(self) -> None:
        """Look at the clock every ``TICK_SECONDS`` until cancelled."""
        while True:
            await self.tick(time.time())
            await asyncio.sleep(TICK_SECONDS)

    async def tick(self, now: float) -> list[IngestJob]:
        """Queue the syncs whose slot begins (or began since the last tick); the jobs queued here."""
        queued: list[IngestJob] = []
        for entry in self.entries:
            slot = int(now // entry.interval_seconds)
            if self._seen.get(entry.source) == slot:
                continue
            try:
                job = await self._due(entry, slot)
            except Exception:  # the queue is away: the next tick asks again
                logger.warning("the sync of %s could not be scheduled", entry.source, exc_info=True)
                continue
            self._seen[entry.source] = slot
            if job is not None:
                queued.append(job)
        return queued

    async def _due(self, entry: SyncEntry, slot: int) -> IngestJob | None:
        name = sync_lease(entry.source)
        won, last = await self.jobs.claim_slot(name, slot)
        if not won:
            return None  # another process has this slot
        previous = await self.jobs.get(last) if last is not None else None
        if previous is not None and previous.state not in FINISHED:
            return None  # the last run is still queued or running
        if await self.jobs.leases.holder(name) is not None:
            return None
        owner = entry.owner or LOCAL_PRINCIPAL
        job = IngestJob.new_sync(uuid.uuid4().hex, owner, entry.source, shown_source(entry.source))
        job.groups = None if entry.groups is None else list(entry.groups)
        await self.jobs.submit(job, {})
        await self.jobs.record_slot_job(name, job.id)
        logger.info("sync of %s queued as job %s", entry.source, job.id)
        return job
