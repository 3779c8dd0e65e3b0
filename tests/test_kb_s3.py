"""The knowledge base on object storage: a real S3-compatible server (moto's server mode) started by
the tests, reached through the standard AWS variables or RAGSTREAM_KB_STORAGE_OPTIONS; several
processes on one knowledge base; and the store going away (clear errors, health, nothing half-written)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
from pathlib import Path

import httpx
import pytest

from rag_tools.config import RagConfig
from rag_tools.kb import KnowledgeBase, KnowledgeBaseUnavailable
from tests.conftest import ROOT
from tests.protocol import parse_sse
from tests.s3_helpers import S3Location, StoreProxy
from tests.servers import RAGSTREAM, free_port, served
from tests.snippets import snippet_env

pytestmark = pytest.mark.timeout(600)


def write_docs(folder: Path, docs: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in docs.items():
        (folder / name).write_text(text)
    return folder


def ragstream(
    *args: str, env: dict[str, str], data: Path, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **env, "RAGSTREAM_DATA_DIR": str(data), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [*RAGSTREAM, *args], capture_output=True, text=True, env=full, cwd=ROOT, timeout=timeout
    )


@pytest.fixture
def aws_env(s3_location: S3Location, monkeypatch: pytest.MonkeyPatch) -> S3Location:
    """This process reaches the S3 server through the standard AWS variables only."""
    for name, value in s3_location.aws_env.items():
        monkeypatch.setenv(name, value)
    return s3_location


async def test_ingest_search_reingest_and_delete_on_s3(aws_env: S3Location, tmp_path: Path) -> None:
    docs = write_docs(
        tmp_path / "docs",
        {
            "backups.md": "# Backups\n\nNightly database backups are retained for 35 days in the vault.",
            "ports.md": "# Ports\n\nThe ingestion gateway listens on port 7443 behind the balancer.",
        },
    )
    async with KnowledgeBase(aws_env.uri) as kb:
        report = await kb.ingest_paths([docs])
        assert [o.status for o in report.outcomes] == ["added", "added"]
        hits = await kb.search("how long are database backups retained", limit=1)
        assert hits[0].uri == "backups.md"
        assert "35 days" in hits[0].text
        listed = await kb.list_documents()
        assert [d.uri for d in listed.documents] == ["backups.md", "ports.md"]
        original = await kb.get_document_file(listed.documents[0].document_id)
        assert original is not None
        assert original.data == (docs / "backups.md").read_bytes()

    assert not (ROOT / "s3:").exists() and not Path("s3:").exists()  # nothing went to a local folder

    (docs / "ports.md").write_text("# Ports\n\nThe ingestion gateway now listens on port 9443.")
    async with KnowledgeBase(aws_env.uri) as kb:  # a new connection: everything came from the store
        again = await kb.ingest_paths([docs])
        assert sorted(o.status for o in again.outcomes) == ["unchanged", "updated"]
        assert "9443" in (await kb.search("gateway port", limit=1, mode="text"))[0].text
        assert await kb.search("7443", mode="text") == []
        assert await kb.delete_document("backups.md")
        assert await kb.search("vault", mode="text") == []
        assert (await kb.list_documents()).total == 1
        assert await kb.count_chunks() == sum(d.chunk_count for d in (await kb.list_documents()).documents)


async def test_storage_options_from_the_config_override_the_environment(
    s3_location: S3Location, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in s3_location.aws_env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    config = RagConfig(kb_uri=s3_location.uri, kb_storage_options={"aws_endpoint": s3_location.endpoint})
    docs = write_docs(tmp_path / "docs", {"a.md": "# Alpha\n\nAlpha ships on Tuesdays."})
    async with KnowledgeBase.from_config(config) as kb:
        assert (await kb.ingest_paths([docs])).outcomes[0].status == "added"
        assert (await kb.search("Alpha", mode="text"))[0].uri == "a.md"


async def test_a_plain_http_endpoint_without_allow_http_is_named(
    aws_env: S3Location, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_ALLOW_HTTP")
    with pytest.raises(KnowledgeBaseUnavailable) as caught:
        async with KnowledgeBase(aws_env.uri):
            pass
    assert aws_env.uri in str(caught.value)
    assert "AWS_ALLOW_HTTP=true" in str(caught.value)


@pytest.mark.parametrize("command", [["ingest", "docs"], ["serve", "--port", "1"]])
def test_bad_storage_options_stop_the_command_in_one_line(tmp_path: Path, command: list[str]) -> None:
    result = ragstream(*command, env={"RAGSTREAM_KB_STORAGE_OPTIONS": "{allow_http: true"}, data=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "RAGSTREAM_KB_STORAGE_OPTIONS is not valid JSON" in lines[0]


# -- several processes on one knowledge base ------------------------------------------------------


async def documents_of(http: httpx.AsyncClient, url: str) -> dict[str, int]:
    response = await http.get(f"{url}/documents")
    assert response.status_code == 200, response.text
    return {
        d["uri"]: d["chunkCount"] if "chunkCount" in d else d["chunk_count"]
        for d in response.json()["documents"]
    }


async def ask(http: httpx.AsyncClient, url: str, thread: str, question: str) -> str:
    """One AG-UI run of the offline model (it searches the knowledge base); the answer's text."""
    body = {
        "threadId": thread,
        "runId": f"{thread}-1",
        "state": {},
        "tools": [],
        "context": [],
        "forwardedProps": {},
        "messages": [{"id": "u1", "role": "user", "content": question}],
    }
    response = await http.post(f"{url}/agui", json=body)
    assert response.status_code == 200, response.text
    events = [event for _, event in parse_sse(response.text)]
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


