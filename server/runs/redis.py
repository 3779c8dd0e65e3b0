"""Redis implementations of the run lock, the event log, the stop bus and the question bus, for
several workers.

Keys (all under a prefix, ``ragstream:`` by default; ``<key>`` is ``RunInfo.key``, thread/run):

- ``lock:<thread>``: the run holding the thread, with a TTL renewed by the run's heartbeat;
- ``run:<key>:info``: a hash (thread, owner, worker, status, started_at);
- ``run:<key>:events``: a stream whose entry ids are ``0-<seq>`` (the SSE ids); the last entry of
  a closed run is an ``end`` marker;
- channel ``stop``: stop requests for runs living in another worker;
- ``question:<key>:<id>``: a run's question: ``open``, then the answer's JSON once one is accepted,
  then ``closed`` (kept a while, so a late answer is told the question closed); channel
  ``answers`` carries each accepted answer to the worker whose run waits for it.

The worker running a run writes its events behind it (one pipeline per round of ready events) and
keeps the log in memory while the run lives, so the run never waits on Redis and the client
streaming from that worker reads from memory. Readers on other workers, and later reconnects,
replay with XRANGE and follow the tail with blocking XREAD, so no one polls for events.
While a reader waits it checks, once per ``liveness_seconds``, that the run still holds its
thread's lock; a run whose lock expired (its worker died) is closed with the ``worker_lost``
failure event (encoded by the protocol binding and handed in), once, by a Lua script, for everyone
who follows it. Every Redis failure surfaces as ``BackendUnavailable``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from rag_tools.extras import extra_imports
from rag_tools.state.redis_store import client_for

with extra_imports("redis"):
    import redis.asyncio as redis
    from redis.exceptions import RedisError

from ..observe import metrics
from ..observe.outages import outage
from .errors import BackendUnavailable
from .eventlog import EventLog, MemoryEventLog, RunInfo, RunStatus
from .failures import FailureCode
from .locks import RunLocks
from .questions import AnswerStatus, QuestionBus
from .stopbus import StopBus

__all__ = ["RedisEventLog", "RedisQuestionBus", "RedisRunLocks", "RedisStopBus", "redis_client"]

logger = logging.getLogger("ragstream.redis")

#: What every Redis retry loop of this process reports to (one line when it goes, one when it is back).
REDIS = outage("Redis")

_RENEW = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
# Close a run whose worker died: only if it is still "running", append RUN_ERROR and the end marker.
_CLOSE_DEAD = """
if redis.call('HGET', KEYS[1], 'status') ~= 'running' then return 0 end
local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
local seq = 0
if last[1] then seq = tonumber(string.match(last[1][1], '%-(%d+)$')) end
redis.call('XADD', KEYS[2], '0-' .. (seq + 1), 'd', ARGV[1])
redis.call('XADD', KEYS[2], '0-' .. (seq + 2), 'end', 'error')
redis.call('HSET', KEYS[1], 'status', 'error')
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1
"""

# Accept an answer to an open question (once), and tell the workers.
_ANSWER = """
local state = redis.call('GET', KEYS[1])
if not state then return 0 end
if state ~= 'open' then return 2 end
redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
redis.call('PUBLISH', KEYS[2], ARGV[2])
return 1
"""
# Close a question; give back an answer accepted meanwhile.
_CLOSE = """
local state = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], 'closed', 'PX', ARGV[1])
if state and state ~= 'open' and state ~= 'closed' then return state end
return false
"""
QUESTION_CLOSED_TTL_MS = 600_000


def _ms(seconds: float) -> int:
    """A TTL in whole milliseconds, at least 1 (``EXPIRE 0`` would delete the key at once)."""
    return max(1, round(seconds * 1000))


async def _redis(operation: Awaitable[Any]) -> Any:
    try:
        return await operation
    except RedisError as exc:
        metrics.REDIS_ERRORS.inc()
        raise BackendUnavailable(f"Redis is unavailable: {exc}") from exc


class RedisRunLocks(RunLocks):
    """``SET NX PX`` locks; renew and release only by the run holding them."""

    def __init__(self, client: redis.Redis, prefix: str = "ragstream:") -> None:
        self.redis = client
        self.prefix = prefix
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    def key(self, thread_id: str) -> str:
        return f"{self.prefix}lock:{thread_id}"

    async def acquire(self, thread_id: str, run_id: str, ttl_seconds: float) -> bool:
        return bool(
            await _redis(self.redis.set(self.key(thread_id), run_id, nx=True, px=int(ttl_seconds * 1000)))
        )

    async def renew(self, thread_id: str, run_id: str, ttl_seconds: float) -> bool:
        return bool(
            await _redis(self._renew(keys=[self.key(thread_id)], args=[run_id, int(ttl_seconds * 1000)]))
        )

    async def release(self, thread_id: str, run_id: str) -> None:
        await _redis(self._release(keys=[self.key(thread_id)], args=[run_id]))

    async def holder(self, thread_id: str) -> str | None:
        value = await _redis(self.redis.get(self.key(thread_id)))
        return value.decode() if value is not None else None


@dataclass
class _Outbox:
    """Events of a run of this worker not yet written to Redis, and the task writing them."""

    run: str  # the run's key
    key: str  # its stream's
    last_seq: int = 0
    pending: list[tuple[int, bytes]] = field(default_factory=list)
    writer: asyncio.Task[None] | None = None
    error: BackendUnavailable | None = None


class RedisEventLog(EventLog):
    """Run event logs on Redis Streams, readable from any worker.

    A run's own worker keeps its log in memory too while the run lives: its subscribers read from
    there without a Redis round trip, and the run never waits for Redis. Appends are written
    behind the run, every event ready at the time in one pipeline; a failed write surfaces as
    ``BackendUnavailable`` from the next ``append``. Redis may come back empty (a restart) under a
    run: a write that finds the stream shorter than the run, and the close of a run a write failed
    under, write the run again whole from memory, so a reader on any worker replays it from its start.
    """

    def __init__(
        self,
        client: redis.Redis,
        locks: RedisRunLocks,
        *,
        prefix: str = "ragstream:",
        ttl_seconds: float = 600.0,
        liveness_seconds: float = 5.0,
        running_ttl_seconds: float = 86_400.0,
        lock_ttl_seconds: float = 30.0,
        worker_lost_event: bytes = b"{}",
    ) -> None:
        """``worker_lost_event`` is the encoded terminal event that closes a run whose worker died;
        ``lock_ttl_seconds`` the run locks' lifetime, for a lock written again with its run's log."""
        self.redis = client
        self.locks = locks
        self.prefix = prefix
        self.ttl_seconds = ttl_seconds
        self.liveness_seconds = liveness_seconds
        self.running_ttl_seconds = running_ttl_seconds
        self.lock_ttl_seconds = lock_ttl_seconds
        self._local = MemoryEventLog(ttl_seconds=0)  # a run's log while it runs; Redis has it after
        self._outboxes: dict[str, _Outbox] = {}
        self.worker_lost_event = worker_lost_event
        self._close_dead = client.register_script(_CLOSE_DEAD)

    def _info_key(self, key: str) -> str:
        return f"{self.prefix}run:{key}:info"

    def _events_key(self, key: str) -> str:
        return f"{self.prefix}run:{key}:events"

    def _thread_runs_key(self, thread_id: str) -> str:
        """The set of a thread's run keys, for ``forget``. It lives as long as its newest run's log
        (a thread runs one run at a time, so every earlier log expires before it)."""
        return f"{self.prefix}thread-runs:{thread_id}"

    async def open(self, info: RunInfo) -> None:
        runs = self._thread_runs_key(info.thread_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(self._info_key(info.key), mapping=_info_fields(info))
            pipe.pexpire(self._info_key(info.key), _ms(self.running_ttl_seconds))
            pipe.sadd(runs, info.key)
            pipe.pexpire(runs, _ms(self.running_ttl_seconds))
            await _redis(pipe.execute())
        await self._local.open(info)
        self._outboxes[info.key] = _Outbox(info.key, self._events_key(info.key))

    async def append(self, key: str, data: bytes) -> int:
        box = self._outboxes[key]
        seq = await self._local.append(key, data)
        box.last_seq = seq
        box.pending.append((seq, data))  # after a failed write, kept for the retry in ``close``
        if box.error is not None:
            raise box.error
        if box.writer is None:
            box.writer = asyncio.create_task(self._write(box))
        return seq

    async def _write(self, box: _Outbox) -> None:
        """Write the outbox until it is empty, one pipeline per round; what fails stays for ``close``."""
        batch: list[tuple[int, bytes]] = []
        try:
            while box.pending:
                batch, box.pending = box.pending, []
                async with self.redis.pipeline(transaction=False) as pipe:
                    for seq, data in batch:
                        pipe.xadd(box.key, {"d": data}, id=f"0-{seq}")
                    if batch[0][0] == 1:
                        pipe.pexpire(box.key, _ms(self.running_ttl_seconds))
                    pipe.xlen(box.key)
                    written = (await _redis(pipe.execute()))[-1]
                last, batch = batch[-1][0], []
                if written < last:  # Redis lost the log's head (it restarted empty): write it again
                    await self._restore(box)
        except BackendUnavailable as exc:
            box.error = exc
        finally:
            box.pending[:0] = batch
            box.writer = None

    async def close(self, key: str, status: RunStatus) -> None:
        info = await self._local.info(key)
        box = self._outboxes.pop(key, None) or _Outbox(key, self._events_key(key))
        try:
            if box.writer is not None:
                await asyncio.shield(box.writer)
            if box.error is not None:  # Redis failed under the run: it may hold any part of the log
                await self._restore(box)  # from the local log, so before it is closed (and expires)
        finally:
            await self._local.close(key, status)
        written = await self._write_end(box, info, status, box.pending)
        if written <= box.last_seq and info is not None:  # events and end: last_seq + 1 entries
            # Redis restarted empty after the last write and before this close: all but the end
            # would be missing, and readers refuse a log with a gap; write it again whole
            logger.warning("run %s: Redis had lost its event log; wrote it again with its end", key)
            events = list(enumerate(self._local.events(key), 1))
            await self._write_end(box, info, status, events, again=True)
        self._local.discard(key)  # readers from now on read Redis, which every worker shares

    async def _write_end(
        self,
        box: _Outbox,
        info: RunInfo | None,
        status: RunStatus,
        events: list[tuple[int, bytes]],
        *,
        again: bool = False,
    ) -> int:
        """Write ``events``, the end marker and the closed run's info in one transaction (``again``:
        over an emptied stream); the stream's length after it."""
        key = box.run
        async with self.redis.pipeline(transaction=True) as pipe:
            if again:
                pipe.delete(box.key)
            for seq, data in events:
                pipe.xadd(box.key, {"d": data}, id=f"0-{seq}")
            pipe.xadd(box.key, {"end": status}, id=f"0-{box.last_seq + 1}")
            if info is not None:  # the whole info: a Redis that restarted mid-run has none of it
                pipe.hset(self._info_key(key), mapping=_info_fields(replace(info, status=status)))
                pipe.sadd(self._thread_runs_key(info.thread_id), key)
            else:
                pipe.hset(self._info_key(key), "status", status)
            pipe.pexpire(box.key, _ms(self.ttl_seconds))
            pipe.pexpire(self._info_key(key), _ms(self.ttl_seconds))
            pipe.pexpire(self._thread_runs_key(key.partition("/")[0]), _ms(self.ttl_seconds))
            pipe.xlen(box.key)
            return int((await _redis(pipe.execute()))[-1])

    async def restore(self) -> None:
        """Write again, whole, the log of each run of this worker that Redis no longer has (it came
        back empty), with its lock; a log with a write under way is left to that write, which finds
        the stream short itself."""
        for box in list(self._outboxes.values()):
            if box.writer is not None:
                continue
            try:
                if not await _redis(self.redis.exists(self._info_key(box.run))):
                    await self._restore(box)
            except BackendUnavailable as exc:
                logger.warning("run %s: could not write its event log again: %s", box.run, exc)

    async def _restore(self, box: _Outbox) -> None:
        """Write a run of this worker to Redis again, whole: its info, every event so far and its
        thread's lock (lost with the rest, it would have a reader close the run as dead)."""
        info = await self._local.info(box.run)
        if info is None:
            return
        events = self._local.events(box.run)
        runs, info_key = self._thread_runs_key(info.thread_id), self._info_key(box.run)
        try:
            async with self.redis.pipeline(transaction=True) as pipe:
                await pipe.watch(info_key)
                if await pipe.hget(info_key, "status") not in (None, b"running"):
                    # a reader found the run's lock gone (lost with the rest) and closed the run:
                    # what its followers were told stands, and the run stops
                    raise BackendUnavailable("the run's event log was closed under it")
                pipe.multi()
                pipe.delete(box.key)
                for seq, data in enumerate(events, 1):
                    pipe.xadd(box.key, {"d": data}, id=f"0-{seq}")
                pipe.hset(info_key, mapping=_info_fields(info))
                pipe.set(self.locks.key(info.thread_id), info.run_id, nx=True, px=_ms(self.lock_ttl_seconds))
                pipe.sadd(runs, box.run)
                for key in (box.key, info_key, runs):
                    pipe.pexpire(key, _ms(self.running_ttl_seconds))
                await pipe.execute()
        except RedisError as exc:  # a WatchError too: it was closed meanwhile
            metrics.REDIS_ERRORS.inc()
            raise BackendUnavailable(f"Redis is unavailable: {exc}") from exc
        box.pending = [(seq, data) for seq, data in box.pending if seq > len(events)]
        logger.warning("run %s: Redis had lost its event log; wrote it again", box.run)

    async def info(self, key: str) -> RunInfo | None:
        if (local := await self._local.info(key)) is not None:
            return local
        raw = await _redis(self.redis.hgetall(self._info_key(key)))
        if not raw:
            return None
        fields = {k.decode(): v.decode() for k, v in raw.items()}
        if "thread_id" not in fields:  # only a status, written by a closing run after a Redis restart
            return None
        return RunInfo(
            fields["run_id"],
            fields["thread_id"],
            fields["owner"],
            fields["worker"],
            fields["status"],  # type: ignore[arg-type]
            float(fields["started_at"]),
        )

    async def forget(self, thread_id: str) -> None:
        await self._local.forget(thread_id)
        runs = self._thread_runs_key(thread_id)
        keys = [k.decode() for k in await _redis(self.redis.smembers(runs))]
        async with self.redis.pipeline(transaction=False) as pipe:  # every run's status, one round trip
            for key in keys:
                pipe.hget(self._info_key(key), "status")
            statuses = await _redis(pipe.execute())
        ended = []
        for key, status in zip(keys, statuses, strict=True):
            local = await self._local.info(key)
            running = local.status == "running" if local is not None else status == b"running"
            if not running:
                ended += [self._info_key(key), self._events_key(key)]
        async with self.redis.pipeline(transaction=True) as pipe:
            if ended:
                pipe.delete(*ended)
            if len(ended) == 2 * len(keys):
                pipe.delete(runs)
            await _redis(pipe.execute())

    async def read(self, key: str, after: int = 0) -> AsyncIterator[list[tuple[int, bytes]]]:
        if await self._local.info(key) is not None:  # a run of this worker
            async for batch in self._local.read(key, after):
                yield batch
            return
        info = await self.info(key)
        if info is None:
            return
        stream = self._events_key(key)
        last = f"0-{max(0, after)}"
        batches, last, ended = await self._drain(stream, last)  # replay what is already there
        for batch in batches:
            yield batch
        if ended:
            return
        block_ms = int(min(self.liveness_seconds, 4.0) * 1000)
        checked = -math.inf  # a run already over (its end before ``after``) is known at once
        while True:  # then follow the tail
            if time.monotonic() - checked >= self.liveness_seconds:
                checked = time.monotonic()
                status = await self._status_closing_if_dead(info)
                if status is None:  # Redis lost it (a restart; its worker writes it again) or it expired
                    raise BackendUnavailable("the run's event log is gone from Redis")
                if status != "running":  # it ended, maybe where this reader cannot see its end
                    batches, last, _ = await self._drain(stream, last)
                    for batch in batches:
                        yield batch
                    return
            response = await _redis(self.redis.xread({stream: last}, block=block_ms, count=500))
            batch, ended = _batch(response[0][1] if response else [], last)
            if batch:
                last = f"0-{batch[-1][0]}"
                yield batch
            if ended:
                return
            if not response:
                checked = -math.inf

    async def _drain(self, stream: str, last: str) -> tuple[list[list[tuple[int, bytes]]], str, bool]:
        """The events after ``last`` already in ``stream``, the id of the last one, and whether the
        run's end marker was among them."""
        batches = []
        while True:
            entries = await _redis(self.redis.xrange(stream, min=f"({last}", count=500))
            batch, ended = _batch(entries, last)
            if batch:
                last = f"0-{batch[-1][0]}"
                batches.append(batch)
            if ended or len(entries) < 500:
                return batches, last, ended

    async def _status_closing_if_dead(self, info: RunInfo) -> RunStatus | None:
        """The run's status, after closing it if its worker died; ``None`` when its log no longer exists."""
        current = await self.info(info.key)
        if current is None or current.status != "running":
            return None if current is None else current.status
        if await self.locks.holder(info.thread_id) == info.run_id:
            return "running"  # its worker is alive
        await asyncio.sleep(0.2)  # a run that just ended releases its lock before writing its end marker
        closed = await _redis(
            self._close_dead(
                keys=[self._info_key(info.key), self._events_key(info.key)],
                args=[self.worker_lost_event, _ms(self.ttl_seconds)],
            )
        )
        if closed:  # counted once, by the one process whose close took
            logger.warning("run %s lost its worker; closed it with RUN_ERROR", info.run_id)
            metrics.RUNS.labels("error", FailureCode.WORKER_LOST.value).inc()
        current = await self.info(info.key)
        return None if current is None else current.status

    async def aclose(self) -> None:
        await self.redis.aclose()


