"""Shared fixtures: temporary knowledge bases, the sample corpus, deterministic embedders."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from rag_tools.kb import KnowledgeBase

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "examples" / "corpus"
#: How many documents the sample corpus holds (every file in it is a supported format).
CORPUS_DOCUMENTS = sum(1 for path in CORPUS.rglob("*") if path.is_file())


@pytest.fixture
async def kb(tmp_path: Path) -> AsyncIterator[KnowledgeBase]:
    """An empty knowledge base with the default (real, offline) embedder."""
    async with KnowledgeBase(tmp_path / "kb") as knowledge_base:
        yield knowledge_base


@pytest.fixture(scope="session")
def corpus_kb_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample corpus ingested once per session with the default embedder (copy before writing)."""
    import asyncio

    from bench.rag_eval import build_corpus_kb

    path = tmp_path_factory.mktemp("corpus") / "kb"

    async def build() -> None:
        kb = await build_corpus_kb(path)
        kb.close()

    asyncio.run(build())
    return path


@pytest.fixture
def corpus_kb_path(corpus_kb_template: Path, tmp_path: Path) -> Path:
    """A private copy of the ingested sample corpus."""
    target = tmp_path / "kb"
    shutil.copytree(corpus_kb_template, target)
    return target


@pytest.fixture
async def corpus_kb(corpus_kb_path: Path) -> AsyncIterator[KnowledgeBase]:
    async with KnowledgeBase(corpus_kb_path) as knowledge_base:
        yield knowledge_base


@pytest.fixture
def scenario_config(tmp_path: Path, corpus_kb_template: Path) -> Any:
    """A server configuration over a private copy of the ingested sample corpus."""
    from ragstream.config import AppConfig

    data = tmp_path / "data"
    shutil.copytree(corpus_kb_template, data / "kb")
    return AppConfig(data_dir=data, keepalive_seconds=5)


@pytest.fixture
def tool_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the seed tools (tests/seed_tools) log what they did (``SEED_TOOLS_LOG``)."""
    log = tmp_path / "tool-log.jsonl"
    monkeypatch.setenv("SEED_TOOLS_LOG", str(log))
    return log


def scenario_app(config: Any) -> Any:
    """The server app running the keyword-scenario agent (tests/scenario.py) with ``config``."""
    from rag_tools import build_chat_toolkit
    from ragstream.app import create_app
    from tests.scenario import Notes, scenario_agent

    toolkit = build_chat_toolkit(config)
    toolkit.namespaces["notes"] = Notes
    return create_app(config, agent=scenario_agent(toolkit), toolkit=toolkit)


@pytest.fixture
async def scenario_server(scenario_config: Any) -> AsyncIterator[str]:
    """A real uvicorn server on loopback running the keyword-scenario agent; yields its URL."""
    from tests.servers import serve

    async with serve(scenario_app(scenario_config)) as url:
        yield url


@pytest.fixture(scope="session")
def redis_url() -> Any:
    """The machine's Redis on 127.0.0.1:6379, or a private redis-server when none is running."""
    from tests.redis_helpers import private_redis, redis_running

    if redis_running(6379):
        yield "redis://127.0.0.1:6379/0"
        return
    with private_redis() as (port, _):
        yield f"redis://127.0.0.1:{port}/0"


@pytest.fixture
def redis_prefix() -> str:
    """Keys of one test, apart from every other test's and any other user of the Redis."""
    import uuid

    return f"ragstream-test-{uuid.uuid4().hex[:10]}:"


@pytest.fixture(scope="session")
def postgres_server() -> Any:
    """The machine's PostgreSQL on 127.0.0.1:5432, or a private server when none answers; its URL."""
    from tests.postgres_helpers import MACHINE_URL, postgres_answers, private_postgres

    if postgres_answers(MACHINE_URL):
        yield MACHINE_URL
        return
    with private_postgres() as server:
        yield server.url


@pytest.fixture
def postgres_url(postgres_server: str) -> Any:
    """A database of this test's own (dropped afterwards) on ``postgres_server``."""
    from tests.postgres_helpers import create_database, drop_database

    url = create_database(postgres_server)
    try:
        yield url
    finally:
        drop_database(url)


@pytest.fixture(scope="session")
def s3_server() -> Any:
    """moto's S3 server, started for the session on a free loopback port (tests/s3_helpers.py)."""
    from tests.s3_helpers import MotoServer

    server = MotoServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def proxy(s3_server: Any) -> Any:
    """A proxy in front of the S3 server that can go away and come back (tests/s3_helpers.py)."""
    from tests.s3_helpers import StoreProxy

    store = StoreProxy(s3_server.port).start()
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def s3_location(s3_server: Any) -> Any:
    """A fresh bucket on the S3 server and a knowledge base URI in it, with the env that reaches it."""
    from tests.s3_helpers import new_location

    return new_location(s3_server)
