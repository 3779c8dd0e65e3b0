"""The Redis event log: written behind the run, read locally from memory and remotely from Redis."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from ragstream.observe import logs as server_logs
from ragstream.runs import BackendUnavailable
from ragstream.runs.eventlog import RunInfo
from ragstream.runs.redis import REDIS, RedisEventLog, RedisRunLocks, RedisStopBus, redis_client
from tests.redis_helpers import private_redis


def _worker_log(url: str, prefix: str) -> RedisEventLog:
    client = redis_client(url)
    return RedisEventLog(client, RedisRunLocks(client, prefix), prefix=prefix, liveness_seconds=1)


async def _collect(log: RedisEventLog, run_id: str, after: int = 0) -> list[tuple[int, bytes]]:
    return [item async for batch in log.read(run_id, after) for item in batch]


async def _start(log: RedisEventLog, thread: str, run: str) -> None:
    """A run of ``log``'s worker begins: it holds the thread's lock and opens its event log."""
    await log.locks.acquire(thread, run, 30)
    await log.open(RunInfo(run, thread, "alice", "worker-a"))


@pytest.fixture
async def two_workers(
    redis_url: str, redis_prefix: str
) -> AsyncIterator[tuple[RedisEventLog, RedisEventLog]]:
    a, b = _worker_log(redis_url, redis_prefix), _worker_log(redis_url, redis_prefix)
    try:
        yield a, b
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_burst_reaches_local_and_remote_readers_in_order_exactly_once(
    two_workers: tuple[RedisEventLog, RedisEventLog],
) -> None:
    a, b = two_workers
    await _start(a, "t1", "r1")
    local = asyncio.create_task(_collect(a, "t1/r1"))
    remote = asyncio.create_task(_collect(b, "t1/r1"))
    events = [b'{"n":%d}' % i for i in range(1, 1001)]
    for i, data in enumerate(events, 1):
        assert await a.append("t1/r1", data) == i  # sequence numbers are the SSE ids, assigned at once
    late_remote = asyncio.create_task(_collect(b, "t1/r1", after=990))  # a reconnect on the other worker
    await a.close("t1/r1", "finished")
    expected = list(enumerate(events, 1))
    assert await asyncio.wait_for(local, 10) == expected
    assert await asyncio.wait_for(remote, 10) == expected
    assert await asyncio.wait_for(late_remote, 10) == expected[990:]
    assert (await b.info("t1/r1")).status == "finished"  # type: ignore[union-attr]
    assert await _collect(b, "t1/r1", after=500) == expected[500:]  # replay after the end, from Redis
    # a reconnect past the run's last event (a stale Last-Event-ID) ends at once, on either worker
    for log in (a, b):
        assert await asyncio.wait_for(_collect(log, "t1/r1", after=5000), 5) == []


async def test_a_reader_past_the_events_of_a_running_run_ends_with_the_run(
    two_workers: tuple[RedisEventLog, RedisEventLog],
) -> None:
    a, b = two_workers
    await _start(a, "t2", "r2")
    await a.append("t2/r2", b'{"n":1}')
    ahead = asyncio.create_task(_collect(b, "t2/r2", after=50))  # asks for events that never come
    await asyncio.sleep(0.5)
    await a.append("t2/r2", b'{"n":2}')
    await a.close("t2/r2", "finished")
    await a.locks.release("t2", "r2")
    assert await asyncio.wait_for(ahead, 10) == []


async def test_redis_emptied_just_before_a_close_gets_the_whole_log_back(
    two_workers: tuple[RedisEventLog, RedisEventLog], redis_prefix: str
) -> None:
    """Redis restarts empty after a run's last write and before its close: the close finds the log
    short and writes it again whole, so a reader on any worker replays the run, not only its end."""
    a, b = two_workers
    await _start(a, "t9", "r9")
    events = [b'{"n":%d}' % i for i in range(1, 11)]
    for data in events:
        await a.append("t9/r9", data)
    while a._outboxes["t9/r9"].writer is not None:  # written behind the run
        await asyncio.sleep(0.01)
    assert await a.redis.delete(f"{redis_prefix}run:t9/r9:events", f"{redis_prefix}run:t9/r9:info") == 2
    await a.close("t9/r9", "finished")
    assert await asyncio.wait_for(_collect(b, "t9/r9"), 10) == list(enumerate(events, 1))
    assert (await b.info("t9/r9")).status == "finished"  # type: ignore[union-attr]


async def test_redis_lost_mid_run_fails_an_append_and_close_writes_what_was_missed(
    redis_prefix: str,
) -> None:
    with private_redis() as (port, process):
        url = f"redis://127.0.0.1:{port}/0"
        a = _worker_log(url, redis_prefix)
        await a.open(RunInfo("r1", "t1", "alice", "worker-a"))
        local = asyncio.create_task(_collect(a, "t1/r1"))
        for i in range(1, 11):
            await a.append("t1/r1", b"%d" % i)
        while a._outboxes["t1/r1"].writer is not None:  # written behind the run
            await asyncio.sleep(0.01)
        process.kill()
        process.wait(10)
        with pytest.raises(BackendUnavailable):
            for i in range(11, 1000):  # the failed write surfaces on an append soon after
                await a.append("t1/r1", b"%d" % i)
                await asyncio.sleep(0.01)
        failed_at = a._outboxes["t1/r1"].last_seq
        with private_redis(port):  # back (empty): close writes every event the failed writes missed
            await a.close("t1/r1", "error")
            b = _worker_log(url, redis_prefix)
            missed = await _collect(b, "t1/r1", after=10)
            await b.aclose()
        assert missed == [(i, b"%d" % i) for i in range(11, failed_at + 1)]
        # the local reader (the client on this worker) saw every event, in order, then the end
        got = await asyncio.wait_for(local, 10)
        assert got == [(i, b"%d" % i) for i in range(1, failed_at + 1)]
        await a.aclose()


async def test_forgetting_a_thread_drops_its_ended_runs_on_every_worker(
    two_workers: tuple[RedisEventLog, RedisEventLog],
) -> None:
    a, b = two_workers
    for run_id in ("r1", "r2"):
        await a.open(RunInfo(run_id, "gone", "alice", "worker-a"))
        await a.append(f"gone/{run_id}", b"x")
        await a.close(f"gone/{run_id}", "finished")
    await b.open(RunInfo("r1", "kept", "alice", "worker-b"))
    await b.close("kept/r1", "finished")
    await b.forget("gone")  # the thread is deleted through the other worker
    for log in (a, b):
        assert await log.info("gone/r1") is None
        assert await log.info("gone/r2") is None
        assert await _collect(log, "gone/r2") == []
        assert await log.info("kept/r1") is not None
    assert not await a.redis.exists(b._thread_runs_key("gone"))  # nothing left behind

    # a run still under way (on the other worker) outlives a forget; the ended ones go
    await a.open(RunInfo("r3", "busy", "alice", "worker-a"))
    await a.open(RunInfo("r4", "busy", "alice", "worker-a"))
    await a.close("busy/r4", "finished")
    await b.forget("busy")
    for log in (a, b):
        assert (await log.info("busy/r3")) is not None
        assert await log.info("busy/r4") is None
    assert await a.redis.exists(b._thread_runs_key("busy"))  # still listed, for a later forget
    await a.close("busy/r3", "finished")
    await b.forget("busy")
    assert await b.info("busy/r3") is None
    assert not await a.redis.exists(b._thread_runs_key("busy"))


async def test_a_redis_outage_is_logged_when_it_starts_and_ends_not_every_second(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The stop channel resubscribes every second while Redis is down; an operator's log gets the
    outage's start (with the error) and its end, not a traceback per attempt."""
    stops: list[str] = []
    with private_redis() as (port, server):
        client = redis_client(f"redis://127.0.0.1:{port}/0")
        bus = RedisStopBus(client, prefix="outage:")
        REDIS.recovered()  # whatever an earlier test left: up
        caplog.clear()  # its "is back" line, when an earlier test left it down, is not this outage's
        with caplog.at_level(logging.DEBUG, logger="ragstream"):
            bus.listen(stops.append)
            await asyncio.sleep(0.5)
            server.kill()
            server.wait(10)
            await asyncio.sleep(3.5)  # three or four attempts to subscribe again, all refused
            with private_redis(port):
                for _ in range(100):
                    if any("is back after" in r.getMessage() for r in caplog.records):
                        break
                    await asyncio.sleep(0.1)
                await bus.publish("t/r")
                for _ in range(50):
                    if stops:
                        break
                    await asyncio.sleep(0.1)
            await bus.close()
            await client.aclose()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 2, warnings  # one when it goes, one when it is back
    assert warnings[0].getMessage().startswith("Redis is unavailable: ")  # with what failed, on one line
    assert "Error 111 connecting" in warnings[0].getMessage() and warnings[0].exc_info is None
    assert warnings[1].getMessage().startswith("Redis is back after "), warnings
    assert sum("channel unavailable" in r.getMessage() for r in caplog.records) >= 2  # kept at debug
    assert stops == ["t/r"]  # and it works again


def test_repeated_lines_are_let_through_once_a_window_then_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(server_logs.time, "monotonic", lambda: now[0])
    lines = server_logs.RepeatedLines(window=60)
    logger = logging.getLogger("tests.repeated")

    def shown(msg: str, *args: object) -> str | None:
        record = logger.makeRecord(logger.name, logging.ERROR, __file__, 1, msg, args, None)
        return record.getMessage() if lines.filter(record) else None

    assert shown("Upkeep task failed unexpectedly") == "Upkeep task failed unexpectedly"
    assert [shown("Upkeep task failed unexpectedly") for _ in range(30)] == [None] * 30
    assert shown("No task data found for job %s", "j1") == "No task data found for job j1"  # another line
    now[0] += 61
    assert shown("Upkeep task failed unexpectedly") == (
        "Upkeep task failed unexpectedly (repeated 30 more times in the last 60 s)"
    )
    assert shown("No task data found for job %s", "j2") == "No task data found for job j2"
