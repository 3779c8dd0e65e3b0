"""Ingestion jobs survive their worker: a job caught running by a crash is retried, or failed once
its attempts are spent, and never leaves a file half-ingested.

SAQ backends (PostgreSQL, Redis): a separate process claims the job exactly as a SAQ worker does
(dequeue, mark active) and is killed; a server started afterwards sweeps the silent job and runs
it again. Embedded backend: the SQLite records a dead process left behind are recovered at start.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from typing import Any

import httpx
import pytest

from rag_tools.kb import KnowledgeBase
from ragstream.jobs import MAX_ATTEMPTS, IngestJob, LocalIngestJobs, SaqIngestJobs, open_ingest_jobs
from ragstream.jobs.models import NOT_INGESTED
from tests.conftest import scenario_app
from tests.servers import serve
from tests.test_documents_api import ZEBRA, finished_job

#: A SAQ worker's claim of a job (``saq.Worker.process``: dequeue, count the attempt, mark it
#: active), after which the process dies without finishing, cleaning up or saying anything.
DYING_WORKER = """
import asyncio, os, sys
from saq import Queue, Status
from saq.utils import now

async def main():
    queue = Queue.from_url(sys.argv[1], name=sys.argv[2])
    await queue.connect()
    job = await queue.dequeue(timeout=20)
    job.started = now()
    job.attempts += 1
    await job.update(status=Status.ACTIVE)
    print("claimed", job.key, flush=True)
    os._exit(9)

