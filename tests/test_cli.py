"""The ragstream command as a user runs it: ingest, search, documents, serve (also with workers)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from rag_tools.embeddings import DEFAULT_EMBEDDER
from rag_tools.state.postgres_store import PostgresThreadStore
from rag_tools.state.redis_store import RedisThreadStore
from tests.conftest import CORPUS_DOCUMENTS, ROOT
from tests.protocol import check_stream, parse_sse
from tests.servers import free_port, serve

RAGSTREAM = [sys.executable, "-m", "ragstream.cli"]


def cli(*args: str, data: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAGSTREAM_DATA_DIR": str(data), "PYTHONPATH": str(ROOT)}
    return subprocess.run([*RAGSTREAM, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)


def test_ingest_reports_progress_errors_and_a_summary(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Alpha\n\nAlpha keeps backups for 30 days.")
    (docs / "b.txt").write_text("Beta listens on port 9000.")
    result = cli(
        "ingest", str(docs), str(tmp_path / "missing.md"), str(tmp_path / "*.nope"), data=tmp_path / "data"
    )
    assert result.returncode == 1  # some sources failed
    assert "error: " + str(tmp_path / "missing.md") + ": no such file or directory" in result.stderr
    assert "no files match this pattern" in result.stderr
    assert "ingesting (4/4 files)" in result.stderr  # the progress bar: files done, chunks embedded
    assert "2/2 [" in result.stderr and "chunk/s" in result.stderr
    assert result.stdout.strip() == "2 added, 0 updated, 0 unchanged, 2 failed; 2 chunks written"
    again = cli("ingest", str(docs), "--no-progress", data=tmp_path / "data")
    assert again.returncode == 0
    assert again.stdout.strip() == "0 added, 0 updated, 2 unchanged, 0 failed; 0 chunks written"


def test_search_and_documents(corpus_kb_template: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(corpus_kb_template, data / "kb")
    found = cli("search", "How long are nightly database backups retained?", "--limit", "2", data=data)
    assert found.returncode == 0, found.stderr
    lines = found.stdout.splitlines()
    assert lines[0].startswith("1. [")
    assert "Kiteline Cloud Operations Handbook — page 2" in lines[0]
    assert lines[1].strip() == "operations-handbook.pdf"  # the path within the corpus, not the server's
    assert sum(line[:3] in ("1. ", "2. ") for line in lines) == 2
    restricted = cli(
        "search", "how long are backups kept", "--document", "deployment", "--mode", "text", data=data
    )
    assert "Deploying ragstream" in restricted.stdout
    assert "Operations Handbook" not in restricted.stdout
    assert cli("search", "zzzz qqqq", "--mode", "text", data=data).stdout.strip() == "no results"
    sheet = cli("search", "How much does the advanced audit log add-on cost?", "--limit", "1", data=data)
    assert "Kiteline Price List — Add-ons, rows 2-8" in sheet.stdout.splitlines()[0]  # a sheet's rows
    listing = cli("documents", data=data)
    assert listing.stdout.splitlines()[-1] == f"page 1 of 1 ({CORPUS_DOCUMENTS} documents)"
    mismatch = cli("search", "x", "--embedder", "local:wordllama", data=data)
    assert mismatch.returncode == 1
    assert f"was built with embedder {DEFAULT_EMBEDDER!r}" in mismatch.stderr


@pytest.mark.parametrize(
    ("model", "env", "says"),
    [
        ("nonsense:foo", {}, "is not a model pydantic-ai knows; use a provider:model string"),
        ("openai:gpt-4o-mini", {}, "Set the `OPENAI_API_KEY` environment variable"),
        ("anthropic:claude-sonnet-4-5", {}, "Set the `ANTHROPIC_API_KEY` environment variable"),
        (
            "openai-chat:llama3.2",
            {"OPENAI_BASE_URL": "localhost:11434/v1"},
            "OPENAI_BASE_URL='localhost:11434/v1' is not a URL; give the scheme and host",
        ),
        ("ollama:llama3.2", {"OLLAMA_BASE_URL": "http://"}, "OLLAMA_BASE_URL='http://' is not a URL"),
    ],
)
def test_serve_refuses_an_unusable_model_in_one_line_before_serving(
    tmp_path: Path, model: str, env: dict[str, str], says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "OLLAMA_BASE_URL"):
        monkeypatch.delenv(variable, raising=False)
    for variable, value in env.items():
        monkeypatch.setenv(variable, value)
    result = cli("serve", "--model", model, "--port", str(free_port()), data=tmp_path / "data")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr  # no traceback
    assert model in lines[0] and says in lines[0]
    assert "serving on" not in result.stdout


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        (
            "RAGSTREAM_CACHE_MAX_THREADS",
            "many",
            "RAGSTREAM_CACHE_MAX_THREADS: Input should be a valid integer",
        ),
        ("RAGSTREAM_WORKERS", "0", "RAGSTREAM_WORKERS: Input should be greater than or equal to 1 (got '0')"),
        (
            "RAGSTREAM_SEARCH_MODE",
            "fast",
            "RAGSTREAM_SEARCH_MODE: Input should be 'hybrid', 'vector' or 'text'",
        ),
        (
            "RAGSTREAM_SYNC",
            '[{"source": "/srv/share", "interval_seconds": 1}]',
            "RAGSTREAM_SYNC[0.interval_seconds]: Input should be greater than or equal to 10",
        ),
        ("RAGSTREAM_OIDC_ISSUER", "https://login.example.com", "oidc_issuer needs oidc_audience"),
        ("RAGSTREAM_REDIS_URL", "127.0.0.1:6379", "RAGSTREAM_REDIS_URL: must be a redis://"),
        ("RAGSTREAM_DATABASE_URL", "mysql://db/ragstream", "RAGSTREAM_DATABASE_URL: must be a postgresql://"),
        (
            "RAGSTREAM_AUTH",
            "myapp.auth",
            "RAGSTREAM_AUTH: must be module:function (e.g. myapp.auth:authenticate)",
        ),
    ],
)
def test_a_bad_setting_stops_every_command_with_one_line_naming_it(
    tmp_path: Path, variable: str, value: str, says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, value)
    result = cli("serve", "--port", str(free_port()), data=tmp_path / "data")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr  # no traceback, no pydantic report
    assert lines[0].startswith("ragstream: invalid configuration: ") and says in lines[0]
    assert "serving on" not in result.stdout


def test_a_setting_set_to_the_empty_string_counts_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a compose file passes for an unset ``${VAR}``: the default, not an invalid value."""
    from ragstream.config import AppConfig

    for variable in ("RAGSTREAM_STATE_KEY", "RAGSTREAM_WORKERS", "RAGSTREAM_TOKENS", "RAGSTREAM_REDIS_URL"):
        monkeypatch.setenv(variable, "")
    config = AppConfig()
    assert (config.state_key, config.workers, config.tokens, config.redis_url) == (None, 1, {}, None)


