"""The vector index chosen by size, and search once it is built."""

from __future__ import annotations

from pathlib import Path

from rag_tools.kb import KnowledgeBase
from rag_tools.kb.indexing import (
    ROWS_PER_PARTITION,
    vector_index_plan,
    vector_search_parameters,
)
from tests.embedders import HashingEmbeddingModel

THRESHOLD = 10_000


def test_no_vector_index_below_the_threshold_or_when_turned_off() -> None:
    assert vector_index_plan(THRESHOLD - 1, ann_index_threshold=THRESHOLD) is None
    assert vector_search_parameters(THRESHOLD - 1, ann_index_threshold=THRESHOLD) is None
    assert vector_index_plan(10**9, ann_index_threshold=0) is None


def test_one_graph_per_partition_size_and_every_partition_probed() -> None:
    for rows, partitions in [
        (THRESHOLD, 1),
        (ROWS_PER_PARTITION, 1),
        (ROWS_PER_PARTITION + 1, 2),
        (10 * ROWS_PER_PARTITION, 10),
    ]:
        plan = vector_index_plan(rows, ann_index_threshold=THRESHOLD)
        params = vector_search_parameters(rows, ann_index_threshold=THRESHOLD)
        assert plan is not None and plan.num_partitions == partitions
        assert plan.config().distance_type == "cosine"
        assert params is not None and params.nprobes == partitions and params.refine_factor


def test_graph_search_widens_with_the_graph_within_bounds() -> None:
    efs = [
        vector_search_parameters(rows, ann_index_threshold=THRESHOLD).ef  # type: ignore[union-attr]
        for rows in (THRESHOLD, 100_000, 500_000, ROWS_PER_PARTITION)
    ]
    assert efs == sorted(efs)
    assert all(ef is not None and 50 <= ef <= 512 for ef in efs)


def _corpus(folder: Path, chunks: int) -> None:
    folder.mkdir()
    for d in range(chunks // 10):
        paragraphs = [
            f"Entry {d}-{p}: routine note number {d * 10 + p} about stock levels in the north warehouse, "
            "counted by the morning shift and checked again before the trucks leave."
            for p in range(10)
        ]
        if d == 2:
            paragraphs[3] = "The zeppelin hangar door opens with the brass lever."
        (folder / f"d{d:03d}.txt").write_text("\n\n".join(paragraphs))


async def test_search_finds_the_same_chunk_after_the_vector_index_is_built(tmp_path: Path) -> None:
    _corpus(tmp_path / "docs", 400)
    async with KnowledgeBase(
        tmp_path / "kb", embedder=HashingEmbeddingModel(), chunk_max_chars=200, ann_index_threshold=300
    ) as kb:
        await kb.ingest_paths([tmp_path / "docs"])
        assert await kb.count_chunks() == 400
        columns = {tuple(ix.columns) for ix in await kb._tables.chunks.list_indices()}  # type: ignore[union-attr]
        assert ("vector",) in columns
        params = kb.vector_search_parameters()
        assert params is not None and params.nprobes == 1
        for mode in ("vector", "hybrid"):
            hits = await kb.search("zeppelin hangar brass lever", mode=mode, limit=3)  # type: ignore[arg-type]
            assert "zeppelin" in hits[0].text, mode
        kb.vector_search.exact = True
        assert kb.vector_search_parameters() is None
        exact = await kb.search("zeppelin hangar brass lever", mode="vector", limit=3)
        assert "zeppelin" in exact[0].text


async def test_query_settings_can_be_overridden(tmp_path: Path) -> None:
    _corpus(tmp_path / "docs", 400)
    async with KnowledgeBase(
        tmp_path / "kb",
        embedder=HashingEmbeddingModel(),
        chunk_max_chars=200,
        ann_index_threshold=300,
        ann_ef=64,
        ann_refine_factor=2,
    ) as kb:
        await kb.ingest_paths([tmp_path / "docs"])
        params = kb.vector_search_parameters()
        assert params is not None and (params.ef, params.refine_factor) == (64, 2)
        hits = await kb.search("zeppelin hangar brass lever", mode="vector", limit=1)
        assert "zeppelin" in hits[0].text


async def test_a_small_knowledge_base_has_no_vector_index(tmp_path: Path) -> None:
    _corpus(tmp_path / "docs", 40)
    async with KnowledgeBase(
        tmp_path / "kb", embedder=HashingEmbeddingModel(), chunk_max_chars=200, ann_index_threshold=300
    ) as kb:
        await kb.ingest_paths([tmp_path / "docs"])
        columns = {tuple(ix.columns) for ix in await kb._tables.chunks.list_indices()}  # type: ignore[union-attr]
        assert ("vector",) not in columns
        assert kb.vector_search_parameters() is None
        hits = await kb.search("zeppelin hangar brass lever", mode="hybrid", limit=1)
        assert "zeppelin" in hits[0].text
