"""What stops ``ragstream serve`` at start is one line, before any worker: a data directory that
cannot be written or created, a PostgreSQL database that does not exist, and a thread store whose
schema stamp is newer than this code (SQLite, Redis, PostgreSQL). Every store carries the stamp
and an older or unstamped one is brought forward on open (the upgrade rule, CHANGELOG.md)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
import redis as sync_redis

from rag_tools.state import SchemaVersionError, SQLiteThreadStore, ThreadRecord
from rag_tools.state.postgres_store import PostgresThreadStore
from rag_tools.state.redis_store import REDIS_SCHEMA_VERSION, RedisThreadStore
from rag_tools.state.store import SQLITE_SCHEMA_VERSION

from .servers import RAGSTREAM, ROOT, free_port


def _serve(*args: str, data: Path, wrap: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    """``ragstream serve`` that is expected to stop at start (a hang guard, not a timing)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAGSTREAM_TOOL_DIRS": "[]"}
    argv = [*RAGSTREAM, "serve", "--port", str(free_port()), "--data-dir", str(data), *args]
    return subprocess.run(
        [*(wrap or []), *argv], env=env, cwd=ROOT, capture_output=True, text=True, timeout=180
    )


def _one_line(done: subprocess.CompletedProcess[str], *fragments: str) -> str:
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("ragstream: ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.mark.skipif(shutil.which("unshare") is None, reason="util-linux unshare mounts the read-only folder")
def test_a_read_only_data_directory_is_one_line(tmp_path: Path) -> None:
    """As a read-only volume: the folder mounted read-only in a mount namespace of the server's own."""
    data = tmp_path / "data"
    data.mkdir()
    mount = f'mount --bind {data} {data} && mount -o remount,bind,ro {data} && exec "$@"'
    done = _serve(data=data, wrap=["unshare", "--mount", "sh", "-c", mount, "sh"])
    _one_line(
        done, f"the data directory {data} cannot be written", "Read-only file system", "RAGSTREAM_DATA_DIR"
    )


def test_a_data_directory_that_cannot_be_created_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    data = tmp_path / "a-file" / "data"
    _one_line(_serve(data=data), f"the data directory {data} cannot be written", "Not a directory")


def test_a_missing_data_directory_is_created(tmp_path: Path) -> None:
    from ragstream.commands import data_dir_problem
    from ragstream.config import AppConfig

    data = tmp_path / "new" / "data"
    assert data_dir_problem(AppConfig(data_dir=data)) is None
    assert data.is_dir()


async def test_the_sqlite_store_is_stamped_and_refuses_a_newer_stamp(tmp_path: Path) -> None:
    path = tmp_path / "threads.sqlite3"
    unstamped = sqlite3.connect(path)  # a file of ragstream 0.1.0: the tables, no stamp
    unstamped.executescript(
        "CREATE TABLE threads (thread_id TEXT PRIMARY KEY, owner TEXT, title TEXT, version INTEGER NOT NULL,"
        " updated_at REAL NOT NULL, state BLOB NOT NULL, extras BLOB NOT NULL);"
        "INSERT INTO threads VALUES ('t', 'alice', 'old', 1, 1.0, X'7B7D', X'7B7D');"
    )
    unstamped.commit()
    unstamped.close()
    store = SQLiteThreadStore(path)
    await store.open()
    loaded = await store.load("t")
    assert loaded is not None and loaded.owner == "alice"
    await store.save(ThreadRecord("u", owner="bob"))
    await store.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone() == (SQLITE_SCHEMA_VERSION,)

    newer = sqlite3.connect(path)
    newer.execute(f"PRAGMA user_version = {SQLITE_SCHEMA_VERSION + 1}")
    newer.close()
    refused = SQLiteThreadStore(path)
    with pytest.raises(SchemaVersionError, match=r"schema version 2, newer than this ragstream writes \(1\)"):
        await refused.open()
    with pytest.raises(SchemaVersionError):
        await refused.load("t")  # every use refuses: nothing is read or written
    assert sqlite3.connect(path).execute("SELECT count(*) FROM threads").fetchone() == (2,)

    data = tmp_path
    _one_line(
        _serve(data=data), f"the thread store {path} has ragstream schema version 2", "upgrade ragstream"
    )


async def test_the_redis_store_is_stamped_and_refuses_a_newer_stamp(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    client = sync_redis.Redis.from_url(redis_url)
    try:
        store = RedisThreadStore(redis_url, prefix=redis_prefix)
        await store.save(ThreadRecord("t", owner="alice"))  # first use stamps it
        assert client.get(f"{redis_prefix}schema") == str(REDIS_SCHEMA_VERSION).encode()
        await store.redis.aclose()

        client.set(f"{redis_prefix}schema", REDIS_SCHEMA_VERSION + 1)
        refused = RedisThreadStore(redis_url, prefix=redis_prefix)
        with pytest.raises(SchemaVersionError, match="the Redis thread store"):
            await refused.load("t")
        await refused.redis.aclose()
        env_prefix = {"RAGSTREAM_REDIS_PREFIX": redis_prefix}
        os.environ.update(env_prefix)
        try:
            done = _serve("--redis-url", redis_url, data=tmp_path)
        finally:
            os.environ.pop("RAGSTREAM_REDIS_PREFIX")
        _one_line(done, "the Redis thread store", "schema version 2", "upgrade ragstream")
    finally:
        for key in client.scan_iter(f"{redis_prefix}*"):
            client.delete(key)
        client.close()


async def test_a_newer_postgres_schema_is_one_line_at_start(postgres_url: str, tmp_path: Path) -> None:
    store = PostgresThreadStore(postgres_url)
    await store.open()
    await store.close()
    import asyncpg

    conn = await asyncpg.connect(postgres_url)
    await conn.execute("UPDATE ragstream_schema SET version = version + 1")
    await conn.close()
    _one_line(
        _serve("--database-url", postgres_url, data=tmp_path),
        "the PostgreSQL database",
        "schema version 2, newer than this ragstream writes (1)",
    )


def test_a_missing_postgres_database_is_one_line_at_start(postgres_server: str, tmp_path: Path) -> None:
    url = f"{postgres_server}/ragstream_no_such_database"
    line = _one_line(
        _serve("--database-url", url, data=tmp_path),
        "the PostgreSQL database 'ragstream_no_such_database'",
        "does not exist",
        "RAGSTREAM_DATABASE_URL",
    )
    assert "@" not in line.split("does not exist")[0]  # no credentials in the line