async def test_two_servers_read_one_s3_kb_while_a_third_process_ingests(
    s3_location: S3Location, tmp_path: Path
) -> None:
    first = write_docs(tmp_path / "first", {"runbook.md": "# Runbook\n\nRestart the indexer with care."})
    long_text = "\n\n".join(
        f"## Part {i}\n\nThe relay station {i} forwards telemetry to the hub." for i in range(60)
    )
    second = write_docs(
        tmp_path / "second",
        {
            "relay.md": f"# Relay stations\n\nRelay stations forward telemetry every 90 seconds.\n\n{long_text}"
        },
    )

    async def ingest(folder: Path) -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(
            ragstream, "ingest", str(folder), "--no-progress", env=s3_location.env, data=tmp_path / "cli"
        )

    async with (  # both start on an empty knowledge base: its tables do not exist yet
        served(s3_location.env, tmp_path / "a") as server_a,
        served(s3_location.env, tmp_path / "b") as server_b,
        httpx.AsyncClient(timeout=120) as http,
    ):
        for url in (server_a, server_b):
            assert await documents_of(http, url) == {}
        assert (await ingest(first)).returncode == 0
        for url in (server_a, server_b):
            assert list(await documents_of(http, url)) == ["runbook.md"]

        running = asyncio.create_task(ingest(second))
        seen: list[dict[str, int]] = []
        while not running.done():  # both servers keep answering, and never list a partial document
            for url in (server_a, server_b):
                seen.append(await documents_of(http, url))
            await asyncio.sleep(0.1)
        result = await running
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("1 added, 0 updated, 0 unchanged, 0 failed;")

        for name, url in (("a", server_a), ("b", server_b)):
            listed = await documents_of(http, url)
            assert list(listed) == ["relay.md", "runbook.md"]
            assert all(view.get("relay.md") in (None, listed["relay.md"]) for view in seen)
            answer = await ask(http, url, f"relay-{name}", "How often do relay stations forward telemetry?")
            assert "90 seconds" in answer, answer


async def test_three_processes_ingest_into_one_s3_kb_at_once(s3_location: S3Location, tmp_path: Path) -> None:
    """Hosts ingesting at the same time (their commits conflict, and are retried) lose nothing."""
    folders = [
        write_docs(
            tmp_path / name,
            {f"{name}{i}.md": f"# {name} {i}\n\n" + f"The {name} note number {i}. " * 30 for i in range(15)},
        )
        for name in ("alpha", "beta", "gamma")
    ]
    results = await asyncio.gather(
        *(
            asyncio.to_thread(
                ragstream,
                "ingest",
                str(folder),
                "--no-progress",
                env=s3_location.env,
                data=tmp_path / f"d{n}",
            )
            for n, folder in enumerate(folders)
        )
    )
    for result in results:
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("15 added, 0 updated, 0 unchanged, 0 failed;")
    async with KnowledgeBase(s3_location.uri, storage_options=s3_location.storage_options) as kb:
        documents = (await kb.list_documents(page_size=100)).documents
        assert len(documents) == 45
        assert await kb.count_chunks() == sum(d.chunk_count for d in documents)
        for name in ("alpha", "beta", "gamma"):
            hits = await kb.search(f"{name} note number 7", mode="text", limit=1)
            assert hits[0].uri == f"{name}7.md"


# -- the store goes away ---------------------------------------------------------------------------


