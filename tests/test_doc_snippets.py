"""The code blocks of the docs pages run as they stand, as a user who copies them would run them: the
library snippet as a script, the shell blocks with bash and this install's ``ragstream`` (a test's
address in place of ``127.0.0.1:8000``, its services in place of the placeholders)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import CORPUS, scenario_app
from tests.protocol import parse_sse, run_body
from tests.servers import free_port, serve, served
from tests.snippets import bash, settings, shell, shell_env, snippet

ROOT = Path(__file__).resolve().parent.parent
QUIET = {"LANCEDB_LOG": "error"}

pytestmark = pytest.mark.timeout(600)


async def run(code: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run a shell block to its end; its output, once it succeeded."""
    process = await asyncio.create_subprocess_exec(
        *bash(code),
        cwd=cwd,
        env=shell_env({**QUIET, **(env or {})}),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 540)
    assert process.returncode == 0, (out.decode()[-2000:], err.decode()[-3000:])
    return out.decode()


@asynccontextmanager
async def running(code: str, cwd: Path, url: str, env: dict[str, str] | None = None) -> AsyncIterator[Path]:
    """A shell block that ends in ``ragstream serve``, running until the block is done with; yields
    the file its stderr goes to once ``url``/ready answers 200."""
    log = Path(tempfile.mkdtemp(prefix="ragstream-block-")) / "block.log"  # not in cwd: that may be the repo
    with log.open("wb") as sink:
        process = await asyncio.create_subprocess_exec(
            *bash(code),
            cwd=cwd,
            env=shell_env({**QUIET, **(env or {})}),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=sink,
            start_new_session=True,
        )
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            for _ in range(1500):
                assert process.returncode is None, log.read_text(errors="replace")[-3000:]
                try:
                    if (await http.get(f"{url}/ready")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.2)
            else:
                raise AssertionError(f"the block's server did not get ready: {log.read_text()[-3000:]}")
        yield log
    finally:
        if process.returncode is None:
            os.killpg(process.pid, signal.SIGTERM)
            await asyncio.wait_for(process.wait(), 60)


