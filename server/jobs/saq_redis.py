"""SAQ's Redis queue with a sweep that leaves a job being picked up alone.

SAQ's Redis sweep (0.26) aborts and retries every job on the queue's active list whose status is
not ``active``. But a worker takes a job in two steps: ``BLMOVE`` onto the active list, then a
write that marks it active. A sweep between the two finds a job that is running fine, aborts it,
writes its stale copy back over the record the job is saving and queues it again: it runs twice
and the outcome of the first run is lost (tobymao/saq#277, #124; seen here as a scheduled sync
whose job vanished from the listing).

``RagstreamRedisQueue.sweep`` keeps SAQ's rules with one change: a job on the active list that is
not active is swept only when the previous sweep of this process saw it so too, its record not
written since (its worker died between the two steps). Jobs whose heartbeat stopped are swept at
once, as in SAQ. It also sweeps at the heartbeat's pace (``sweep_every``): SAQ's default lock of
60 s let a dead worker's job wait up to a minute. The override ends when SAQ marks a job active in the step that moves it;
``tests/test_saq_sweep.py`` fails on SAQ's own sweep once that is so.
"""

from __future__ import annotations

import logging
from typing import Any

from saq import Job, Status
from saq.queue.redis import RedisQueue

__all__ = ["RagstreamRedisQueue"]

logger = logging.getLogger("ragstream.jobs")

# The jobs on the active list (id and record), read under the sweep's lock; nil while another
# process holds it (it swept this period).
_READ_ACTIVE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
redis.call('SETEX', KEYS[1], ARGV[1], 1)
local found = {}
for i, id in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do found[i] = {id, redis.call('GET', id)} end
return found
"""


class RagstreamRedisQueue(RedisQueue):
    """SAQ's Redis queue whose sweep never takes a job from the worker that is starting it."""

    #: The sweep's period in seconds (the jobs' heartbeat).
    sweep_every: int = 60

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_active = self.redis.register_script(_READ_ACTIVE)
        self._not_started: set[tuple[bytes, bytes]] = set()  # (id, record) seen not yet active

    async def sweep(self, lock: int | None = None, abort: float = 5.0) -> list[str]:
        """Abort and retry (or fail) the jobs whose worker is gone; the ids swept."""
        found = await self._read_active(
            keys=[self.namespace("sweep"), self.namespace("active")],
            args=[self.sweep_every if lock is None else lock],
        )
        if found is None:
            return []
        not_started: set[tuple[bytes, bytes]] = set()
        swept: list[bytes] = []
        for job_id, data in found:
            job = self.deserialize(data)
            if job is None:  # its record expired: only the id is left to clear
                async with self.redis.pipeline(transaction=True) as pipe:
                    pipe.lrem(self.namespace("active"), 0, job_id).zrem(self.namespace("incomplete"), job_id)
                    await pipe.execute()
                logger.info("swept the missing job %s", job_id)
                swept.append(job_id)
            elif job.stuck or (job.status != Status.ACTIVE and (job_id, data) in self._not_started):
                await self._sweep_job(job, abort)
                swept.append(job_id)
            elif job.status != Status.ACTIVE:
                not_started.add((job_id, data))  # a worker may be between taking it and marking it
        self._not_started = not_started
        return [job_id.decode() for job_id in swept]

    async def _sweep_job(self, job: Job, abort: float) -> None:
        """SAQ's handling of a swept job: abort it, wait for its worker to stop, retry or fail it."""
        logger.info("sweeping job %s", job.info())
        await self.abort(job, error=self.swept_error_message)
        try:
            await job.refresh(abort)
        except TimeoutError:
            logger.info("could not abort job %s", job.id)
        if job.retryable:
            await self.retry(job, error=self.swept_error_message)
        else:
            await self.finish(job, Status.ABORTED, error=self.swept_error_message)