asyncio.run(main())
"""


@pytest.fixture(params=["postgres", "redis"])
def saq_config(request: pytest.FixtureRequest, scenario_config: Any) -> Any:
    if request.param == "postgres":
        scenario_config.database_url = request.getfixturevalue("postgres_url")
    else:
        scenario_config.redis_url = request.getfixturevalue("redis_url")
        scenario_config.redis_prefix = f"jobs-{uuid.uuid4().hex[:8]}:"
    scenario_config.job_heartbeat_seconds = 1
    return scenario_config


async def test_a_job_whose_worker_died_is_retried_by_another(saq_config: Any) -> None:
    kb = KnowledgeBase.from_config(saq_config)
    submitter = open_ingest_jobs(saq_config, kb)
    assert isinstance(submitter, SaqIngestJobs)
    await submitter.connect()  # a process that only submits: no worker of its own
    try:
        job = IngestJob.new(uuid.uuid4().hex, "local", [ZEBRA[0]])
        await submitter.submit(job, {0: ZEBRA[1]})
        url = saq_config.database_url or saq_config.redis_url
        dying = subprocess.run(
            [sys.executable, "-c", DYING_WORKER, url, f"{saq_config.redis_prefix}ingest"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert dying.returncode == 9 and f"claimed {job.id}" in dying.stdout, dying.stderr
        caught = await submitter.get(job.id)
        assert caught is not None and caught.state == "running" and caught.attempts == 1

        async with serve(scenario_app(saq_config)) as base, httpx.AsyncClient(base_url=base) as client:
            record = await finished_job(client, job.id)
            assert record["state"] == "done", record
            assert record["attempts"] == 2
            assert [(f["name"], f["status"]) for f in record["files"]] == [("zebra-facts.md", "added")]
            listing = (await client.get("/documents", params={"page_size": 500})).json()["documents"]
            assert [d["uri"] for d in listing].count("zebra-facts.md") == 1
    finally:
        await submitter.close()
        kb.close()


async def test_a_job_whose_workers_keep_dying_fails_after_its_attempts(saq_config: Any) -> None:
    kb = KnowledgeBase.from_config(saq_config)
    jobs = open_ingest_jobs(saq_config, kb)
    assert isinstance(jobs, SaqIngestJobs)
    await jobs.connect()  # no worker here: the test sweeps by hand, as a live worker would
    try:
        job = IngestJob.new(uuid.uuid4().hex, "local", [ZEBRA[0]])
        await jobs.submit(job, {0: ZEBRA[1]})
        url = saq_config.database_url or saq_config.redis_url
        for attempt in range(1, MAX_ATTEMPTS + 1):
            dying = subprocess.run(
                [sys.executable, "-c", DYING_WORKER, url, f"{saq_config.redis_prefix}ingest"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert dying.returncode == 9, dying.stderr
            record = await jobs.get(job.id)
            assert record is not None and record.state == "running" and record.attempts == attempt
            for _ in range(100):  # silent for three heartbeats (3 s here): the sweep takes it
                await jobs.queue.sweep(abort=0.1)
                swept = await jobs.get(job.id)
                if swept is not None and swept.state != "running":
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError(f"the sweep never took the dead worker's job (attempt {attempt})")
        record = await jobs.get(job.id)
        assert record is not None and record.state == "failed", record
        assert record.error is not None and "worker was lost" in record.error
        # the file it never reached reads as not ingested, not as still to come
        assert [(f.status, f.error) for f in record.files] == [("error", NOT_INGESTED)]
        listing = await kb.list_documents(page_size=500)
        assert "zebra-facts.md" not in {d.uri for d in listing.documents}
    finally:
        await jobs.close()
        kb.close()


async def _left_running(path: Any, kb: KnowledgeBase, attempts: int) -> IngestJob:
    """The record a process leaves when it dies during a job: ``running``, first file settled."""
    jobs = LocalIngestJobs(kb, path)
    job = IngestJob.new(uuid.uuid4().hex, "local", ["first.md", ZEBRA[0]])
    await jobs.submit(job, {0: b"# First\n\nThe first file.", 1: ZEBRA[1]})
    outcome = await kb.ingest_bytes(b"# First\n\nThe first file.", name="first.md")
    job.state = "running"
    job.attempts = attempts
    job.files[0].status = outcome.status
    job.files[0].document_id = outcome.document_id
    job.files[0].chunks = outcome.chunks
    await jobs._save(job)  # what run_ingest saved before the process died
    await jobs.close()
    return job


async def test_embedded_restart_retries_a_running_job(scenario_config: Any) -> None:
    path = scenario_config.data_dir / "threads.sqlite3"
    async with KnowledgeBase.from_config(scenario_config) as kb:
        job = await _left_running(path, kb, attempts=1)
    async with serve(scenario_app(scenario_config)) as base, httpx.AsyncClient(base_url=base) as client:
        record = await finished_job(client, job.id)
    assert record["state"] == "done" and record["attempts"] == 2
    # the file settled before the crash keeps its outcome; the other one is ingested now
    assert [(f["name"], f["status"]) for f in record["files"]] == [
        ("first.md", "added"),
        ("zebra-facts.md", "added"),
    ]


async def test_embedded_restart_fails_a_job_out_of_attempts(scenario_config: Any) -> None:
    path = scenario_config.data_dir / "threads.sqlite3"
    async with KnowledgeBase.from_config(scenario_config) as kb:
        job = await _left_running(path, kb, attempts=MAX_ATTEMPTS)
    async with serve(scenario_app(scenario_config)) as base, httpx.AsyncClient(base_url=base) as client:
        record = await finished_job(client, job.id)
        listing = (await client.get("/documents", params={"page_size": 500})).json()["documents"]
    assert record["state"] == "failed" and "worker was lost" in record["error"]
    assert [(f["status"], f["error"]) for f in record["files"]] == [("added", None), ("error", NOT_INGESTED)]
    uris = {d["uri"] for d in listing}
    assert "first.md" in uris and "zebra-facts.md" not in uris  # nothing half-written


async def test_embedded_shutdown_puts_a_running_job_back_without_spending_an_attempt(
    scenario_config: Any,
) -> None:
    """A server stopped gracefully (a deploy, a restart) while a job runs is not a lost worker: the
    job goes back to the queue as it stands, and more restarts than it has attempts do not fail it."""
    path = scenario_config.data_dir / "threads.sqlite3"
    body = "\n\n".join(
        f"## Part {i}\n\n" + f"The register, part {i}, lists volume {i}. " * 8 for i in range(300)
    )
    job = IngestJob.new(uuid.uuid4().hex, "local", ["register.md"])
    async with KnowledgeBase.from_config(scenario_config) as kb:
        for restart in range(MAX_ATTEMPTS + 1):
            jobs = LocalIngestJobs(kb, path)
            await jobs.start()
            if restart == 0:
                await jobs.submit(job, {0: f"# Register\n\n{body}".encode()})
            for _ in range(600):  # caught while it runs
                record = await jobs.get(job.id)
                if record is not None and record.state == "running":
                    break
                await asyncio.sleep(0.01)
            assert record is not None and record.state == "running", record
            await jobs.close()  # what the server's shutdown does
            record = await jobs.get(job.id)
            assert record is not None and record.state == "queued" and record.attempts == 0, record
        jobs = LocalIngestJobs(kb, path)
        await jobs.start()
        try:
            for _ in range(1200):
                record = await jobs.get(job.id)
                if record is not None and record.state not in ("queued", "running"):
                    break
                await asyncio.sleep(0.05)
        finally:
            await jobs.close()
        assert record is not None and record.state == "done" and record.attempts == 1, record
        assert record.files[0].status == "added"
        listing = await kb.list_documents(page_size=500)
        assert "register.md" in {d.uri for d in listing.documents}


async def test_embedded_finished_jobs_expire_while_the_server_runs(
    scenario_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that runs for weeks keeps a day of finished jobs, not every job since it started.

    The embedded runner removed expired jobs only when a process started, so a long-lived one kept
    every job record ever submitted (and answered for them) until its next restart. Here the
    retention is zero: each new submission ends the retention of the jobs finished before it.
    """
    import sqlite3

    import ragstream.jobs.local

    monkeypatch.setattr(ragstream.jobs.local, "KEEP_SECONDS", 0.0)
    uploads = 5
    ids = []
    async with serve(scenario_app(scenario_config)) as base, httpx.AsyncClient(base_url=base) as client:
        for i in range(uploads):
            files = [("file", (f"note-{i}.md", f"# Note {i}\n\nThe {i}th note.".encode(), "text/markdown"))]
            response = await client.post("/documents", files=files)
            assert response.status_code == 202, response.text
            ids.append(response.json()["jobId"])
            assert (await finished_job(client, ids[-1]))["state"] == "done"
        assert (await client.get(f"/documents/jobs/{ids[0]}")).status_code == 404
        listed = (await client.get("/documents/jobs")).json()["jobs"]
        assert [job["id"] for job in listed] == [ids[-1]]
    with sqlite3.connect(scenario_config.data_dir / "threads.sqlite3") as conn:
        rows = conn.execute("SELECT count(*) FROM ragstream_ingest_jobs").fetchone()[0]
    assert rows == 1, f"{rows} job records kept after {uploads} uploads with no retention"