def test_a_bad_flag_is_named_as_the_flag(tmp_path: Path) -> None:
    result = cli("serve", "--workers", "0", "--redis-url", "localhost", data=tmp_path / "data")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "ragstream: invalid configuration: --workers: Input should be greater than or equal to 1 (got 0); "
        "--redis-url: must be a redis:// or rediss:// or unix:// URL (e.g. redis://host/...), got 'localhost'"
    )


@pytest.mark.parametrize(
    "flags",
    [
        [],
        ["--ingest", "examples/corpus/release-notes.txt"],
        ["--workers", "2", "--redis-url", "redis://127.0.0.1:6379/0"],
    ],
    ids=["serve", "ingest-then-serve", "two-workers"],
)
def test_serve_refuses_a_knowledge_base_it_cannot_serve_in_one_line(
    corpus_kb_template: Path, tmp_path: Path, flags: list[str]
) -> None:
    data = tmp_path / "data"
    shutil.copytree(corpus_kb_template, data / "kb")
    result = cli("serve", "--port", str(free_port()), "--embedder", "local:wordllama", *flags, data=data)
    assert result.returncode == 2, result.stderr  # not a startup traceback, nor (two workers) exit 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"was built with embedder {DEFAULT_EMBEDDER!r}" in lines[0]
    assert "serving on" not in result.stdout


def test_serve_refuses_an_unusable_embedder_in_one_line(tmp_path: Path) -> None:
    result = cli("serve", "--port", str(free_port()), "--embedder", "nonsense:foo", data=tmp_path / "data")
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == "ragstream: the embedder 'nonsense:foo' cannot be used: Unknown provider: nonsense"
    )


def test_serve_with_several_workers_needs_redis(tmp_path: Path) -> None:
    result = cli("serve", "--workers", "2", data=tmp_path / "data")
    assert result.returncode == 2
    assert "needs --redis-url" in result.stderr


