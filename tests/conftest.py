"""Shared fixtures: temporary knowledge bases, the sample corpus, deterministic embedders."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rag_tools.kb import KnowledgeBase

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "examples" / "corpus"


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
