"""PostgreSQL as the durable thread record: schema versions, races between hosts, outages, and a
server whose Redis is emptied (the contract every store passes is in tests/test_cache.py)."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import replace
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from rag_tools.state import StoreError, ThreadRecord, ToolContextCache, VersionConflictError
from rag_tools.state.postgres_store import PostgresThreadStore, SchemaVersionError
from ragstream.runs.redis import redis_client
from ragstream.services import Services
from tests.agui_client import drive
from tests.conftest import scenario_app
from tests.postgres_helpers import create_database, private_postgres
from tests.protocol import check_stream, parse_sse, run_body
from tests.servers import free_port, serve, wait_ready
from tests.test_cache import Counter


async def _rows(url: str, query: str) -> list[tuple[Any, ...]]:
    conn = await asyncpg.connect(url)
    try:
        return [tuple(row) for row in await conn.fetch(query)]
    finally:
        await conn.close()


# -- the schema -----------------------------------------------------------------------------------


async def test_workers_starting_together_create_the_schema_once(postgres_url: str) -> None:
    stores = [PostgresThreadStore(postgres_url) for _ in range(4)]
    await asyncio.gather(*(store.open() for store in stores))
    assert await _rows(postgres_url, "SELECT version FROM ragstream_schema") == [(1,)]
    saved = await stores[0].save(ThreadRecord("t", owner="alice"))
    assert await stores[3].version("t") == saved.version == 1
    for store in stores:
        await store.close()


class NextVersionStore(PostgresThreadStore):
    """The store as a later ragstream would ship it: one more migration step."""

    migrations = (
        *PostgresThreadStore.migrations,
        "ALTER TABLE ragstream_threads ADD COLUMN pinned boolean NOT NULL DEFAULT false",
    )


async def test_an_older_schema_is_migrated_and_a_newer_one_refused(postgres_url: str) -> None:
    current = PostgresThreadStore(postgres_url)
    saved = await current.save(ThreadRecord("t", owner="alice", state={"ns": {"v": 1}}, extras={"e": [1]}))
    await current.close()

    upgraded = NextVersionStore(postgres_url)  # meets a version-1 database: migrates it to 2
    await upgraded.open()
    assert await _rows(postgres_url, "SELECT version FROM ragstream_schema") == [(2,)]
    assert await _rows(postgres_url, "SELECT thread_id, pinned FROM ragstream_threads") == [("t", False)]
    loaded = await upgraded.load("t")
    assert loaded is not None
    assert (loaded.owner, loaded.version, loaded.state, loaded.extras) == (
        "alice",
        1,
        saved.state,
        saved.extras,
    )
    await upgraded.close()

    older = PostgresThreadStore(postgres_url)  # this code meets the version-2 database: refuses it
    with pytest.raises(SchemaVersionError, match=r"schema version 2, newer than this ragstream writes \(1\)"):
        await older.open()
    with pytest.raises(SchemaVersionError):
        await older.load("t")  # every use refuses, nothing is read or written
    await older.close()
    assert await _rows(postgres_url, "SELECT version FROM ragstream_schema") == [(2,)]
    assert await _rows(postgres_url, "SELECT thread_id, version FROM ragstream_threads") == [("t", 1)]


async def test_a_server_refuses_to_start_on_a_newer_schema(postgres_url: str, scenario_config: Any) -> None:
    await NextVersionStore(postgres_url).open()
    scenario_config.database_url = postgres_url
    with pytest.raises(SchemaVersionError, match="upgrade ragstream"):
        await Services.start(scenario_config)


# -- several hosts on one database ----------------------------------------------------------------


async def test_concurrent_saves_from_two_stores_one_wins_the_other_conflicts(postgres_url: str) -> None:
    a, b = PostgresThreadStore(postgres_url), PostgresThreadStore(postgres_url)
    for round_ in range(10):
        thread = f"race-{round_}"
        created = await asyncio.gather(
            a.save(ThreadRecord(thread, owner="alice", state={"w": {"by": "a"}})),
            b.save(ThreadRecord(thread, owner="alice", state={"w": {"by": "b"}})),
            return_exceptions=True,
        )
        winners = [r for r in created if isinstance(r, ThreadRecord)]
        assert len(winners) == 1
        assert [type(r) for r in created if not isinstance(r, ThreadRecord)] == [VersionConflictError]
        stored = await a.load(thread)
        assert stored is not None
        assert (stored.version, stored.state) == (1, winners[0].state)

        read_a, read_b = await a.load(thread), await b.load(thread)  # both read version 1
        assert read_a is not None and read_b is not None
        updated = await asyncio.gather(
            a.save(replace(read_a, state={"w": {"by": "a2"}})),
            b.save(replace(read_b, state={"w": {"by": "b2"}})),
            return_exceptions=True,
        )
        winners = [r for r in updated if isinstance(r, ThreadRecord)]
        assert len(winners) == 1
        assert [type(r) for r in updated if not isinstance(r, ThreadRecord)] == [VersionConflictError]
        stored = await b.load(thread)
        assert stored is not None
        assert (stored.version, stored.state) == (2, winners[0].state)
    await a.close()
    await b.close()


async def test_two_caches_on_two_stores_see_each_others_saves(postgres_url: str) -> None:
    one = ToolContextCache(PostgresThreadStore(postgres_url))
    two = ToolContextCache(PostgresThreadStore(postgres_url))
    for _ in range(3):
        for cache in (one, two):
            async with cache.transaction("shared") as entry:
                entry.context.get_or_create("counter", Counter).hits += 1
    ctx, _ = await ToolContextCache(PostgresThreadStore(postgres_url)).get_or_create("shared")
    assert ctx.get_or_create("counter", Counter).hits == 6
    await one.close()
    await two.close()


# -- failures are StoreError, bounded, and the pool recovers --------------------------------------


async def test_unreachable_missing_or_silent_databases_are_store_errors(postgres_server: str) -> None:
    refused = PostgresThreadStore(f"postgresql://postgres@127.0.0.1:{free_port()}/x", timeout=1)
    with pytest.raises(StoreError, match="unavailable"):
        await refused.version("t")

    missing = PostgresThreadStore(f"{postgres_server}/ragstream_no_such_database")
    with pytest.raises(StoreError, match="does not exist"):
        await missing.load("t")

    with socket.socket() as silent:  # accepts connections and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        hung = PostgresThreadStore(f"postgresql://postgres@127.0.0.1:{port}/x", timeout=0.5)
        with pytest.raises(StoreError, match="unavailable"):
            await asyncio.wait_for(hung.save(ThreadRecord("t")), 60)  # never hangs
    for store in (refused, missing, hung):
        await store.close()


async def test_the_pool_recovers_after_postgres_restarts() -> None:
    with private_postgres() as server:
        url = await asyncio.to_thread(create_database, server.url)
        store = PostgresThreadStore(url, timeout=2)
        saved = await store.save(ThreadRecord("t", owner="alice", state={"ns": {"v": 1}}))

        await asyncio.to_thread(server.stop)
        with pytest.raises(StoreError):
            await store.version("t")
        with pytest.raises(StoreError):
            await store.save(replace(saved, state={"ns": {"v": 2}}))
        await asyncio.to_thread(server.start)
        assert await store.version("t") == 1  # the same store: its pool reconnected, nothing was written

        await asyncio.to_thread(server.stop)  # a restart between two uses: pooled connections are stale
        await asyncio.to_thread(server.start)
        loaded = await store.load("t")
        assert loaded is not None and loaded.state == {"ns": {"v": 1}}
        saved = await store.save(replace(loaded, state={"ns": {"v": 2}}))
        assert saved.version == 2
        assert [t.thread_id for t in await store.list_threads("alice")] == ["t"]
        await store.close()


# -- the server: PostgreSQL is the record, Redis holds locks and logs ------------------------------


async def _redis_keys(url: str, prefix: str) -> list[bytes]:
    client = redis_client(url)
    try:
        return [key async for key in client.scan_iter(match=f"{prefix}*")]
    finally:
        await client.aclose()


async def _empty_redis(url: str, prefix: str) -> int:
    client = redis_client(url)
    try:
        keys = [key async for key in client.scan_iter(match=f"{prefix}*")]
        return int(await client.delete(*keys)) if keys else 0
    finally:
        await client.aclose()


async def test_emptying_redis_and_restarting_loses_no_thread(
    scenario_config: Any, postgres_url: str, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    scenario_config.database_url = postgres_url
    scenario_config.redis_url = redis_url
    scenario_config.redis_prefix = redis_prefix
    async with serve(scenario_app(scenario_config)) as url, httpx.AsyncClient(base_url=url) as http:
        report = await drive(
            tmp_path,
            url,
            "durable",
            [
                {"op": "user", "text": "nightly backups"},
                {"op": "run"},
                {"op": "user", "text": "opening hours"},
                {"op": "run"},
            ],
        )
        assert [s["finished"]["outcome"] for s in report["steps"] if s["op"] == "run"] == ["success"] * 2
        policy = await http.put("/threads/durable/approval-policy", json={"needUserApproveTools": ["sear*"]})
        assert policy.status_code == 200, policy.text
        asked = await drive(
            tmp_path,
            url,
            "durable",
            [{"op": "hydrate"}, {"op": "user", "text": "backup retention"}, {"op": "run"}],
        )
        assert asked["steps"][-1]["finished"]["outcome"] == "interrupt"  # a pending approval, kept
        before = (await http.get("/threads/durable")).json()
        listed = (await http.get("/threads")).json()

    keys = await _redis_keys(redis_url, redis_prefix)
    assert keys, "the runs' locks and event logs were in Redis"
    assert not [k for k in keys if b":thread:" in k or b":owner:" in k]  # no thread record in Redis
    assert await _empty_redis(redis_url, redis_prefix) == len(keys)

    async with serve(scenario_app(scenario_config)) as url, httpx.AsyncClient(base_url=url) as http:
        after = (await http.get("/threads/durable")).json()
        assert after == before  # messages, state, approval policy, pending interrupt, version
        assert after["state"]["need_user_approve_tools"] == ["sear*"]
        assert len(after["state"]["searches"]) == 1 and len(after["interrupts"]) == 1
        assert (await http.get("/threads")).json() == listed
        resume = [
            {"interruptId": after["interrupts"][0]["id"], "status": "resolved", "payload": {"approved": True}}
        ]
        response = await http.post(
            "/agui",
            json=run_body(
                "durable", "resumed", None, after["state"], resume=resume, messages=after["messages"]
            ),
            timeout=60,
        )
        events = [e for _, e in parse_sse(response.text)]
        state = check_stream(events, after["state"])
        assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "success"}
        answer = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
        assert answer.startswith("Found it in")
        final = (await http.get("/threads/durable")).json()
        assert final["state"] == state
        assert final["version"] > after["version"] and final["interrupts"] == []
        assert len(final["messages"]) > len(after["messages"])


async def test_postgres_outages_are_503_and_leave_nothing_half_written(
    scenario_config: Any, redis_url: str, redis_prefix: str
) -> None:
    with private_postgres() as server:
        database = await asyncio.to_thread(create_database, server.url)
        await asyncio.to_thread(server.stop)  # down when the server starts
        scenario_config.database_url = database
        scenario_config.redis_url = redis_url
        scenario_config.redis_prefix = redis_prefix
        async with (
            serve(scenario_app(scenario_config)) as url,
            httpx.AsyncClient(base_url=url, timeout=60) as http,
        ):
            assert (await http.get("/ready")).json()["error"]["code"] == "store_unavailable"
            assert (await http.get("/health")).status_code == 200  # alive, not ready
            refused = await http.post("/agui", json=run_body("t", "r0"))
            assert refused.status_code == 503 and refused.json()["error"]["code"] == "store_unavailable"
            assert not refused.headers["content-type"].startswith("text/event-stream")

            await asyncio.to_thread(server.start)  # back: the schema is made on first use
            back = await wait_ready(http)  # the ingestion queue reconnects with backoff
            assert back.status_code == 200, back.text
            ok = await http.post("/agui", json=run_body("t", "r1", "nightly backups"))
            state = check_stream([e for _, e in parse_sse(ok.text)], {})
            good = (await http.get("/threads/t")).json()
            assert good["state"] == state

            lines: list[str] = []

            async def follow() -> None:
                async with http.stream("POST", "/agui", json=run_body("t", "r2", "slow", state)) as response:
                    async for line in response.aiter_lines():
                        lines.append(line)

            reader = asyncio.create_task(follow())
            while sum(line.startswith("id:") for line in lines) < 10:  # streaming
                await asyncio.sleep(0.02)
            await asyncio.to_thread(server.stop)  # gone before the run saves
            await asyncio.wait_for(reader, 60)
            events = [e for _, e in parse_sse("\n".join(lines) + "\n\n")]
            assert check_stream(events, state) == good["state"]  # the client is back at the saved state
            assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "store_unavailable"

            readiness = await http.get("/ready")
            assert readiness.status_code == 503 and readiness.json()["error"]["code"] == "store_unavailable"
            assert readiness.json()["error"]["details"]["checks"]["threadStore"] == "down"
            assert (await http.post("/agui", json=run_body("t", "r3"))).status_code == 503
            assert (await http.get("/threads/t")).status_code == 503

            await asyncio.to_thread(server.start)  # back again: the thread is as it was saved
            back = await wait_ready(http)
            assert back.status_code == 200, back.text
            assert (await http.get("/threads/t")).json() == good
            record = await PostgresThreadStore(database).load("t")
            assert record is not None and record.version == good["version"]
            again = await http.post("/agui", json=run_body("t", "r4", "opening hours", state))
            events = [e for _, e in parse_sse(again.text)]
            check_stream(events, state)
            assert events[-1]["type"] == "RUN_FINISHED"
            resumed = (await http.get("/threads/t")).json()
            assert resumed["version"] == good["version"] + 1
            assert len(resumed["messages"]) > len(good["messages"])
