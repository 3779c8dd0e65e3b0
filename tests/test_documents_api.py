"""The document API as a client sees it: uploads become background jobs, documents are read and
deleted by id, and only editors change the knowledge base.

Runs in the embedded mode (jobs in the SQLite thread database), and against real PostgreSQL and
Redis queues (SAQ) for the same flow.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from fpdf import FPDF
from pydantic import SecretStr

from tests.conftest import scenario_app
from tests.servers import serve

ZEBRA = (
    "zebra-facts.md",
    b"# Zebra facts\n\nZebras sleep standing up for about seven hours.",
    "text/markdown",
)


async def finished_job(client: httpx.AsyncClient, job_id: str, *, deadline: float = 60.0) -> dict[str, Any]:
    """Poll ``GET /documents/jobs/{id}`` until the job is done or failed; its last record."""
    seen: list[str] = []
    for _ in range(int(deadline / 0.1)):
        response = await client.get(f"/documents/jobs/{job_id}")
        assert response.status_code == 200, response.text
        job = response.json()
        seen.append(job["state"])
        if job["state"] in ("done", "failed"):
            return job
        await asyncio.sleep(0.1)
    raise AssertionError(f"job {job_id} did not finish; states seen: {sorted(set(seen))}")


@asynccontextmanager
async def server(config: Any, **overrides: Any) -> AsyncIterator[httpx.AsyncClient]:
    for key, value in overrides.items():
        setattr(config, key, value)
    async with serve(scenario_app(config)) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        yield client


def pdf_bytes(pages: list[str]) -> bytes:
    pdf = FPDF()
    pdf.set_font("helvetica", size=12)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 8, text)
    return bytes(pdf.output())


async def upload_flow(client: httpx.AsyncClient, **auth: Any) -> None:
    """202 at once, poll to done with per-file outcomes, then searchable, readable and deletable."""
    pdf = pdf_bytes(
        ["Okapis live in the Ituri forest.", "Okapi tongues are long enough to clean their ears."]
    )
    files = [
        ("file", ZEBRA),
        ("file", ("okapi.pdf", pdf, "application/pdf")),
        ("file", ("tool.exe", b"MZ", "application/octet-stream")),
        ("file", (".md", b"# A name that is all suffix", "text/markdown")),
    ]
    response = await client.post("/documents", files=files, **auth)
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["job"]["state"] == "queued"
    assert response.headers["location"] == f"/documents/jobs/{body['jobId']}"
    job = await finished_job(client, body["jobId"])
    assert job["state"] == "done", job
    assert [(f["name"], f["status"]) for f in job["files"]] == [
        ("zebra-facts.md", "added"),
        ("okapi.pdf", "added"),
        ("tool.exe", "error"),
        (".md", "error"),
    ]
    assert job["files"][2]["error"] == job["files"][3]["error"] == "unsupported file type"
    assert job["progress"]["filesDone"] == job["progress"]["filesTotal"] == 4
    assert job["progress"]["chunksDone"] == job["progress"]["chunksTotal"] > 0

    listing = (await client.get("/documents", params={"page_size": 500})).json()["documents"]
    okapi = next(d for d in listing if d["uri"] == "okapi.pdf")
    # searchable: a run's search finds the new document
    run = await client.post(
        "/agui",
        json={
            "threadId": "okapi-thread",
            "runId": "r1",
            "state": {},
            "messages": [{"id": "m1", "role": "user", "content": "where do okapis live"}],
            "tools": [],
            "context": [],
            "forwardedProps": {},
        },
    )
    assert run.status_code == 200 and "Ituri" in run.text

    document = (await client.get(f"/documents/{okapi['document_id']}")).json()
    assert document["uri"] == "okapi.pdf" and "Ituri forest" in document["content"]
    original = await client.get(f"/documents/{okapi['document_id']}", params={"format": "file"})
    assert original.status_code == 200 and original.content == pdf
    assert original.headers["content-type"] == "application/pdf"
    assert original.headers["content-disposition"].startswith("inline")
    by_accept = await client.get(f"/documents/{okapi['document_id']}", headers={"Accept": "application/pdf"})
    assert by_accept.content == pdf

    deleted = await client.delete(f"/documents/{okapi['document_id']}")
    assert deleted.status_code == 204
    assert (await client.get(f"/documents/{okapi['document_id']}")).status_code == 404
    assert (
        await client.get(f"/documents/{okapi['document_id']}", params={"format": "file"})
    ).status_code == 404
    assert (await client.delete(f"/documents/{okapi['document_id']}")).status_code == 404
    listing = (await client.get("/documents", params={"page_size": 500})).json()["documents"]
    assert "okapi.pdf" not in {d["uri"] for d in listing}


async def test_upload_is_a_background_job_then_searchable_readable_deletable(scenario_config: Any) -> None:
    async with server(scenario_config) as client:
        await upload_flow(client)
        assert (await client.get("/documents/jobs/nope")).status_code == 404
        bad = await client.post("/documents", files={"file": ("x.exe", b"MZ", "application/octet-stream")})
        assert bad.status_code == 422 and bad.json()["error"]["details"][0]["status"] == "error"
        assert (await client.get("/documents/x", params={"format": "svg"})).status_code == 422


async def test_upload_on_a_postgres_queue(scenario_config: Any, postgres_url: str) -> None:
    async with server(scenario_config, database_url=postgres_url) as client:
        await upload_flow(client)


async def test_upload_on_a_redis_queue(scenario_config: Any, redis_url: str) -> None:
    prefix = f"docs-api-{id(scenario_config)}:"
    async with server(scenario_config, redis_url=redis_url, redis_prefix=prefix) as client:
        await upload_flow(client)


async def test_only_editors_change_the_knowledge_base(scenario_config: Any) -> None:
    tokens = {"alice": SecretStr("token-a"), "bob": SecretStr("token-b")}
    alice = {"headers": {"Authorization": "Bearer token-a"}}
    bob = {"headers": {"Authorization": "Bearer token-b"}}
    async with server(scenario_config, tokens=tokens, editors=["alice"]) as client:
        refused = await client.post("/documents", files={"file": ZEBRA}, **bob)
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "forbidden"
        assert "RAGSTREAM_EDITORS" in refused.json()["error"]["message"]
        accepted = await client.post("/documents", files={"file": ZEBRA}, **alice)
        assert accepted.status_code == 202
        job_id = accepted.json()["jobId"]
        # another principal's job does not exist for bob
        other = await client.get(f"/documents/jobs/{job_id}", **bob)
        missing = await client.get("/documents/jobs/0123456789abcdef", **bob)
        assert other.status_code == missing.status_code == 404
        client.headers["Authorization"] = "Bearer token-a"
        job = await finished_job(client, job_id)
        del client.headers["Authorization"]
        document_id = job["files"][0]["documentId"]
        # bob still reads and searches
        assert (await client.get(f"/documents/{document_id}", **bob)).json()["title"] == "Zebra facts"
        listing = (await client.get("/documents", params={"page_size": 500}, **bob)).json()
        assert "zebra-facts.md" in {d["uri"] for d in listing["documents"]}
        assert (await client.delete(f"/documents/{document_id}", **bob)).status_code == 403
        assert (await client.get(f"/documents/{document_id}", **bob)).status_code == 200
        assert (await client.delete(f"/documents/{document_id}", **alice)).status_code == 204


async def test_public_routes_show_only_their_public_part(scenario_config: Any) -> None:
    async with server(scenario_config, tokens={"alice": SecretStr("token-a")}) as client:
        health = (await client.get("/health")).json()
        readiness = (await client.get("/ready")).json()
        caps = (await client.get("/capabilities")).json()
        assert health == {"status": "ok"}
        assert set(readiness) == {"status", "checks"}
        assert set(caps) == {"identity", "transport"}
        full = (await client.get("/capabilities", headers={"Authorization": "Bearer token-a"})).json()
        assert "tools" in full and "custom" in full
        detailed = (await client.get("/ready", headers={"Authorization": "Bearer token-a"})).json()
        assert "documents" in detailed
        live = (await client.get("/health", headers={"Authorization": "Bearer token-a"})).json()
        assert set(live) == {"status", "activeRuns", "worker"}


def test_editors_must_name_token_principals(tmp_path: Any) -> None:
    from ragstream.config import AppConfig

    with pytest.raises(ValueError, match="editors without a token: carol"):
        AppConfig(data_dir=tmp_path, tokens={"alice": SecretStr("a")}, editors=["alice", "carol"])
    assert AppConfig(data_dir=tmp_path, editors=["anyone"]).editors == ["anyone"]  # no tokens: unused


async def test_documents_are_found_by_title_or_file_name_a_page_at_a_time(scenario_config: Any) -> None:
    async with server(scenario_config) as client:
        everything = (await client.get("/documents", params={"page_size": 500})).json()
        assert everything["total"] == len(everything["documents"]) > 10
        # case-insensitive, on the title (Deploying ragstream) and on the file name (deployment.md)
        by_title = (await client.get("/documents", params={"q": "DEPLOYING"})).json()
        by_name = (await client.get("/documents", params={"q": "deployment.md"})).json()
        assert [d["title"] for d in by_title["documents"]] == ["Deploying ragstream"]
        assert [d["uri"] for d in by_name["documents"]] == ["guide/deployment.md"]
        assert by_title["total"] == by_name["total"] == 1
        # the filter's own rule for a name: spaces ignored, a part of the name is enough
        guide = (await client.get("/documents", params={"q": "guide/"})).json()
        assert guide["total"] == 7 and all(d["uri"].startswith("guide/") for d in guide["documents"])
        # paged: the pages of a search add up to the search, in title order, without repeats
        pages = [
            (await client.get("/documents", params={"q": "guide/", "page": n, "page_size": 3})).json()
            for n in (1, 2, 3)
        ]
        assert [p["pages"] for p in pages] == [3, 3, 3] and [len(p["documents"]) for p in pages] == [3, 3, 1]
        assert [d["uri"] for p in pages for d in p["documents"]] == [d["uri"] for d in guide["documents"]]
        titles = [d["title"] for d in guide["documents"]]
        assert titles == sorted(titles, key=str.casefold)
        none = (await client.get("/documents", params={"q": "no such document anywhere"})).json()
        assert none == {"documents": [], "page": 1, "pageSize": 50, "pages": 1, "total": 0}
        # a string that is SQL to a careless server is only a name here
        assert (await client.get("/documents", params={"q": "' OR 1=1 --"})).json()["total"] == 0
        too_long = await client.get("/documents", params={"q": "x" * 501})
        assert too_long.status_code == 422
        assert "q is 501 characters long" in too_long.json()["error"]["message"]