def _info_fields(info: RunInfo) -> dict[str, str | float]:
    return {
        "run_id": info.run_id,
        "thread_id": info.thread_id,
        "owner": info.owner,
        "worker": info.worker,
        "status": info.status,
        "started_at": info.started_at,
    }


def _batch(entries: list[Any], last: str) -> tuple[list[tuple[int, bytes]], bool]:
    """Events of stream entries read after the id ``last`` (until an end marker), and whether the
    end marker was among them. ``BackendUnavailable`` when events are missing between them (Redis
    restarted empty under the run, whose worker writes it again): a reader must not skip them."""
    batch = []
    seq = int(last.split("-")[1])
    for entry_id, fields in entries:
        seq, expected = int(entry_id.split(b"-")[1]), seq + 1
        if seq != expected:
            raise BackendUnavailable(f"the run's event log lacks events {expected} to {seq - 1}")
        if b"end" in fields:
            return batch, True
        batch.append((seq, fields[b"d"]))
    return batch, False


class RedisStopBus(StopBus):
    """Stop requests for runs living in other workers, over Redis pub/sub."""

    def __init__(self, client: redis.Redis, prefix: str = "ragstream:") -> None:
        self.redis = client
        self.channel = f"{prefix}stop"
        self._task: asyncio.Task[None] | None = None

    async def publish(self, key: str) -> None:
        await _redis(self.redis.publish(self.channel, key))

    def listen(self, on_stop: Callable[[str], None], on_back: Callable[[], None] | None = None) -> None:
        self._task = asyncio.create_task(
            _subscribe(
                self.redis, self.channel, lambda data: on_stop(data.decode()), what="stop", on_back=on_back
            )
        )

    async def close(self) -> None:
        await _stop_task(self._task)


