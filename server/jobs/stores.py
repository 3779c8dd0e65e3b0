"""What the SAQ backend keeps beside its queue, in the queue's own server (PostgreSQL or Redis).

- the uploaded bytes waiting for their job (staging): SAQ rewrites and reads a job whole on every
  update and poll, so 20 MB in its arguments would travel every second;
- each owner's jobs in creation order: SAQ has no per-owner index, and scanning its jobs (a Redis
  ``SCAN`` over every key, or a JSON filter over ``saq_jobs``) grows with everyone's jobs;
- cancel requests, read by the job's worker with every pulse (SAQ's own abort cancels the task at
  any await and then rewrites the job's record from a stale copy, so it is not used);
- the schedule slots of the configured syncs and the holds that keep one sync per source.

Entries follow the jobs' retention (``KEEP_SECONDS``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Protocol

from rag_tools.extras import require_extra

from ..runs import RunLocks
from .base import KEEP_SECONDS
from .models import IngestFailed, IngestJob

if TYPE_CHECKING:  # each store's driver comes with its extra (postgres, redis), imported when used
    import asyncpg
    from saq.queue.redis import RedisQueue

__all__ = ["JobStore", "PostgresJobStore", "RedisJobStore"]


def _cutoff_key() -> str:
    return f"{int((time.time() - KEEP_SECONDS) * 1_000_000):016d}"


class JobStore(Protocol):
    """Staging, the owner index, cancel requests, schedule slots and sync holds of one backend."""

    leases: RunLocks

    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def ping(self) -> None: ...
    async def put(self, job_id: str, uploads: dict[int, bytes]) -> None: ...
    async def get(self, job_id: str, index: int) -> bytes: ...
    async def delete(self, job_id: str) -> None: ...
    async def index(self, job: IngestJob) -> None: ...
    async def page(self, owner: str, limit: int, cursor: str | None) -> tuple[list[str], str | None]: ...
    async def request_cancel(self, job_id: str) -> None: ...
    async def cancel_requested(self, job_ids: list[str]) -> set[str]: ...
    async def claim_slot(self, name: str, slot: int) -> tuple[bool, str | None]: ...
    async def record_slot_job(self, name: str, job_id: str) -> None: ...


_CLAIM = """
local current = tonumber(redis.call('HGET', KEYS[1], 'slot') or '-1')
if current >= tonumber(ARGV[1]) then return {0, ''} end
redis.call('HSET', KEYS[1], 'slot', ARGV[1])
return {1, redis.call('HGET', KEYS[1], 'job') or ''}
"""


class RedisJobStore:
    """Uploads as one hash per job, each owner's jobs as a sorted set (by ``IngestJob.sort_key``),
    cancel requests as keys, all under the configured prefix."""

    def __init__(self, queue: RedisQueue, prefix: str) -> None:
        from ..runs.redis import RedisRunLocks

        self.queue = queue
        self.prefix = prefix
        self.leases: RunLocks = RedisRunLocks(queue.redis, prefix=f"{prefix}sync-")
        self._claim = queue.redis.register_script(_CLAIM)

    def _upload(self, job_id: str) -> str:
        return f"{self.prefix}upload:{job_id}"

    def _owner(self, owner: str) -> str:
        return f"{self.prefix}jobs-of:{owner}"

    def _cancel(self, job_id: str) -> str:
        return f"{self.prefix}job-cancel:{job_id}"

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def ping(self) -> None:
        await self.queue.redis.ping()

    async def put(self, job_id: str, uploads: dict[int, bytes]) -> None:
        if uploads:
            async with self.queue.redis.pipeline(transaction=True) as pipe:
                pipe.hset(self._upload(job_id), mapping={str(i): data for i, data in uploads.items()})
                pipe.expire(self._upload(job_id), KEEP_SECONDS)
                await pipe.execute()

    async def get(self, job_id: str, index: int) -> bytes:
        data = await self.queue.redis.hget(self._upload(job_id), str(index))  # type: ignore[misc]
        if data is None:
            raise IngestFailed("the uploaded file is no longer available")
        return bytes(data)

    async def delete(self, job_id: str) -> None:
        await self.queue.redis.delete(self._upload(job_id))

    async def index(self, job: IngestJob) -> None:
        key = self._owner(job.owner)
        async with self.queue.redis.pipeline(transaction=True) as pipe:
            pipe.zadd(key, {job.sort_key: 0})
            pipe.zremrangebylex(key, "-", f"({_cutoff_key()}")
            pipe.expire(key, KEEP_SECONDS)
            await pipe.execute()

    async def page(self, owner: str, limit: int, cursor: str | None) -> tuple[list[str], str | None]:
        top = f"({cursor}" if cursor else "+"
        members = await self.queue.redis.zrevrangebylex(self._owner(owner), top, "-", start=0, num=limit + 1)
        keys = [m.decode() if isinstance(m, bytes) else str(m) for m in members]
        more = len(keys) > limit
        keys = keys[:limit]
        return [k.split(":", 1)[1] for k in keys], keys[-1] if more else None

    async def request_cancel(self, job_id: str) -> None:
        await self.queue.redis.set(self._cancel(job_id), b"1", ex=KEEP_SECONDS)

    async def cancel_requested(self, job_ids: list[str]) -> set[str]:
        if not job_ids:
            return set()
        found = await self.queue.redis.mget([self._cancel(i) for i in job_ids])
        return {i for i, value in zip(job_ids, found, strict=True) if value is not None}

    async def claim_slot(self, name: str, slot: int) -> tuple[bool, str | None]:
        won, last = await self._claim(keys=[f"{self.prefix}sync-slot:{name}"], args=[slot])
        last = last.decode() if isinstance(last, bytes) else last
        return bool(won), last or None

    async def record_slot_job(self, name: str, job_id: str) -> None:
        await self.queue.redis.hset(f"{self.prefix}sync-slot:{name}", "job", job_id)  # type: ignore[misc]


_TABLES = """
CREATE TABLE IF NOT EXISTS ragstream_uploads (
    job_id text, idx int, data bytea NOT NULL, created_at double precision NOT NULL, PRIMARY KEY (job_id, idx)
);
CREATE TABLE IF NOT EXISTS ragstream_jobs (
    id text PRIMARY KEY, owner text NOT NULL, created_us bigint NOT NULL,
    cancel_requested boolean NOT NULL DEFAULT false
);
CREATE INDEX IF NOT EXISTS ragstream_jobs_owner ON ragstream_jobs (owner, created_us DESC, id DESC);
CREATE TABLE IF NOT EXISTS ragstream_sync_slots (name text PRIMARY KEY, slot bigint NOT NULL, job_id text);
CREATE TABLE IF NOT EXISTS ragstream_leases (name text PRIMARY KEY, holder text NOT NULL, expires_at timestamptz NOT NULL);
"""


class PostgresLeases(RunLocks):
    """Holds with an expiry, as rows of ``ragstream_leases`` timed by the database's clock."""

    def __init__(self, store: PostgresJobStore) -> None:
        self.store = store

    async def acquire(self, thread_id: str, run_id: str, ttl_seconds: float) -> bool:
        row = await self.store.pool_().fetchrow(
            "INSERT INTO ragstream_leases (name, holder, expires_at)"
            " VALUES ($1, $2, clock_timestamp() + make_interval(secs => $3))"
            " ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at"
            " WHERE ragstream_leases.expires_at < clock_timestamp() RETURNING holder",
            thread_id,
            run_id,
            ttl_seconds,
        )
        return row is not None

    async def renew(self, thread_id: str, run_id: str, ttl_seconds: float) -> bool:
        row = await self.store.pool_().fetchrow(
            "UPDATE ragstream_leases SET expires_at = clock_timestamp() + make_interval(secs => $3)"
            " WHERE name = $1 AND holder = $2 AND expires_at > clock_timestamp() RETURNING holder",
            thread_id,
            run_id,
            ttl_seconds,
        )
        return row is not None

    async def release(self, thread_id: str, run_id: str) -> None:
        await self.store.pool_().execute(
            "DELETE FROM ragstream_leases WHERE name = $1 AND holder = $2", thread_id, run_id
        )

    async def holder(self, thread_id: str) -> str | None:
        value = await self.store.pool_().fetchval(
            "SELECT holder FROM ragstream_leases WHERE name = $1 AND expires_at > clock_timestamp()",
            thread_id,
        )
        return str(value) if value is not None else None