async def test_serve_with_two_workers_redis_and_postgres(
    corpus_kb_template: Path, tmp_path: Path, redis_url: str, redis_prefix: str, postgres_url: str
) -> None:
    data = tmp_path / "data"
    shutil.copytree(corpus_kb_template, data / "kb")
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RAGSTREAM_REDIS_PREFIX": redis_prefix,
        "RAGSTREAM_TOOL_DIRS": "[]",
    }
    process = subprocess.Popen(
        [
            *RAGSTREAM,
            "serve",
            "--workers",
            "2",
            "--redis-url",
            redis_url,
            "--database-url",  # threads in PostgreSQL, locks and event logs in Redis
            postgres_url,
            "--port",
            str(port),
            "--data-dir",
            str(data),
            "--state-key",  # a flag only serve has: it must reach every worker process
            "ragstream",
        ],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(timeout=60) as http:
            deadline = time.monotonic() + 240  # a guard against a hang, generous for a loaded machine
            while True:
                try:
                    if (await http.get(f"{url}/health")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "the server did not start"
                await asyncio.sleep(0.2)
            children = subprocess.run(
                ["pgrep", "-P", str(process.pid)], capture_output=True, text=True
            ).stdout.split()
            assert len(children) >= 2  # uvicorn's worker processes
            body: dict[str, Any] = {
                "threadId": "workers",
                "runId": "r1",
                "state": {},
                "tools": [],
                "context": [],
                "forwardedProps": {},
                "messages": [
                    {"id": "u1", "role": "user", "content": "How long are nightly database backups retained?"}
                ],
            }
            response = await http.post(f"{url}/agui", json=body)
            events = [e for _, e in parse_sse(response.text)]
            state = check_stream(events, {})
            assert "35 days" in "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
            assert list(state) == ["ragstream"] and "citations" in state["ragstream"]  # under the key
            for _ in range(5):  # whichever worker answers, the thread is the same
                assert (await http.get(f"{url}/threads/workers")).json()["state"] == state

            async def ask_a_worker() -> tuple[str, Any]:
                close = {"Connection": "close"}  # a new connection each time: either worker may take it
                health = (await http.get(f"{url}/health", headers=close)).json()
                described = (await http.get(f"{url}/capabilities", headers=close)).json()
                return health["worker"], described["custom"]["stateKey"]

            # whichever worker takes a connection (the kernel picks; it may favour one), the flag is there
            answers = await asyncio.gather(*(ask_a_worker() for _ in range(20)))
            assert {key for _, key in answers} == {"ragstream"}
        postgres, redis = PostgresThreadStore(postgres_url), RedisThreadStore(redis_url, prefix=redis_prefix)
        record = await postgres.load("workers")
        assert record is not None and record.version == 1  # the thread is in PostgreSQL, not in Redis
        assert await redis.load("workers") is None
        await postgres.close()
        await redis.close()
    finally:
        os.killpg(process.pid, 15)
        process.wait(30)


def _slow_openai() -> Any:
    """An OpenAI-compatible chat endpoint streaming a long answer, a word every 0.2 s."""
    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        body = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "slow"}
        body["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    async def completions(request: Any) -> StreamingResponse:
        async def stream() -> Any:
            yield chunk({"role": "assistant", "content": ""})
            for i in range(300):
                await asyncio.sleep(0.2)
                yield chunk({"content": f"word{i} "})
            yield chunk({}, "stop")
            yield b"data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])


async def test_a_run_streaming_when_serve_is_stopped_ends_with_the_shutdown_error(tmp_path: Path) -> None:
    """A deploy (SIGTERM) mid-answer: the client gets the run's end (RUN_ERROR ``shutdown``), not a
    stream cut off after some words with no terminal event."""
    async with serve(_slow_openai()) as model_url:
        port = free_port()
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "RAGSTREAM_TOOL_DIRS": "[]",
            "OPENAI_BASE_URL": f"{model_url}/v1",
            "OPENAI_API_KEY": "test",
        }
        args = ["serve", "--port", str(port), "--data-dir", str(tmp_path), "--model", "openai-chat:slow"]
        process = subprocess.Popen(
            [*RAGSTREAM, *args], env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        url = f"http://127.0.0.1:{port}"
        try:
            async with httpx.AsyncClient(timeout=60) as http:
                for _ in range(600):
                    with contextlib.suppress(httpx.HTTPError):
                        if (await http.get(f"{url}/ready")).status_code == 200:
                            break
                    await asyncio.sleep(0.2)
                body = {
                    "threadId": "t1",
                    "runId": "r1",
                    "state": {},
                    "tools": [],
                    "context": [],
                    "forwardedProps": {},
                    "messages": [{"id": "u1", "role": "user", "content": "hello"}],
                }
                text = ""
                async with http.stream("POST", f"{url}/agui", json=body) as response:
                    assert response.status_code == 200
                    async for chunk in response.aiter_text():
                        text += chunk
                        if text.count("TEXT_MESSAGE_CONTENT") == 3 and process.returncode is None:
                            process.send_signal(signal.SIGTERM)
            events = [event for _, event in parse_sse(text)]
            assert events[-1]["type"] == "RUN_ERROR", events[-3:]
            assert events[-1]["code"] == "shutdown"
            assert "TEXT_MESSAGE_END" in [e["type"] for e in events]
            assert process.wait(30) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal it stopped on
        finally:
            if process.poll() is None:
                process.kill()
