"""ToolContextCache over every thread store (memory, SQLite, Redis, PostgreSQL): bounds, locking, persistence, restarts."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from rag_tools.state import (
    SESSION_NAMESPACE,
    MemoryThreadStore,
    SessionState,
    SQLiteThreadStore,
    StateModel,
    StoreError,
    ThreadRecord,
    ThreadStore,
    ToolContextCache,
    VersionConflictError,
    prepare_context,
)

ROOT = Path(__file__).resolve().parent.parent


class Counter(StateModel):
    server_only_fields: ClassVar[frozenset[str]] = frozenset()

    thread: str = ""
    hits: int = 0
    log: list[int] = []


def prepare(ctx: object) -> None:
    prepare_context(ctx, ["search"])  # type: ignore[arg-type]


@pytest.fixture(params=["memory", "sqlite", "redis", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ThreadStore:
    if request.param == "postgres":
        from rag_tools.state.postgres_store import PostgresThreadStore

        return PostgresThreadStore(request.getfixturevalue("postgres_url"))
    if request.param == "redis":
        from rag_tools.state.redis_store import RedisThreadStore

        return RedisThreadStore(
            request.getfixturevalue("redis_url"), prefix=request.getfixturevalue("redis_prefix")
        )
    if request.param == "memory":
        return MemoryThreadStore()
    return SQLiteThreadStore(tmp_path / "threads.sqlite3")


async def test_get_or_create_reports_new_threads(store: ThreadStore) -> None:
    cache = ToolContextCache(store, prepare=prepare)
    ctx, is_new = await cache.get_or_create("t1")
    assert is_new
    assert ctx.get(SESSION_NAMESPACE, SessionState) is not None
    async with cache.transaction("t1") as entry:
        entry.context.get(SESSION_NAMESPACE, SessionState).document_filter = ["x"]
    again, is_new = await cache.get_or_create("t1")
    assert again is ctx
    assert not is_new


async def test_transaction_rolls_back_to_last_saved_state(store: ThreadStore) -> None:
    cache = ToolContextCache(store, prepare=prepare)
    async with cache.transaction("t") as entry:
        entry.context.get(SESSION_NAMESPACE, SessionState).document_filter = ["kept"]
    with pytest.raises(RuntimeError):
        async with cache.transaction("t") as entry:
            entry.context.get(SESSION_NAMESPACE, SessionState).document_filter = ["lost"]
            raise RuntimeError("run failed")
    ctx, _ = await cache.get_or_create("t")
    assert ctx.get(SESSION_NAMESPACE, SessionState).document_filter == ["kept"]


async def test_concurrent_updates_with_forced_eviction_lose_nothing(store: ThreadStore) -> None:
    cache = ToolContextCache(store, max_entries=3)
    threads = [f"thread-{i}" for i in range(20)]
    expected: dict[str, list[int]] = {t: [] for t in threads}

    async def worker(n: int) -> None:
        for step in range(5):
            thread = threads[(n * 7 + step) % len(threads)]
            expected[thread].append(n * 100 + step)
            async with cache.transaction(thread) as entry:
                counter = entry.context.get_or_create("counter", Counter)
                assert counter.thread in ("", thread), "state from another thread"
                counter.thread = thread
                counter.hits += 1
                await asyncio.sleep(0)  # let others interleave while the lock is held
                counter.log = [*counter.log, n * 100 + step]
            if step % 2:
                await cache.evict_idle()

    await asyncio.gather(*(worker(n) for n in range(100)))
    assert len(cache) <= 3 + 1
    fresh = ToolContextCache(store)
    for thread in threads:
        ctx, is_new = await fresh.get_or_create(thread)
        counter = ctx.get_or_create("counter", Counter)
        assert not is_new
        assert counter.thread == thread
        assert counter.hits == len(expected[thread])
        assert sorted(counter.log) == sorted(expected[thread])


async def test_eviction_saves_unsaved_changes_first(store: ThreadStore) -> None:
    now = [0.0]
    cache = ToolContextCache(store, ttl_seconds=10, clock=lambda: now[0])
    async with cache.transaction("t", save=False) as entry:
        entry.context.get_or_create("counter", Counter).hits = 41
        entry.context.mark_changed("counter")
    assert await store.load("t") is None  # nothing written yet
    now[0] = 5
    assert await cache.evict_idle() == 0
    now[0] = 11
    assert await cache.evict_idle() == 1
    assert "t" not in cache
    record = await store.load("t")
    assert record is not None
    assert record.state["counter"]["hits"] == 41


async def test_over_capacity_dirty_entry_is_saved_once_and_dropped(store: ThreadStore) -> None:
    saves: list[str] = []
    original = store.save

    async def counting_save(record: ThreadRecord) -> ThreadRecord:
        saves.append(record.thread_id)
        await asyncio.sleep(0.01)  # a slow store: the cache is used again while it saves
        return await original(record)

    store.save = counting_save  # type: ignore[method-assign]
    cache = ToolContextCache(store, max_entries=2)
    async with cache.transaction("old", save=False) as entry:
        entry.context.get_or_create("counter", Counter).hits = 7
        entry.context.mark_changed("counter")
    for thread in ("a", "b", "c", "a", "b", "c"):  # each access is over capacity
        await cache.get_entry(thread)
    await cache.settle()
    assert saves.count("old") == 1
    assert "old" not in cache and len(cache) == 2
    record = await store.load("old")
    assert record is not None and record.state["counter"]["hits"] == 7


async def test_changes_made_through_get_or_create_are_kept(store: ThreadStore) -> None:
    """The documented ``get_or_create`` hands out the cached context: what is changed through it is
    saved when the entry is evicted (over capacity, or idle past the TTL at the next access) and
    when the cache closes, and a thread only read is never written."""
    saves: list[str] = []
    original = store.save

    async def counting_save(record: ThreadRecord) -> ThreadRecord:
        saves.append(record.thread_id)
        return await original(record)

    store.save = counting_save  # type: ignore[method-assign]
    now = [0.0]
    cache = ToolContextCache(store, max_entries=2, ttl_seconds=60, prepare=prepare, clock=lambda: now[0])
    ctx, _ = await cache.get_or_create("seed")
    ctx.get_or_create("counter", Counter).hits = 1
    ctx.mark_changed("counter")
    await cache.close()
    assert saves == ["seed"]
    saves.clear()

    cache = ToolContextCache(store, max_entries=2, ttl_seconds=60, prepare=prepare, clock=lambda: now[0])
    read, is_new = await cache.get_or_create("seed")
    assert not is_new and read.get_or_create("counter", Counter).hits == 1  # typed on use: no change
    filtered, _ = await cache.get_or_create("filtered")
    filtered.get(SESSION_NAMESPACE, SessionState).document_filter = ["Lumen"]
    filtered.mark_changed(SESSION_NAMESPACE)
    now[0] = 61  # both idle past the TTL: the next access evicts them
    await cache.get_or_create("other")
    await cache.settle()
    assert "filtered" not in cache and "seed" not in cache
    assert saves == ["filtered"]  # "seed" was only read
    for thread in ("a", "b", "c"):
        ctx, _ = await cache.get_or_create(thread)
        ctx.get_or_create("counter", Counter).thread = thread
        ctx.mark_changed("counter")
    await cache.settle()  # over capacity: the oldest saved as they go
    await cache.close()
    assert sorted(saves) == ["a", "b", "c", "filtered"]

    fresh = ToolContextCache(store, prepare=prepare)
    ctx, is_new = await fresh.get_or_create("filtered")
    assert not is_new and ctx.get(SESSION_NAMESPACE, SessionState).document_filter == ["Lumen"]
    for thread in ("a", "b", "c"):
        ctx, _ = await fresh.get_or_create(thread)
        assert ctx.get_or_create("counter", Counter).thread == thread
    await fresh.close()


async def test_locked_entries_are_not_evicted(store: ThreadStore) -> None:
    now = [0.0]
    cache = ToolContextCache(store, ttl_seconds=1, clock=lambda: now[0])
    async with cache.transaction("busy"):
        now[0] = 100
        assert await cache.evict_idle() == 0
        assert "busy" in cache


async def test_eviction_cancels_background_tasks(store: ThreadStore) -> None:
    cache = ToolContextCache(store)
    entry = await cache.get_entry("t")
    task = asyncio.create_task(asyncio.sleep(60))
    entry.track(task)
    assert await cache.evict("t")
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_small_and_large_records_load_back_exactly(store: ThreadStore) -> None:
    """SQLite reads small rows on the loop and large ones in a thread: both must load the same."""
    assert await store.load("missing") is None
    for tid, size in [("small", 10), ("large", 300_000)]:
        record = ThreadRecord(tid, owner="alice", state={"ns": {"text": "x" * size}}, extras={"k": [1, 2]})
        saved = await store.save(record)
        loaded = await store.load(tid)
        assert loaded is not None
        assert (loaded.owner, loaded.version, loaded.state, loaded.extras) == (
            "alice",
            saved.version,
            record.state,
            record.extras,
        )


async def test_version_conflicts_are_detected(store: ThreadStore) -> None:
    record = await store.save(ThreadRecord("t", owner="alice"))
    assert record.version == 1
    await store.save(record)
    with pytest.raises(VersionConflictError):
        await store.save(record)  # stale version
    with pytest.raises(VersionConflictError):
        await store.save(ThreadRecord("t"))  # "new" thread that already exists


async def test_list_threads_by_owner(store: ThreadStore) -> None:
    for tid, owner in [("a", "alice"), ("b", "bob"), ("c", "alice")]:
        await store.save(ThreadRecord(tid, owner=owner, title=f"title {tid}"))
    listed = await store.list_threads("alice")
    assert [t.thread_id for t in listed] == ["c", "a"]
    assert listed[0].title == "title c"
    assert await store.list_threads("carol") == []
    assert await store.delete("a")
    assert not await store.delete("a")


async def test_thread_listings_page_through_every_thread_once(store: ThreadStore) -> None:
    for n in range(7):
        await store.save(ThreadRecord(f"t{n}", owner="alice"))
    await store.save(ThreadRecord("other", owner="bob"))
    newest_first = [t.thread_id for t in await store.list_threads("alice", limit=100)]
    assert newest_first == [f"t{n}" for n in reversed(range(7))]
    pages, after = [], None
    while True:
        page = await store.list_threads("alice", limit=3, after=after)
        pages.append([t.thread_id for t in page])
        if len(page) < 3:
            break
        after = page[-1].position
    assert pages == [["t6", "t5", "t4"], ["t3", "t2", "t1"], ["t0"]]
    # a position between two lines (an update time with no thread at it) pages from there too
    middle = (await store.list_threads("alice", limit=7))[3]
    assert [t.thread_id for t in await store.list_threads("alice", after=(middle.updated_at, "~"))] == [
        "t3",
        "t2",
        "t1",
        "t0",
    ]
    assert [t.thread_id for t in await store.list_threads("alice", after=middle.position)] == [
        "t2",
        "t1",
        "t0",
    ]


async def test_two_caches_on_one_sqlite_file_serialise_updates(tmp_path: Path) -> None:
    path = tmp_path / "threads.sqlite3"
    one, two = ToolContextCache(SQLiteThreadStore(path)), ToolContextCache(SQLiteThreadStore(path))
    for _ in range(3):
        for cache in (one, two):
            async with cache.transaction("shared") as entry:
                entry.context.get_or_create("counter", Counter).hits += 1
    ctx, _ = await ToolContextCache(SQLiteThreadStore(path)).get_or_create("shared")
    assert ctx.get_or_create("counter", Counter).hits == 6


async def test_state_survives_a_restart_in_a_fresh_process(tmp_path: Path) -> None:
    path = tmp_path / "threads.sqlite3"
    cache = ToolContextCache(SQLiteThreadStore(path), prepare=prepare)
    async with cache.transaction("t") as entry:
        session = entry.context.get(SESSION_NAMESPACE, SessionState)
        session.document_filter = ["guide"]
        for chunk in ["a", "b"]:
            session.cite(chunk_id=chunk, document_id="d", title="T", uri="u", text=chunk)
    await cache.close()

    again = ToolContextCache(SQLiteThreadStore(path), prepare=prepare)
    ctx, is_new = await again.get_or_create("t")
    assert not is_new
    assert (
        ctx.get(SESSION_NAMESPACE, SessionState).cite(
            chunk_id="b", document_id="d", title="T", uri="u", text="b"
        )
        == 2
    )

    script = (
        "import asyncio, json, sys\n"
        "from rag_tools.state import SQLiteThreadStore, ToolContextCache, prepare_context, SESSION_NAMESPACE, SessionState\n"
        "async def main():\n"
        "    cache = ToolContextCache(SQLiteThreadStore(sys.argv[1]), prepare=lambda c: prepare_context(c, ['search']))\n"
        "    ctx, new = await cache.get_or_create('t')\n"
        "    s = ctx.get(SESSION_NAMESPACE, SessionState)\n"
        "    print(json.dumps({'new': new, 'filter': s.document_filter, 'registry': s.citation_registry}))\n"
        "asyncio.run(main())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert json.loads(out.stdout) == {"new": False, "filter": ["guide"], "registry": {"a": 1, "b": 2}}


class ReadOnlySQLiteStore(SQLiteThreadStore):
    """The store as it is when the data directory cannot be written (root ignores chmod here)."""

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = sqlite3.connect(
                f"file:{self.path}?mode=ro", uri=True, check_same_thread=False, isolation_level=None
            )
        return self._conn


async def test_read_only_store_is_a_clear_error_and_keeps_the_last_state(tmp_path: Path) -> None:
    path = tmp_path / "threads.sqlite3"
    store = SQLiteThreadStore(path)
    await store.save(ThreadRecord("t", state={"ns": {"v": 1}}))
    await store.close()
    cache = ToolContextCache(ReadOnlySQLiteStore(path))
    with pytest.raises(StoreError, match="readonly"):
        async with cache.transaction("t") as entry:
            entry.context.get_or_create("counter", Counter).hits = 1
    record = await SQLiteThreadStore(path).load("t")
    assert record is not None
    assert (record.version, record.state) == (1, {"ns": {"v": 1}})
