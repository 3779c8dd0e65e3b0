"""Jobs a client finds again and stops, and syncs that run on a schedule, on every job backend:
the embedded runner (SQLite), SAQ on PostgreSQL and SAQ on Redis.

- ``GET /documents/jobs`` lists the caller's jobs newest first, page by page; another principal's
  jobs are never listed (nor readable, nor cancellable).
- ``DELETE /documents/jobs/{id}`` ends a queued job at once and stops a running one between two
  files: the job ends ``cancelled`` with the outcomes of what it did, and every file is in the
  knowledge base whole or not at all.
- ``RAGSTREAM_SYNC`` runs a sync of a folder as a job of its owner, with one outcome per file,
  again every interval; across processes a source is synced by one job at a time.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from rag_tools.kb import KnowledgeBase
from ragstream.config import SyncEntry
from ragstream.jobs import IngestJob, SaqIngestJobs, SyncScheduler, open_ingest_jobs
from ragstream.jobs.models import sync_lease
from tests.conftest import scenario_app
from tests.servers import serve

pytestmark = pytest.mark.timeout(600)

TOKENS = {name: SecretStr(f"{name}-token") for name in ("alice", "bob", "carol")}


def as_(name: str) -> dict[str, dict[str, str]]:
    return {"headers": {"Authorization": f"Bearer {name}-token"}}


ALICE, BOB, CAROL = as_("alice"), as_("bob"), as_("carol")


def big_markdown(name: str, sections: int = 120) -> tuple[str, bytes, str]:
    """A file of ``sections`` chunks: long enough to be caught while it is embedded."""
    body = "\n\n".join(
        f"## {name} part {i}\n\n" + f"The {name} register, part {i}, lists the shelf of volume {i}. " * 8
        for i in range(sections)
    )
    return f"{name}.md", f"# {name}\n\n{body}".encode(), "text/markdown"


def small(name: str, text: str) -> tuple[str, bytes, str]:
    return f"{name}.md", f"# {name}\n\n{text}".encode(), "text/markdown"


def on_backend(request: pytest.FixtureRequest, scenario_config: Any, kind: str) -> Any:
    """The scenario configuration on one job backend, with alice and bob as editors."""
    if kind == "postgres":
        scenario_config.database_url = request.getfixturevalue("postgres_url")
    elif kind == "redis":
        scenario_config.redis_url = request.getfixturevalue("redis_url")
        scenario_config.redis_prefix = f"jobctl-{uuid.uuid4().hex[:8]}:"
    scenario_config.job_heartbeat_seconds = 1
    scenario_config.tokens = TOKENS
    scenario_config.editors = ["alice", "bob"]
    return scenario_config


@pytest.fixture(params=["local", "postgres", "redis"])
def backend(request: pytest.FixtureRequest, scenario_config: Any) -> Any:
    return on_backend(request, scenario_config, request.param)


@pytest.fixture(params=["postgres", "redis"])
def shared_backend(request: pytest.FixtureRequest, scenario_config: Any) -> Any:
    """A backend several hosts share."""
    return on_backend(request, scenario_config, request.param)


@asynccontextmanager
async def server(config: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with serve(scenario_app(config)) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        yield client


async def upload(client: httpx.AsyncClient, who: dict[str, Any], *files: tuple[str, bytes, str]) -> str:
    response = await client.post("/documents", files=[("file", f) for f in files], **who)
    assert response.status_code == 202, response.text
    return str(response.json()["jobId"])


async def record(client: httpx.AsyncClient, job_id: str, who: dict[str, Any]) -> dict[str, Any]:
    response = await client.get(f"/documents/jobs/{job_id}", **who)
    assert response.status_code == 200, response.text
    return dict(response.json())


async def ended(
    client: httpx.AsyncClient, job_id: str, who: dict[str, Any], deadline: float = 120
) -> dict[str, Any]:
    for _ in range(int(deadline / 0.1)):
        job = await record(client, job_id, who)
        if job["state"] in ("done", "failed", "cancelled"):
            return job
        await asyncio.sleep(0.1)
    raise AssertionError(f"job {job_id} did not end: {job}")


async def whole_or_absent(config: Any, names: list[str]) -> dict[str, bool]:
    """For each uri: listed with every chunk of its published version, or not listed at all; and
    no chunk anywhere that its document does not list (nothing half-written)."""
    async with KnowledgeBase.from_config(config) as kb:
        listing = {d.uri: d for d in (await kb.list_documents(page_size=500)).documents}
        present = {}
        for name in names:
            doc = listing.get(name)
            if doc is not None:
                assert len(await kb.get_chunks(doc.document_id)) == doc.chunk_count > 0
            present[name] = doc is not None
        assert await kb.count_chunks() == sum(d.chunk_count for d in listing.values())
    return present


async def test_listing_is_newest_first_paged_and_the_callers_own(backend: Any) -> None:
    async with server(backend) as client:
        mine = [await upload(client, ALICE, small(f"alice-{i}", f"Note {i} of alice.")) for i in range(5)]
        theirs = [await upload(client, BOB, small(f"bob-{i}", f"Note {i} of bob.")) for i in range(2)]

        pages, cursor = [], None
        while True:
            params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
            response = await client.get("/documents/jobs", params=params, **ALICE)
            assert response.status_code == 200, response.text
            body = response.json()
            pages.append([job["id"] for job in body["jobs"]])
            cursor = body["next"]
            if cursor is None:
                break
        assert pages == [mine[4:2:-1], mine[2:0:-1], mine[:1]]
        first = (await client.get("/documents/jobs", **ALICE)).json()
        assert [j["id"] for j in first["jobs"]] == mine[::-1] and first["next"] is None
        assert first["jobs"][0]["files"][0]["name"] == "alice-4.md" and first["jobs"][0]["kind"] == "upload"
        assert "owner" not in first["jobs"][0] and "target" not in first["jobs"][0]

        bobs = (await client.get("/documents/jobs", **BOB)).json()
        assert [j["id"] for j in bobs["jobs"]] == theirs[::-1]
        assert (await client.get("/documents/jobs", **CAROL)).json() == {"jobs": [], "next": None}
        # another principal's job does not exist: not readable, not cancellable
        assert (await client.get(f"/documents/jobs/{mine[0]}", **BOB)).status_code == 404
        assert (await client.delete(f"/documents/jobs/{mine[0]}", **BOB)).status_code == 404
        # bad paging is a clear 422
        bad = await client.get("/documents/jobs", params={"cursor": "not-a-cursor"}, **ALICE)
        assert bad.status_code == 422 and "cursor" in bad.json()["error"]["message"]
        assert (await client.get("/documents/jobs", params={"limit": 0}, **ALICE)).status_code == 422
        assert (await client.get("/documents/jobs")).status_code == 401

        for job_id in mine:
            assert (await ended(client, job_id, ALICE))["state"] == "done"
        done = await client.delete(f"/documents/jobs/{mine[0]}", **ALICE)
        assert done.status_code == 409 and "already ended (done)" in done.json()["error"]["message"]


async def test_cancel_a_queued_and_a_running_job(backend: Any) -> None:
    files = [big_markdown(name) for name in ("ledger", "almanac", "gazette")]
    async with server(backend) as client:
        running = await upload(client, ALICE, *files)
        queued = await upload(client, ALICE, small("waiting", "The waiting note mentions the okapi."))
        for _ in range(600):  # one job at a time per worker: the second waits behind the first
            job = await record(client, running, ALICE)
            if job["state"] == "running" and job["progress"]["chunksDone"] > 0:
                break
            await asyncio.sleep(0.05)
        assert (await record(client, queued, ALICE))["state"] == "queued"

        cancelled = await client.delete(f"/documents/jobs/{queued}", **ALICE)
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["state"] == "cancelled"
        assert [f["status"] for f in cancelled.json()["files"]] == ["cancelled"]

        stopping = await client.delete(f"/documents/jobs/{running}", **ALICE)
        assert stopping.status_code == 202, stopping.text
        job = await ended(client, running, ALICE)
        assert job["state"] == "cancelled", job
        statuses = [f["status"] for f in job["files"]]
        assert "cancelled" in statuses and set(statuses) <= {"added", "cancelled"}
        assert statuses == sorted(statuses)  # files done before the cancel, then the rest

        await asyncio.sleep(2)  # a worker free again takes the queued job: it stays cancelled
        assert (await record(client, queued, ALICE))["state"] == "cancelled"
        listing = (await client.get("/documents/jobs", **ALICE)).json()["jobs"]
        assert [(j["id"], j["state"]) for j in listing] == [(queued, "cancelled"), (running, "cancelled")]
    present = await whole_or_absent(backend, [name for name, _, _ in files] + ["waiting.md"])
    assert present == {
        name: status == "added" for (name, _, _), status in zip(files, statuses, strict=False)
    } | {"waiting.md": False}


async def test_a_scheduled_sync_runs_as_a_job_with_per_file_outcomes(backend: Any, tmp_path: Path) -> None:
    shared = tmp_path / "team-share"
    (shared / "guides").mkdir(parents=True)
    (shared / "backups.md").write_text("# Backups\n\nNightly backups are kept for 35 days.")
    (shared / "guides" / "ports.md").write_text("# Ports\n\nThe gateway listens on port 7443.")
    (shared / "old.md").write_text("# Old\n\nThe old intranet retires in March.")
    (shared / "broken.pdf").write_bytes(b"%PDF-1.4 not really")
    backend.sync = [SyncEntry(source=str(shared), interval_seconds=10, owner="alice")]

    async def next_sync(client: httpx.AsyncClient, after: set[str]) -> dict[str, Any]:
        for _ in range(600):
            jobs = (await client.get("/documents/jobs", **ALICE)).json()["jobs"]
            # the oldest sync not in ``after`` (the listing is newest first): on a slow machine
            # the one after it may have run too before this looks
            fresh = [j for j in jobs if j["kind"] == "sync" and j["id"] not in after]
            if fresh and fresh[-1]["state"] in ("done", "failed", "cancelled"):
                return dict(fresh[-1])
            await asyncio.sleep(0.1)
        raise AssertionError("no sync job ran")

    async def first_change(client: httpx.AsyncClient, since: str) -> dict[str, Any]:
        """The oldest sync after ``since`` that changed anything; those before it changed nothing."""
        for _ in range(600):
            jobs = (await client.get("/documents/jobs", params={"limit": 100}, **ALICE)).json()["jobs"]
            syncs = [j for j in reversed(jobs) if j["kind"] == "sync"]  # oldest first
            for job in syncs[[j["id"] for j in syncs].index(since) + 1 :]:
                if job["state"] not in ("done", "failed", "cancelled"):
                    break
                if any(f["status"] not in ("unchanged", "error") for f in job["files"]):
                    return dict(job)
            await asyncio.sleep(0.1)
        raise AssertionError("no sync picked up the change")

    app = scenario_app(backend)
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        first = await next_sync(client, set())
        assert first["state"] == "done" and first["source"] == "team-share"
        outcomes = {f["name"]: f["status"] for f in first["files"]}
        assert outcomes == {
            "backups.md": "added",
            "broken.pdf": "error",
            "guides/ports.md": "added",
            "old.md": "added",
        }
        assert first["progress"]["filesDone"] == first["progress"]["filesTotal"] == 4
        assert (await record(client, first["id"], ALICE)) == first  # the same record as every job
        assert (await client.get("/documents/jobs", **BOB)).json()["jobs"] == []  # alice's, not bob's

        # the schedule does not wait for this test: the three changes are made while the test holds
        # the source as a sync would (none is reading the folder then; one that starts fails), so a
        # sync sees all of them or none; the first that sees them picks them up, once
        leases, lease = app.state.services.jobs.leases, sync_lease(str(shared))
        while not await leases.acquire(lease, "the-test", 60):
            await asyncio.sleep(0.05)
        (shared / "guides" / "ports.md").write_text("# Ports\n\nThe gateway moved to port 9443.")
        (shared / "old.md").unlink()
        (shared / "new.md").write_text("# New\n\nThe numbat is the mascot.")
        await leases.release(lease, "the-test")
        second = await first_change(client, first["id"])
        assert {f["name"]: f["status"] for f in second["files"]} == {
            "backups.md": "unchanged",
            "broken.pdf": "error",
            "guides/ports.md": "updated",
            "new.md": "added",
            "old.md": "deleted",
        }
        listing = (await client.get("/documents", params={"page_size": 500}, **BOB)).json()["documents"]
        uris = {d["uri"] for d in listing}
        assert {"backups.md", "guides/ports.md", "new.md"} <= uris and "old.md" not in uris


async def test_one_sync_per_source_across_hosts(shared_backend: Any, tmp_path: Path) -> None:
    backend = shared_backend
    shared = tmp_path / "share"
    shared.mkdir()
    (shared / "a.md").write_text("# A\n\nThe aardvark note.")
    entry = SyncEntry(source=str(shared), interval_seconds=60, owner="alice")
    kb = KnowledgeBase.from_config(backend)
    hosts = [open_ingest_jobs(backend, kb) for _ in range(2)]  # two hosts that queue but do not work
    try:
        for jobs in hosts:
            assert isinstance(jobs, SaqIngestJobs)
            await jobs.connect()
        schedules = [SyncScheduler(jobs, [entry]) for jobs in hosts]
        now = 1_000_000 * 60.0
        queued = [job for jobs in await asyncio.gather(*(s.tick(now) for s in schedules)) for job in jobs]
        assert len(queued) == 1  # both saw the slot begin; one queued its job
        # the next slot: the job is still queued, so none is added
        assert [await s.tick(now + 60) for s in schedules] == [[], []]

        # a worker that finds the source held by another sync ends the job without syncing
        name = sync_lease(str(shared))
        assert await hosts[0].leases.acquire(name, "elsewhere", 60)
        async with server(backend) as client:
            job = await ended(client, queued[0].id, ALICE)
            assert job["state"] == "failed" and "is running (job elsewhere)" in job["error"], job
            assert [await s.tick(now + 120) for s in schedules] == [[], []]  # held: nothing queued
            await hosts[0].leases.release(name, "elsewhere")
            later = [
                job for jobs in await asyncio.gather(*(s.tick(now + 180) for s in schedules)) for job in jobs
            ]
            assert len(later) == 1
            job = await ended(client, later[0].id, ALICE)
            assert job["state"] == "done" and [f["status"] for f in job["files"]] == ["added"]
    finally:
        for jobs in hosts:
            await jobs.close()
        kb.close()


async def test_a_cancel_reaches_a_job_no_worker_has_taken_yet(backend: Any) -> None:
    """Queued with no worker anywhere: cancelled at once for every reader; the worker that takes it
    later only records that, and ingests nothing."""
    kb = KnowledgeBase.from_config(backend)
    jobs = open_ingest_jobs(backend, kb)
    if isinstance(jobs, SaqIngestJobs):
        await jobs.connect()
    try:
        job = IngestJob.new(uuid.uuid4().hex, "alice", ["never.md"])
        await jobs.submit(job, {0: b"# Never\n\nThe never note names the quagga."})
        cancelled = await jobs.cancel(job.id)
        assert cancelled is not None and cancelled.state == "cancelled"
        assert [f.status for f in cancelled.files] == ["cancelled"]
        page = await jobs.list("alice", limit=10)
        assert [(j.id, j.state) for j in page.jobs] == [(job.id, "cancelled")]
    finally:
        await jobs.close()
        kb.close()
    async with server(backend) as client:
        await asyncio.sleep(2)
        assert (await record(client, job.id, ALICE))["state"] == "cancelled"
        assert (await client.delete(f"/documents/jobs/{job.id}", **ALICE)).status_code == 409
    assert await whole_or_absent(backend, ["never.md"]) == {"never.md": False}


def test_the_sync_setting_is_checked_at_start() -> None:
    from pydantic import ValidationError

    from ragstream.config import AppConfig

    tokens = {"alice": "token-a"}
    with pytest.raises(ValidationError, match="needs an owner with a token"):
        AppConfig(tokens=tokens, sync=[{"source": "s3://kb/docs"}])
    with pytest.raises(ValidationError, match="needs an owner with a token"):
        AppConfig(tokens=tokens, sync=[{"source": "s3://kb/docs", "owner": "mallory"}])
    with pytest.raises(ValidationError, match="a folder or s3://bucket/prefix"):
        AppConfig(sync=[{"source": "ftp://example.org/docs"}])
    with pytest.raises(ValidationError, match="name a bucket"):  # refused at start, not at every tick
        AppConfig(sync=[{"source": "s3:///docs"}])
    with pytest.raises(ValidationError, match="names a source twice"):
        AppConfig(sync=[{"source": "/srv/a"}, {"source": "/srv/a", "interval_seconds": 60}])
    with pytest.raises(ValidationError, match="greater than or equal to 10"):
        AppConfig(sync=[{"source": "/srv/a", "interval_seconds": 1}])
    assert (
        AppConfig(tokens=tokens, sync=[{"source": "s3://kb/docs", "owner": "alice"}]).sync[0].owner == "alice"
    )
