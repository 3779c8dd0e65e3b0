"""The in-process run event log: replay after a cursor, live tail, and expiry of closed logs."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from ragstream.runs.eventlog import MemoryEventLog, RunInfo
from tests.conftest import scenario_app
from tests.protocol import parse_sse, run_body
from tests.servers import serve


async def _collect(log: MemoryEventLog, run_id: str, after: int = 0) -> list[tuple[int, bytes]]:
    return [item async for batch in log.read(run_id, after) for item in batch]


async def test_a_reader_gets_what_it_missed_then_the_live_tail_exactly_once() -> None:
    log = MemoryEventLog()
    await log.open(RunInfo("r", "t", "alice", "w"))
    for data in (b"a", b"b", b"c"):
        await log.append("t/r", data)
    reader = asyncio.create_task(_collect(log, "t/r", after=1))
    await asyncio.sleep(0)
    await log.append("t/r", b"d")
    await log.close("t/r", "finished")
    assert await asyncio.wait_for(reader, 5) == [(2, b"b"), (3, b"c"), (4, b"d")]
    assert (await log.info("t/r")).status == "finished"  # type: ignore[union-attr]


async def test_closed_logs_expire_oldest_first_and_running_ones_never() -> None:
    log = MemoryEventLog(ttl_seconds=0.05)
    for run_id in ("old", "running"):
        await log.open(RunInfo(run_id, "t", "alice", "w"))
        await log.append(f"t/{run_id}", b"x")
    await log.close("t/old", "finished")
    await asyncio.sleep(0.1)
    await log.open(RunInfo("new", "t", "alice", "w"))  # opening a log expires the stale ones
    assert await log.info("t/old") is None
    assert await log.info("t/running") is not None
    assert await _collect(log, "t/old") == []

    await log.close("t/new", "finished")
    await log.open(RunInfo("newer", "t", "alice", "w"))  # "new" closed just now: kept for late readers
    assert await _collect(log, "t/new") == []
    assert await log.info("t/new") is not None


async def test_forgetting_a_thread_drops_its_ended_runs_only() -> None:
    log = MemoryEventLog()
    for thread, run_id in (("t", "done"), ("t", "live"), ("t2", "other")):
        await log.open(RunInfo(run_id, thread, "alice", "w"))
        await log.append(f"{thread}/{run_id}", b"x")
    await log.close("t/done", "finished")
    await log.close("t2/other", "finished")
    await log.forget("t")
    assert await log.info("t/done") is None
    assert await _collect(log, "t/done") == []
    assert await log.info("t/live") is not None  # a running run is never dropped under its reader
    assert await log.info("t2/other") is not None


async def test_a_reused_key_is_not_expired_by_its_predecessors_closing() -> None:
    log = MemoryEventLog(ttl_seconds=0.05)
    await log.open(RunInfo("r", "t", "alice", "w"))
    await log.close("t/r", "finished")
    await log.forget("t")  # the thread was deleted; a new thread of that id reuses the run id
    await log.open(RunInfo("r", "t", "bob", "w"))
    await asyncio.sleep(0.1)
    await log.open(RunInfo("r2", "t", "bob", "w"))  # expires what closed more than ttl ago
    assert (await log.info("t/r")).owner == "bob"  # type: ignore[union-attr]
    assert await log.append("t/r", b"y") == 1


async def test_a_server_with_no_new_runs_still_drops_logs_past_their_ttl(scenario_config: Any) -> None:
    """A finished run's events are kept ``event_log_ttl_seconds`` for reconnects, then go.

    The memory log expired ended logs only when another run opened one, so a server that went
    quiet kept every ended run's events (answers, tool results) in memory, and replayed them to a
    reconnect, for as long as no new run came. Here no run starts after the first ones end.
    """
    scenario_config.event_log_ttl_seconds = 0.2
    app = scenario_app(scenario_config)
    runs = 3
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        for i in range(runs):
            response = await client.post("/agui", json=run_body(f"quiet-{i}", "r1", "nightly backups"))
            assert parse_sse(response.text)[-1][1]["type"] == "RUN_FINISHED"
        await asyncio.sleep(0.4)  # past the TTL, with no run opening a log
        replays = [(await client.get(f"/threads/quiet-{i}/runs/r1/events")).status_code for i in range(runs)]
        kept = len(app.state.services.runs.logs._logs)
    assert replays == [404] * runs, replays
    assert kept == 0, f"{kept} ended runs' logs kept past their TTL"
