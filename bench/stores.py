"""Thread store round trips: SQLite (the embedded default) against Redis and PostgreSQL.

    python -m bench.stores [--redis redis://127.0.0.1:6379/0] [--postgres postgresql://postgres@127.0.0.1:5432]

What a run costs each store: ``version`` (a shared store is revalidated before every run), ``load``
(a thread not in the cache) and a compare-and-set ``save`` (once per run), each the median of
sequential calls on a record the size of a thread after a few turns; then saves/s with 50 threads
saved concurrently (50 runs finishing at once in one worker). Redis keys go under a fresh prefix and
are deleted; PostgreSQL gets a fresh database, dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import asyncpg

from rag_tools.state import SQLiteThreadStore, ThreadRecord, ThreadStore
from rag_tools.state.postgres_store import PostgresThreadStore
from rag_tools.state.redis_store import RedisThreadStore

from ._util import median, table

CALLS = 400
CONCURRENT_THREADS = 50
SAVES_PER_THREAD = 10


def _record(thread_id: str) -> ThreadRecord:
    """About 30 KB: citation cards, a search, QA entries and a conversation of ten messages."""
    cards = {
        str(i): {"title": f"Document {i}", "uri": f"docs/{i}.md", "text": "passage text " * 30}
        for i in range(20)
    }
    state = {"session": {"citations": cards, "document_filter": []}, "qa": {"entries": ["answer " * 60] * 5}}
    messages = [{"kind": "request", "parts": [{"content": "message text " * 80}]} for _ in range(10)]
    return ThreadRecord(
        thread_id, owner="alice", title="a thread", state=state, extras={"messages": messages}
    )


async def _median_us(call: Callable[[], Awaitable[object]]) -> float:
    times = []
    for _ in range(CALLS):
        start = time.perf_counter()
        await call()
        times.append((time.perf_counter() - start) * 1e6)
    return median(times)


async def _measure(store: ThreadStore) -> tuple[float, float, float, float]:
    saved = await store.save(_record("bench"))
    version_us = await _median_us(lambda: store.version("bench"))
    load_us = await _median_us(lambda: store.load("bench"))
    current = [saved]

    async def save() -> None:
        current[0] = await store.save(current[0])

    save_us = await _median_us(save)
    records = [await store.save(_record(f"many-{i}")) for i in range(CONCURRENT_THREADS)]

    async def thread_saves(record: ThreadRecord) -> None:
        for _ in range(SAVES_PER_THREAD):
            record = await store.save(replace(record))

    start = time.perf_counter()
    await asyncio.gather(*(thread_saves(r) for r in records))
    per_second = CONCURRENT_THREADS * SAVES_PER_THREAD / (time.perf_counter() - start)
    return version_us, load_us, save_us, per_second


async def _admin(url: str, statement: str) -> None:
    conn = await asyncpg.connect(f"{url}/postgres", timeout=10)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ragstream-bench-stores-"))
    database = f"ragstream_bench_{uuid.uuid4().hex[:8]}"
    prefix = f"bench-{uuid.uuid4().hex[:8]}:"
    await _admin(args.postgres, f'CREATE DATABASE "{database}"')
    stores: list[tuple[str, ThreadStore]] = [
        ("SQLite (embedded default)", SQLiteThreadStore(work / "threads.sqlite3")),
        ("Redis", RedisThreadStore(args.redis, prefix=prefix)),
        ("PostgreSQL", PostgresThreadStore(f"{args.postgres}/{database}")),
    ]
    rows = []
    try:
        for name, store in stores:
            rows.append((name, *await _measure(store)))
            print(f"{name}: done")
    finally:
        for _, store in stores:
            if isinstance(store, RedisThreadStore):
                keys = [key async for key in store.redis.scan_iter(match=f"{prefix}*")]
                if keys:
                    await store.redis.delete(*keys)
            await store.close()
        await _admin(args.postgres, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        shutil.rmtree(work, ignore_errors=True)
    base = rows[0]
    print()
    print(
        table(
            [
                "store",
                "version µs",
                "load µs",
                "save µs",
                "save vs SQLite",
                f"saves/s, {CONCURRENT_THREADS} threads at once",
                "vs SQLite",
            ],
            [
                (name, v, load, save, f"{save / base[3]:.2f}x", rate, f"{rate / base[4]:.2f}x")
                for name, v, load, save, rate in rows
            ],
        )
    )
    print(f"\nRecord: {len(str(_record('x').state)) + len(str(_record('x').extras)):,} characters of JSON.")


if __name__ == "__main__":
    asyncio.run(main())