async def test_the_toolsets_only_snippet_answers_with_citation_cards(
    corpus_kb_template: Path, tmp_path: Path
) -> None:
    shutil.copytree(corpus_kb_template, tmp_path / ".ragstream" / "data" / "kb")
    script = tmp_path / "snippet.py"
    script.write_text(snippet("toolsets-only composition"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()[-3000:]
    text = out.decode()
    assert "35 days [" in text
    cited = text.split("35 days [")[1].split("]")[0]
    assert f"[{cited}] Kiteline Cloud Operations Handbook" in text, text


async def test_the_first_curl_streams_a_cited_answer_and_the_thread_keeps_it(
    corpus_kb_template: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    shutil.copytree(corpus_kb_template, data / "kb")
    async with served(QUIET, data) as url:
        out = await run(shell("first curl", {"http://127.0.0.1:8000": url}), tmp_path)
    events = [json.loads(line[6:]) for line in out.splitlines() if line.startswith("data: ")]
    assert events[0]["type"] == "RUN_STARTED" and events[-1]["type"] == "RUN_FINISHED"
    answer = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert "35 days [" in answer, answer
    thread = json.loads(out.rstrip().splitlines()[-1])  # the second curl: the thread
    assert thread["messages"][0]["role"] == "user"
    assert thread["messages"][-1]["content"] == answer
    cited = answer.split("35 days [")[1].split("]")[0]
    assert thread["state"]["citations"][cited]["title"] == "Kiteline Cloud Operations Handbook"


def _files(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


async def test_the_knowledge_base_commands_run_as_written(corpus_kb_template: Path, tmp_path: Path) -> None:
    """In a folder holding what the block names: the sample corpus, a PDF under docs/, two office
    files, a team share; the knowledge base in ``.ragstream/data`` as ``ragstream serve`` keeps it."""
    shutil.copytree(CORPUS, tmp_path / "examples" / "corpus")
    shutil.copytree(corpus_kb_template, tmp_path / ".ragstream" / "data" / "kb")
    (tmp_path / "docs").mkdir()
    shutil.copy(CORPUS / "operations-handbook.pdf", tmp_path / "docs" / "runbook.pdf")
    shutil.copy(CORPUS / "support-onboarding.docx", tmp_path / "handbook.docx")
    shutil.copy(CORPUS / "price-list.xlsx", tmp_path / "prices.xlsx")
    _files(tmp_path / "team-share", {"guides/setup.md": "# Setup\n\nThe VPN profile is issued by IT.\n"})
    out = await run(snippet("knowledge base commands"), tmp_path)
    assert "added: guides/setup.md" in out, out  # the sync
    listing = out[out.rindex("release-notes.txt") - 3000 :]  # `ragstream documents`, printed last
    for uri in ("runbook.pdf", "handbook.docx", "prices.xlsx", "guides/setup.md"):
        assert uri in listing, (uri, out[-3000:])


async def test_the_per_document_access_commands_run_as_written(
    corpus_kb_template: Path, tmp_path: Path
) -> None:
    """The CLI lines as the operator on the server's data directory, the curl lines as alice (an
    editor, token ``$T``) against the running server; ``$DOC`` is a corpus document."""
    data = tmp_path / ".ragstream" / "data"
    shutil.copytree(corpus_kb_template, data / "kb")
    _files(tmp_path / "handbook", {"leave.md": "# Leave\n\nTwenty-five days of leave a year.\n"})
    _files(tmp_path / "hr-share", {"salaries.md": "# Salaries\n\nSalary bands are reviewed in March.\n"})
    _files(tmp_path, {"pay.md": "# Pay\n\nPay day is the 25th.\n"})
    env = {"RAGSTREAM_TOKENS": json.dumps({"alice": "s3cret-a"}), "RAGSTREAM_EDITORS": '["alice"]'}
    alice = {"Authorization": "Bearer s3cret-a"}
    async with served({**QUIET, **env}, data) as url, httpx.AsyncClient(base_url=url, headers=alice) as http:

        async def groups() -> dict[str, list[str]]:
            listing = (await http.get("/documents", params={"page_size": 500})).json()
            return {d["uri"]: d["groups"] for d in listing["documents"]}

        doc = next(
            d for d in (await http.get("/documents")).json()["documents"] if d["uri"] == "release-notes.txt"
        )
        block = shell("per-document access commands", {"http://127.0.0.1:8000": url})
        out = await run(block, tmp_path, {"T": "s3cret-a", "DOC": doc["document_id"]})
        job = json.JSONDecoder().raw_decode(out, out.index('{"jobId"'))[0]["jobId"]  # the upload's answer
        for _ in range(600):
            if (await http.get(f"/documents/jobs/{job}")).json()["state"] in ("done", "failed"):
                break
            await asyncio.sleep(0.2)
        shown = await groups()
    assert shown["leave.md"] == []  # --groups hr,finance, then '' : everyone's again
    assert shown["salaries.md"] == ["hr"]
    assert shown["pay.md"] == ["hr"]
    assert shown["release-notes.txt"] == ["hr"]  # the PATCH


async def test_the_auth_hook_snippet_signs_in_by_api_key(
    scenario_config: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "myauth.py").write_text(snippet("auth hook"))
    monkeypatch.syspath_prepend(str(tmp_path))
    scenario_config.auth = "myauth:api_keys"  # RAGSTREAM_AUTH=myauth:api_keys
    scenario_config.editor_groups = ["kb-editors"]
    upload = {"file": ("hook.md", b"# Hook\n\nA hook names editors.\n", "text/markdown")}
    async with serve(scenario_app(scenario_config)) as url, httpx.AsyncClient(base_url=url) as http:
        alice, bob = {"X-Api-Key": "key-alice"}, {"X-Api-Key": "key-bob"}
        assert (await http.get("/threads", headers=alice)).status_code == 200
        assert (await http.post("/documents", files=upload, headers=alice)).status_code == 202
        assert (await http.post("/documents", files=upload, headers=bob)).status_code == 403
        unknown = await http.get("/threads", headers={"X-Api-Key": "key-mallory"})
        assert (unknown.status_code, unknown.json()["error"]["message"]) == (401, "unknown API key")
        assert (await http.get("/threads")).status_code == 401


async def test_the_custom_tools_command_serves_the_example_tools(
    corpus_kb_template: Path, tmp_path: Path
) -> None:
    port = free_port()
    data = tmp_path / "data"
    shutil.copytree(corpus_kb_template, data / "kb")  # the corpus is in already: --ingest skips it
    block = snippet("custom tools folder").strip() + f" --port {port} --data-dir {data}"
    url = f"http://127.0.0.1:{port}"
    async with running(block, ROOT, url), httpx.AsyncClient(base_url=url, timeout=120) as http:
        clashes = {}
        for name in ("convert_units", "save_note", "no_such_tool"):  # a page's tool named like a server tool
            frontend = {"name": name, "description": "the page's own", "parameters": {"type": "object"}}
            answer = await http.post("/agui", json=run_body(f"t-{name}", f"r-{name}", tools=[frontend]))
            clashes[name] = answer.status_code == 422 and name in answer.text
    assert clashes == {"convert_units": True, "save_note": True, "no_such_tool": False}


async def test_the_several_workers_command_serves_on_redis(
    redis_url: str, redis_prefix: str, corpus_kb_template: Path, tmp_path: Path
) -> None:
    """On loopback (the block listens on every interface) and the test's Redis."""
    port = free_port()
    data = tmp_path / "data"
    shutil.copytree(corpus_kb_template, data / "kb")
    code = shell(
        "several workers", {"redis://127.0.0.1:6379/0": redis_url, "--host 0.0.0.0": "--host 127.0.0.1"}
    )
    block = code.strip() + f" --port {port} --data-dir {data}"
    url = f"http://127.0.0.1:{port}"
    env = {"RAGSTREAM_REDIS_PREFIX": redis_prefix}
    async with running(block, tmp_path, url, env), httpx.AsyncClient(base_url=url, timeout=120) as http:
        ready = (await http.get("/ready")).json()
        answer = await http.post("/agui", json=run_body("workers-t", "workers-r"))
        # each request a new connection: whichever of the four workers takes it reads the thread
        views = [(await http.get("/threads/workers-t", headers={"Connection": "close"})) for _ in range(8)]
    assert ready["checks"]["redis"] == "ok"
    assert [event["type"] for _, event in parse_sse(answer.text)][-1] == "RUN_FINISHED"
    assert {view.status_code for view in views} == {200}
    (messages,) = {json.dumps(view.json()["messages"]) for view in views}  # the same thread each time
    assert [m["role"] for m in json.loads(messages)][:: len(json.loads(messages)) - 1] == [
        "user",
        "assistant",
    ]


async def test_the_eval_command_runs_as_written(corpus_kb_template: Path, tmp_path: Path) -> None:
    """The block's command with its optional flags given (the test extra has the eval extra's
    ir-measures), on a question about the sample corpus."""
    shutil.copytree(corpus_kb_template, tmp_path / ".ragstream" / "data" / "kb")
    install, command = snippet("eval command").splitlines()
    assert install.startswith("pip install 'ragstream[eval]'")
    question = {
        "id": "q1",
        "question": "How long are nightly database backups retained?",
        "pages": ["operations-handbook.pdf"],
        "fact": "35 days",
    }
    (tmp_path / "questions.jsonl").write_text(json.dumps(question) + "\n")
    out = await run(command.replace("[", "").replace("]", ""), tmp_path)
    assert "hybrid" in out and "text" in out, out
    assert (tmp_path / "report.html").is_file()
    assert json.loads((tmp_path / "figures.json").read_text())


def test_the_limits_block_sets_the_four_limits() -> None:
    assert settings("limits") == {
        "limit_runs_per_minute": 20,
        "limit_concurrent_runs": 2,
        "limit_upload_bytes_per_hour": 50_000_000,
        "limit_tokens_per_day": 200_000,
    }


def test_the_sync_schedule_block_is_one_source_every_five_minutes_for_alice() -> None:
    (source,) = settings("sync on a schedule")["sync"]
    assert (source.source, source.interval_seconds, source.owner) == ("s3://team-kb/handbook", 300, "alice")
