"""``RedisThreadStore``: thread records in Redis, shared by every worker and host.

A thread is a hash ``<prefix>thread:<id>`` (owner, title, version, updated_at, state, extras) and
a member of the sorted set ``<prefix>owner:<owner>`` scored by update time, for listings. A save
is one Lua script: it compares the stored version with the record's and writes only when they
match, so two workers can never overwrite each other's changes (``VersionConflictError``).
Connection failures and timeouts become ``StoreError``.

The schema is stamped in ``<prefix>schema`` (``REDIS_SCHEMA_VERSION``; a Redis of ragstream 0.1.0
has version 1's keys and no stamp, and is stamped on open): a stamp newer than this code is
refused (``SchemaVersionError``), checked at ``open`` and, until it succeeds, on first use.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from ..extras import extra_imports
from .store import (
    ListPosition,
    StoreError,
    ThreadInfo,
    ThreadRecord,
    ThreadStore,
    VersionConflictError,
    check_schema,
)

with extra_imports("redis"):
    import redis.asyncio as redis
    from redis.asyncio.retry import Retry
    from redis.backoff import ExponentialBackoff
    from redis.exceptions import ConnectionError, RedisError
    from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = ["REDIS_SCHEMA_VERSION", "RedisThreadStore"]

#: The layout of thread keys this code writes (the hash and owner index above).
REDIS_SCHEMA_VERSION = 1

_SAVE = """
local current = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if current ~= tonumber(ARGV[1]) then return -1 end
local previous_owner = redis.call('HGET', KEYS[1], 'owner')
redis.call('HSET', KEYS[1], 'version', ARGV[2], 'owner', ARGV[3], 'title', ARGV[4],
           'updated_at', ARGV[5], 'state', ARGV[6], 'extras', ARGV[7])
if previous_owner and previous_owner ~= ARGV[3] then
  redis.call('ZREM', ARGV[8] .. previous_owner, ARGV[9])
end
redis.call('ZADD', ARGV[8] .. ARGV[3], ARGV[5], ARGV[9])
return tonumber(ARGV[2])
"""

_NO_OWNER = "\x00"  # stands for "no owner" in the owner index and the hash


def client_for(url: str, *, timeout: float = 5.0, max_connections: int = 512) -> redis.Redis:
    """A Redis client with bounded timeouts (no call can hang) that survives a Redis restart.

    A command that meets a connection the old server closed is retried on a fresh one (three
    times, within about a second) before the failure is reported. When all ``max_connections``
    are busy (every remote follower of a run holds one in a blocking read) a command waits up to
    ``timeout`` for one instead of failing at once.
    """
    pool = redis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=timeout,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        health_check_interval=30,
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), retries=3),
        retry_on_error=[ConnectionError, RedisTimeoutError],
    )
    return redis.Redis(connection_pool=pool)


class RedisThreadStore(ThreadStore):
    """Threads in Redis; ``shared``: caches in front of it revalidate before every transaction."""

    shared = True

    def __init__(self, url_or_client: str | redis.Redis, *, prefix: str = "ragstream:") -> None:
        self.redis = client_for(url_or_client) if isinstance(url_or_client, str) else url_or_client
        self.prefix = prefix
        self._save = self.redis.register_script(_SAVE)
        self._schema_checked = False

    def _key(self, thread_id: str) -> str:
        return f"{self.prefix}thread:{thread_id}"

    async def open(self) -> None:
        """Stamp the schema (a Redis without one) or check it: ``SchemaVersionError`` when newer."""
        key = f"{self.prefix}schema"
        try:
            await self.redis.set(key, REDIS_SCHEMA_VERSION, nx=True)
            found = int(await self.redis.get(key) or REDIS_SCHEMA_VERSION)
        except RedisError as exc:
            raise StoreError(f"Redis thread store unavailable: {exc}") from exc
        check_schema(found, REDIS_SCHEMA_VERSION, f"the Redis thread store (keys {self.prefix}*)")
        self._schema_checked = True

    async def _call(self, operation: Any) -> Any:
        if not self._schema_checked:
            try:
                await self.open()
            except BaseException:
                operation.close()  # never awaited
                raise
        try:
            return await operation
        except RedisError as exc:
            raise StoreError(f"Redis thread store unavailable: {exc}") from exc

    async def load(self, thread_id: str) -> ThreadRecord | None:
        raw = await self._call(self.redis.hgetall(self._key(thread_id)))
        if not raw:
            return None
        fields = {k.decode(): v for k, v in raw.items()}
        owner = fields["owner"].decode()
        title = fields["title"].decode()
        return ThreadRecord(
            thread_id,
            None if owner == _NO_OWNER else owner,
            title or None,
            int(fields["version"]),
            orjson.loads(fields["state"]),
            orjson.loads(fields["extras"]),
            float(fields["updated_at"]),
        )

    async def save(self, record: ThreadRecord) -> ThreadRecord:
        now = time.time()
        owner = record.owner if record.owner is not None else _NO_OWNER
        result = await self._call(
            self._save(
                keys=[self._key(record.thread_id)],
                args=[
                    record.version,
                    record.version + 1,
                    owner,
                    record.title or "",
                    now,
                    orjson.dumps(record.state),
                    orjson.dumps(record.extras),
                    f"{self.prefix}owner:",
                    record.thread_id,
                ],
            )
        )
        if int(result) < 0:
            raise VersionConflictError(f"thread {record.thread_id!r} was changed by another writer")
        return ThreadRecord(
            record.thread_id, record.owner, record.title, record.version + 1, record.state, record.extras, now
        )

    async def version(self, thread_id: str) -> int | None:
        value = await self._call(self.redis.hget(self._key(thread_id), "version"))
        return int(value) if value is not None else None

    async def delete(self, thread_id: str) -> bool:
        owner = await self._call(self.redis.hget(self._key(thread_id), "owner"))
        if owner is None:
            return False
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(self._key(thread_id))
            pipe.zrem(f"{self.prefix}owner:{owner.decode()}", thread_id)
            deleted, _ = await self._call(pipe.execute())
        return bool(deleted)

    async def list_threads(
        self, owner: str | None, *, limit: int = 100, after: ListPosition | None = None
    ) -> list[ThreadInfo]:
        index = f"{self.prefix}owner:{owner if owner is not None else _NO_OWNER}"
        if after is None:
            ids = [raw.decode() for raw in await self._call(self.redis.zrevrange(index, 0, limit - 1))]
        else:
            # the set orders equal scores by member, descending here: take the ties at ``after``'s
            # score too and keep those below its thread id
            ties = await self._call(self.redis.zcount(index, after[0], after[0]))
            scored = await self._call(
                self.redis.zrevrangebyscore(
                    index, after[0], "-inf", start=0, num=limit + ties, withscores=True
                )
            )
            ids = [raw.decode() for raw, score in scored if (score, raw.decode()) < after][:limit]
        infos = []
        for thread_id in ids:
            fields = await self._call(
                self.redis.hmget(self._key(thread_id), "title", "version", "updated_at")
            )
            if fields[1] is None:
                continue
            infos.append(
                ThreadInfo(thread_id, owner, fields[0].decode() or None, int(fields[1]), float(fields[2]))
            )
        return infos

    async def close(self) -> None:
        await self.redis.aclose()