class RedisQuestionBus(QuestionBus):
    """Questions in Redis keys, answers over pub/sub to the worker whose run waits (see the module doc)."""

    def __init__(self, client: redis.Redis, prefix: str = "ragstream:") -> None:
        self.redis = client
        self.prefix = prefix
        self.channel = f"{prefix}answers"
        self._answer = client.register_script(_ANSWER)
        self._close = client.register_script(_CLOSE)
        self._waiting: dict[tuple[str, str], asyncio.Future[dict[str, Any]]] = {}
        self._listening = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def _key(self, key: str, question_id: str) -> str:
        return f"{self.prefix}question:{key}:{question_id}"

    async def open(self, key: str, question_id: str, ttl: float) -> asyncio.Future[dict[str, Any]]:
        if self._task is None:
            self._task = asyncio.create_task(self._listen())
        try:  # an answer published before this worker listens would be lost
            await asyncio.wait_for(self._listening.wait(), timeout=5)
        except TimeoutError:
            raise BackendUnavailable("Redis is unavailable: cannot listen for answers") from None
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[(key, question_id)] = future
        try:
            await _redis(self.redis.set(self._key(key, question_id), "open", px=_ms(ttl)))
        except BackendUnavailable:
            self._waiting.pop((key, question_id), None)
            raise
        return future

    async def answer(self, key: str, question_id: str, payload: dict[str, Any]) -> AnswerStatus:
        encoded = json.dumps(payload)
        message = json.dumps({"key": key, "question": question_id, "payload": payload})
        found = await _redis(
            self._answer(keys=[self._key(key, question_id), self.channel], args=[encoded, message])
        )
        return {0: "unknown", 1: "delivered"}.get(int(found), "closed")  # type: ignore[return-value]

    async def close(self, key: str, question_id: str) -> dict[str, Any] | None:
        future = self._waiting.pop((key, question_id), None)
        late = await _redis(self._close(keys=[self._key(key, question_id)], args=[QUESTION_CLOSED_TTL_MS]))
        if future is not None and future.done() and not future.cancelled():
            return future.result()
        return json.loads(late) if late else None

    async def _listen(self) -> None:
        await _subscribe(
            self.redis,
            self.channel,
            self._deliver,
            what="answers",
            on_subscribed=self._listening.set,
            on_lost=self._listening.clear,
        )

    def _deliver(self, data: bytes) -> None:
        try:
            message = json.loads(data)
            future = self._waiting.get((message["key"], message["question"]))
        except (ValueError, KeyError, TypeError):
            logger.warning("ignored a malformed message on the answers channel")
            return
        if future is not None and not future.done():
            future.set_result(message["payload"])

    async def aclose(self) -> None:
        await _stop_task(self._task)