async def test_ingest_into_an_unreachable_store_is_one_clear_line(
    s3_location: S3Location, proxy: StoreProxy, tmp_path: Path
) -> None:
    docs = write_docs(tmp_path / "docs", {"a.md": "# Alpha\n\nAlpha ships on Tuesdays."})
    proxy.cut()
    result = await asyncio.to_thread(
        ragstream,
        "ingest",
        str(docs),
        "--no-progress",
        env=s3_location.via(proxy.url).env,
        data=tmp_path / "d",
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr  # no traceback
    assert lines[0] == (
        f"ragstream: the knowledge base at {s3_location.uri} is unavailable: "
        f"cannot reach the object store ({proxy.url}): Connection refused"
    )


async def test_ready_reports_the_store_while_it_is_unreachable(
    s3_location: S3Location, proxy: StoreProxy, tmp_path: Path
) -> None:
    env = {**s3_location.via(proxy.url).env, "RAGSTREAM_KB_STORAGE_OPTIONS": '{"client_max_retries": 1}'}
    docs = write_docs(tmp_path / "docs", {"a.md": "# Alpha\n\nAlpha ships on Tuesdays."})
    result = await asyncio.to_thread(
        ragstream, "ingest", str(docs), "--no-progress", env=env, data=tmp_path / "d"
    )
    assert result.returncode == 0, result.stderr
    proxy.cut()  # the server starts while the store is down: it serves, and says so
    async with served(env, tmp_path / "data", ready=503) as url, httpx.AsyncClient(timeout=60) as http:
        down = await http.get(f"{url}/ready")
        assert down.status_code == 503
        assert down.json()["error"]["code"] == "knowledge_base_unavailable"
        assert down.json()["error"]["details"]["checks"]["knowledgeBase"] == "down"
        assert (await http.get(f"{url}/health")).status_code == 200  # the process itself is alive
        listing = await http.get(f"{url}/documents")
        assert listing.status_code == 503  # an answer, not a hang or a 500
        proxy.restore()
        assert (await http.get(f"{url}/ready")).status_code == 200
        assert list(await documents_of(http, url)) == ["a.md"]
        proxy.cut()  # and goes away again while it serves
        assert (await http.get(f"{url}/ready")).status_code == 503
        assert (await http.get(f"{url}/health")).status_code == 200
        proxy.restore()
        assert (await http.get(f"{url}/ready")).status_code == 200


async def shown_revision(kb: KnowledgeBase, uri: str, word: str) -> str | None:
    """The revision of ``uri`` that the knowledge base shows, checked whole; ``None`` when it is absent."""
    document = await kb.get_document(uri, with_content=True)
    hits = [h for h in await kb.search(word, mode="text", limit=100) if h.uri == uri]
    if document is None:
        assert hits == [], f"{uri} is not listed but {len(hits)} of its chunks are found"
        return None
    chunks = await kb.get_chunks(document.document_id)
    assert len(chunks) == document.chunk_count > 0
    assert {h.chunk_id for h in hits} <= {c.chunk_id for c in chunks}, "a chunk of another version is found"
    assert len(hits) == sum(word in c.text.lower() for c in chunks)
    assert await kb.get_document_file(document.document_id) is not None
    revision = re.search(r"Revision (\d+)", document.content or "")
    assert revision is not None and all(revision.group(0) in c.text for c in chunks if "Revision" in c.text)
    return revision.group(1)


async def test_a_store_lost_at_any_write_of_an_ingest_leaves_whole_documents(
    s3_location: S3Location, proxy: StoreProxy, tmp_path: Path
) -> None:
    """The store goes away after the 1st, 2nd, 3rd... write of an ingest that changes one document and
    adds another; once it is back each shows its previous version or its new one, whole, or is absent."""
    options = {**s3_location.via(proxy.url).storage_options, "client_max_retries": "0"}
    steps = "\n\n".join(f"## Step {i}\n\nThe quokka step {i} is documented here." for i in range(12))
    docs = tmp_path / "docs"
    write_docs(docs, {"quokka.md": f"# Quokka\n\n{steps}\n\nRevision 0 of the quokka notes."})
    async with KnowledgeBase(s3_location.uri, storage_options=options) as kb:
        await kb.ingest_paths([docs])
    shown = "0"
    for cut in range(1, 13):  # the data writes (files, chunks, documents, old chunks); indexes follow
        (docs / "quokka.md").write_text(f"# Quokka\n\n{steps}\n\nRevision {cut} of the quokka notes.")
        (docs / f"new{cut}.md").write_text(f"# New {cut}\n\nThe numbat note. Revision {cut}.")
        proxy.cut_after_writes(cut)
        with pytest.raises(KnowledgeBaseUnavailable):
            async with KnowledgeBase(s3_location.uri, storage_options=options) as kb:
                await kb.ingest_paths([docs])
        proxy.restore()
        async with KnowledgeBase(s3_location.uri, storage_options=options) as kb:
            now = await shown_revision(kb, "quokka.md", "quokka")
            assert now in (shown, str(cut))
            shown = now
            assert await shown_revision(kb, f"new{cut}.md", "numbat") in (None, str(cut))
    async with KnowledgeBase(s3_location.uri, storage_options=options) as kb:  # the next ingest completes
        await kb.ingest_paths([docs])
        assert await shown_revision(kb, "quokka.md", "quokka") == "12"
        for number in range(1, 13):
            assert await shown_revision(kb, f"new{number}.md", "numbat") == str(number)


def test_the_object_storage_block_sets_what_a_process_needs(s3_location: S3Location) -> None:
    """docs/knowledge-base.md's block sets exactly the variables the tests' processes run with."""
    assert set(snippet_env("object storage")) == set(s3_location.env)
