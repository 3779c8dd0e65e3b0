"""The Redis job queue's sweep never takes a job from the worker that is starting it.

A worker takes a job in two steps (moved onto the active list, then marked active). SAQ's own
sweep, run between the two, aborts and retries a job that is running fine; ragstream's sweep
waits for a second sighting, so only a job whose worker died between the steps is swept. On a
real Redis, with the worker's two steps taken by hand so the window is held open.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from saq import Status
from saq.queue.redis import RedisQueue
from saq.utils import now

from ragstream.jobs.saq_redis import RagstreamRedisQueue

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def queue(redis_url: str) -> AsyncIterator[RagstreamRedisQueue]:
    queue = RagstreamRedisQueue.from_url(redis_url, name=f"sweep-test-{uuid.uuid4().hex[:8]}")
    queue.sweep_every = 1
    await queue.connect()
    yield queue
    await queue.disconnect()


async def next_period(queue: RagstreamRedisQueue) -> None:
    """Wait out the sweep's lock (one sweep per period across processes)."""
    await asyncio.sleep(queue.sweep_every + 0.1)


async def taken(queue: RagstreamRedisQueue) -> str:
    """Enqueue a job and take it as a worker's first step does: on the active list, not yet active."""
    await queue.enqueue("ingest", key=uuid.uuid4().hex, heartbeat=3, retries=2)
    job = await queue.dequeue(timeout=1)
    assert job is not None and job.status == Status.QUEUED
    return job.key


async def test_a_job_being_started_is_left_to_its_worker(queue: RagstreamRedisQueue) -> None:
    key = await taken(queue)
    assert await queue.sweep() == []
    job = await queue.job(key)
    assert job is not None and job.status == Status.QUEUED and job.attempts == 0  # untouched

    await job.update(status=Status.ACTIVE, started=now())  # the worker's second step
    await next_period(queue)
    assert await queue.sweep() == []
    job = await queue.job(key)
    assert job is not None and job.status == Status.ACTIVE and not job.error
    assert await queue.count("queued") == 0  # not queued a second time


async def test_a_job_whose_worker_died_while_starting_it_is_retried(queue: RagstreamRedisQueue) -> None:
    key = await taken(queue)
    assert await queue.sweep() == []  # first seen: perhaps being started
    await next_period(queue)
    swept = await queue.sweep(abort=0.1)  # still not active a period later: its worker is gone
    assert [queue.job_key_from_id(i) for i in swept] == [key]
    job = await queue.job(key)
    assert job is not None and job.status == Status.QUEUED and job.error == queue.swept_error_message
    assert await queue.count("queued") == 1 and await queue.count("active") == 0


async def test_a_job_taken_again_between_two_sweeps_is_left_to_its_worker(
    queue: RagstreamRedisQueue,
) -> None:
    """Seen being started, then run, retried and taken again by the next sweep: a new start, not
    the same one stalled."""
    key = await taken(queue)
    assert await queue.sweep() == []
    job = await queue.job(key)
    assert job is not None
    await job.update(status=Status.ACTIVE, started=now())
    await queue.retry(job, error="the first attempt failed")
    again = await queue.dequeue(timeout=1)
    assert again is not None and again.key == key and again.status == Status.QUEUED
    await next_period(queue)
    assert await queue.sweep() == []
    job = await queue.job(key)
    assert job is not None and job.status == Status.QUEUED and job.error == "the first attempt failed"


async def test_a_job_whose_heartbeat_stopped_is_retried_at_once(queue: RagstreamRedisQueue) -> None:
    key = await taken(queue)
    job = await queue.job(key)
    assert job is not None
    await job.update(status=Status.ACTIVE, started=now(), touched=now() - 10_000)  # silent 10 s > 3 s
    swept = await queue.sweep(abort=0.1)
    assert [queue.job_key_from_id(i) for i in swept] == [key]
    assert await queue.count("queued") == 1


async def test_saq_own_sweep_still_takes_a_job_being_started(queue: RagstreamRedisQueue) -> None:
    """Why ``RagstreamRedisQueue.sweep`` exists: when this fails, SAQ fixed the race upstream and
    the override (``server/jobs/saq_redis.py``) can go."""
    key = await taken(queue)
    swept = await RedisQueue.sweep(queue, lock=1, abort=0.1)
    assert [queue.job_key_from_id(i) for i in swept] == [key]


async def test_the_id_of_a_job_whose_record_expired_is_cleared(queue: RagstreamRedisQueue) -> None:
    key = await taken(queue)
    await queue.redis.delete(queue.job_id(key))  # only the id is left on the active list
    assert [queue.job_key_from_id(i) for i in await queue.sweep()] == [key]
    assert await queue.count("active") == 0