async def _subscribe(
    client: redis.Redis,
    channel: str,
    on_message: Callable[[bytes], None],
    *,
    what: str,
    on_subscribed: Callable[[], None] | None = None,
    on_lost: Callable[[], None] | None = None,
    on_back: Callable[[], None] | None = None,
) -> None:
    """Hand every message of ``channel`` to ``on_message``, for ever; a lost connection is counted
    and the channel subscribed again a second later. ``on_back`` is called whenever the channel is
    subscribed again, by this loop or by redis-py's own reconnect (a short outage it rides out). An
    outage is logged twice, when Redis is lost (with the error) and when it is back, not on every
    failed attempt in between (``observe.outages``)."""
    failed = 0
    while True:
        try:
            async with client.pubsub() as pubsub:
                await pubsub.subscribe(channel)
                REDIS.recovered()
                if failed:
                    logger.debug("%s channel back after %d failed attempts", what, failed)
                    failed = 0
                    if on_back is not None:
                        on_back()
                if on_subscribed is not None:
                    on_subscribed()
                confirmed = 0
                async for message in pubsub.listen():
                    kind = message.get("type")
                    if kind == "message":
                        on_message(message["data"])
                    elif kind == "subscribe":
                        confirmed += 1
                        # redis-py reconnected and subscribed again by itself (a short outage)
                        if confirmed > 1 and on_back is not None:
                            on_back()
        except RedisError as exc:
            metrics.REDIS_ERRORS.inc()
            if on_lost is not None:
                on_lost()
            REDIS.failed(exc)  # the outage's one line (and the one when it is back, above)
            logger.debug("%s channel unavailable (resubscribing every second): %s", what, exc)
            failed += 1
            await asyncio.sleep(1.0)


async def _stop_task(task: asyncio.Task[None] | None) -> None:
    """Cancel a listener task and wait for it to end."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


def redis_client(url: str) -> redis.Redis:
    """The client every Redis part of a worker shares."""
    return client_for(url)