class PostgresJobStore:
    """Uploads in ``ragstream_uploads``, owners and cancel requests in ``ragstream_jobs``, schedule
    slots in ``ragstream_sync_slots``, holds in ``ragstream_leases``; rows older than
    ``KEEP_SECONDS`` go at start."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.pool: asyncpg.Pool | None = None
        self.leases: RunLocks = PostgresLeases(self)

    async def open(self) -> None:
        asyncpg = require_extra("postgres", "asyncpg")
        self.pool = await asyncpg.create_pool(self.url, min_size=1, max_size=2, timeout=10)
        async with self.pool.acquire() as conn:
            await conn.execute(_TABLES)
            await conn.execute(
                "DELETE FROM ragstream_uploads WHERE created_at < $1", time.time() - KEEP_SECONDS
            )
            await conn.execute("DELETE FROM ragstream_jobs WHERE created_us < $1", int(_cutoff_key()))

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()

    async def ping(self) -> None:
        await self.pool_().fetchval("SELECT 1", timeout=5)

    def pool_(self) -> asyncpg.Pool:
        assert self.pool is not None, "job store used before open()"
        return self.pool

    async def put(self, job_id: str, uploads: dict[int, bytes]) -> None:
        now = time.time()
        await self.pool_().executemany(
            "INSERT INTO ragstream_uploads (job_id, idx, data, created_at) VALUES ($1, $2, $3, $4)",
            [(job_id, i, data, now) for i, data in uploads.items()],
        )

    async def get(self, job_id: str, index: int) -> bytes:
        data = await self.pool_().fetchval(
            "SELECT data FROM ragstream_uploads WHERE job_id = $1 AND idx = $2", job_id, index
        )
        if data is None:
            raise IngestFailed("the uploaded file is no longer available")
        return bytes(data)

    async def delete(self, job_id: str) -> None:
        await self.pool_().execute("DELETE FROM ragstream_uploads WHERE job_id = $1", job_id)

    async def index(self, job: IngestJob) -> None:
        micros = int(job.sort_key.split(":", 1)[0])
        await self.pool_().execute(
            "INSERT INTO ragstream_jobs (id, owner, created_us) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING",
            job.id,
            job.owner,
            micros,
        )

    async def page(self, owner: str, limit: int, cursor: str | None) -> tuple[list[str], str | None]:
        micros, after = (int(cursor.split(":", 1)[0]), cursor.split(":", 1)[1]) if cursor else (None, None)
        rows = await self.pool_().fetch(
            "SELECT id, created_us FROM ragstream_jobs WHERE owner = $1"
            " AND ($2::bigint IS NULL OR (created_us, id) < ($2, $3))"
            " ORDER BY created_us DESC, id DESC LIMIT $4",
            owner,
            micros,
            after,
            limit + 1,
        )
        more = len(rows) > limit
        rows = rows[:limit]
        next_key = f"{rows[-1]['created_us']:016d}:{rows[-1]['id']}" if more else None
        return [row["id"] for row in rows], next_key

    async def request_cancel(self, job_id: str) -> None:
        await self.pool_().execute("UPDATE ragstream_jobs SET cancel_requested = true WHERE id = $1", job_id)

    async def cancel_requested(self, job_ids: list[str]) -> set[str]:
        if not job_ids:
            return set()
        rows = await self.pool_().fetch(
            "SELECT id FROM ragstream_jobs WHERE id = ANY($1::text[]) AND cancel_requested", job_ids
        )
        return {row["id"] for row in rows}

    async def claim_slot(self, name: str, slot: int) -> tuple[bool, str | None]:
        row = await self.pool_().fetchrow(
            "INSERT INTO ragstream_sync_slots (name, slot) VALUES ($1, $2) ON CONFLICT (name)"
            " DO UPDATE SET slot = EXCLUDED.slot WHERE ragstream_sync_slots.slot < EXCLUDED.slot RETURNING job_id",
            name,
            slot,
        )
        return (True, row["job_id"]) if row is not None else (False, None)

    async def record_slot_job(self, name: str, job_id: str) -> None:
        await self.pool_().execute(
            "UPDATE ragstream_sync_slots SET job_id = $2 WHERE name = $1", name, job_id
        )
