"""Originals (and chunks) of documents that were never published are swept, once old enough.

The crash is real: the knowledge base lives on moto's S3 server behind a proxy that goes away after
the n-th write of an upload's ingest (tests/s3_helpers.py), for n = 1, 2, ... until the store stops
between writing the original and publishing the document row. An in-flight ingest looks exactly
like that, which is why the sweep keeps rows younger than its age floor.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import lancedb
import pytest

from rag_tools.kb import KnowledgeBase, KnowledgeBaseUnavailable, document_id_for
from ragstream.app import create_app
from ragstream.config import AppConfig
from tests.s3_helpers import S3Location, StoreProxy
from tests.servers import serve

pytestmark = pytest.mark.timeout(600)

KEEPER = b"# Keeper\n\nThe keeper document stays published through every sweep."
LOST = b"# Lost\n\nThe lost upload was written but never published: " + b"wombat " * 300


async def rows(location: S3Location, table: str, document_id: str) -> int:
    """Rows of ``document_id`` in one of the knowledge base's tables, read with LanceDB directly."""
    db = await lancedb.connect_async(location.uri, storage_options=location.storage_options)
    try:
        if table not in (await db.list_tables()).tables:
            return 0
        opened = await db.open_table(table)
        try:
            return await opened.count_rows(f"document_id = '{document_id}'")
        finally:
            opened.close()
    finally:
        db.close()


async def crash_between_original_and_publication(location: S3Location, proxy: StoreProxy) -> str:
    """Upload ``lost.md`` through a store that goes away after 1, 2, ... writes, until it went
    away after the original and the chunks were written but before the document row; its id."""
    options = {**location.via(proxy.url).storage_options, "client_max_retries": "0"}
    async with KnowledgeBase(location.uri, storage_options=options) as kb:
        assert (await kb.ingest_bytes(KEEPER, name="keeper.md")).status == "added"
        await kb.ingest_bytes(b"# Warm\n\nEvery table exists now.", name="warm.md")
    lost = document_id_for("upload://lost.md")
    for cut in range(1, 40):
        proxy.cut_after_writes(cut)
        with pytest.raises(KnowledgeBaseUnavailable):
            async with KnowledgeBase(location.uri, storage_options=options) as kb:
                await kb.ingest_bytes(LOST, name="lost.md")
        proxy.restore()
        assert await rows(location, "documents", lost) == 0, f"published although the store went away ({cut})"
        if await rows(location, "files", lost) and await rows(location, "chunks", lost):
            return lost
    raise AssertionError("no cut left the original and chunks without their document")


async def test_an_unpublished_original_is_swept_once_older_than_the_floor(
    s3_location: S3Location, proxy: StoreProxy
) -> None:
    lost = await crash_between_original_and_publication(s3_location, proxy)
    async with KnowledgeBase(s3_location.uri, storage_options=s3_location.storage_options) as kb:
        keeper = await kb.get_document("keeper.md")
        assert keeper is not None and await kb.get_document("lost.md") is None  # invisible, but stored
        assert await kb.sweep_orphans(min_age_seconds=3600) == []  # young: as an ingest in flight
        assert await rows(s3_location, "files", lost) == 1
        assert await rows(s3_location, "chunks", lost) > 0

        await asyncio.sleep(1.1)
        assert await kb.sweep_orphans(min_age_seconds=1) == [lost]
        assert await rows(s3_location, "files", lost) == 0
        assert await rows(s3_location, "chunks", lost) == 0
        # the published documents are whole: listed, searchable, with their originals
        assert sorted(d.uri for d in (await kb.list_documents()).documents) == ["keeper.md", "warm.md"]
        original = await kb.get_document_file(keeper.document_id)
        assert original is not None and original.data == KEEPER
        assert len(await kb.get_chunks(keeper.document_id)) == keeper.chunk_count
        assert await kb.count_chunks() == sum(d.chunk_count for d in (await kb.list_documents()).documents)
        assert await kb.sweep_orphans(min_age_seconds=0) == []

        # uploading it again publishes it whole
        assert (await kb.ingest_bytes(LOST, name="lost.md")).status == "added"
        assert await kb.sweep_orphans(min_age_seconds=0) == []
        assert await rows(s3_location, "files", lost) == 1


def server_config(location: S3Location, tmp_path: Path, **settings: Any) -> AppConfig:
    """A server on the knowledge base at ``location`` that sweeps what is older than a second."""
    return AppConfig(
        data_dir=tmp_path / "data",
        kb_uri=location.uri,
        kb_storage_options=location.storage_options,
        orphan_min_age_seconds=1,
        **settings,
    )


async def wait_swept(location: S3Location, document_id: str) -> None:
    """Until the document's original is gone (at most 20 s)."""
    for _ in range(200):
        if await rows(location, "files", document_id) == 0:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the server did not sweep the unpublished original")


async def test_the_server_sweeps_at_start(s3_location: S3Location, proxy: StoreProxy, tmp_path: Path) -> None:
    lost = await crash_between_original_and_publication(s3_location, proxy)
    await asyncio.sleep(1.1)
    config = server_config(s3_location, tmp_path)
    async with serve(create_app(config)) as url, httpx.AsyncClient(base_url=url) as client:
        await wait_swept(s3_location, lost)
        listing = (await client.get("/documents")).json()["documents"]
        assert sorted(d["uri"] for d in listing) == ["keeper.md", "warm.md"]


async def test_one_worker_sweeps_per_round(
    s3_location: S3Location, proxy: StoreProxy, tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """Workers sharing a Redis take the round's sweep lease: while another worker holds it, a
    starting server leaves the knowledge base alone; once it is free, the next server sweeps."""
    from ragstream.runs.redis import RedisRunLocks, redis_client
    from ragstream.services import ORPHAN_SWEEP_LEASE

    lost = await crash_between_original_and_publication(s3_location, proxy)
    await asyncio.sleep(1.1)
    config = server_config(s3_location, tmp_path, redis_url=redis_url, redis_prefix=redis_prefix)
    client = redis_client(redis_url)
    leases = RedisRunLocks(client, redis_prefix)
    try:
        assert await leases.acquire(ORPHAN_SWEEP_LEASE, "another-worker", 60)
        async with serve(create_app(config)) as url, httpx.AsyncClient(base_url=url) as http:
            assert (await http.get("/health")).status_code == 200
            await asyncio.sleep(2.0)  # the start's round has been and gone
            assert await rows(s3_location, "files", lost) == 1  # the other worker's round: left alone
        await leases.release(ORPHAN_SWEEP_LEASE, "another-worker")
        async with serve(create_app(config)):
            await wait_swept(s3_location, lost)
        assert await leases.holder(ORPHAN_SWEEP_LEASE) is not None  # held for the rest of the round
    finally:
        await client.aclose()


def test_a_lease_is_never_a_thread() -> None:
    """Lease names (a locked tool, a sync source, the sweep) are not valid thread ids, so no thread
    can share a lock with one."""
    from ragstream.runs import lease_name
    from ragstream.services import ORPHAN_SWEEP_LEASE
    from ragstream.validation import InvalidRequest, check_id

    assert check_id("tool:search", "threadId") == "tool:search"  # a thread may be named like this
    for name in (lease_name("tool", "search"), ORPHAN_SWEEP_LEASE):
        with pytest.raises(InvalidRequest):
            check_id(name, "threadId")
