"""Shared fixtures: temporary knowledge bases, the sample corpus, deterministic embedders."""

from __future__ import annotations

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
