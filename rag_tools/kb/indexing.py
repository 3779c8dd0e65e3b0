"""Index maintenance on the chunks table: full-text, id and groups indexes always, a vector index
past a size.

Indexes are created once; afterwards ``optimize`` folds new rows into them and compacts the small
fragments that each write commit leaves behind. Another process refreshing the same knowledge base
at the same time (two hosts ingesting into one store) makes LanceDB refuse one of the commits as a
conflict: the refresh is tried again, and if it keeps conflicting it is left to the next one (rows
not yet indexed are still searched, by a scan).

The vector index and the query settings are chosen from the number of chunks
(``vector_index_plan``, ``vector_search_parameters``): below ``ann_index_threshold`` an exact scan
is fast enough and exact, so there is no vector index; above it an IVF-HNSW-SQ index with one HNSW
graph per ``ROWS_PER_PARTITION`` chunks (bounding the memory of a graph build), searched with an
``ef`` that grows with the graph and a refine step that re-ranks the candidates on the full
vectors. The figures behind the rule are in ``bench/RESULTS.md`` (``bench/kb.py``).
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass
from datetime import timedelta

from lancedb.index import FTS, BTree, HnswSq, LabelList

from ..allocator import release_free_memory
from .errors import is_commit_conflict
from .tables import FTS_COLUMN, GROUPS, Tables

__all__ = [
    "DEFAULT_ANN_INDEX_THRESHOLD",
    "ROWS_PER_PARTITION",
    "VectorIndexPlan",
    "VectorSearchParameters",
    "refresh_indexes",
    "vector_index_plan",
    "vector_search_parameters",
]

ROWS_PER_PARTITION = 1_000_000
# Below this many chunks LanceDB's exact scan is about as fast as the index (2,000 chunks: 3.4 ms
# both); at 5,000 the index is already 2x faster and at 100,000 40x (bench/RESULTS.md).
DEFAULT_ANN_INDEX_THRESHOLD = 5_000

logger = logging.getLogger("ragstream.kb")

_ATTEMPTS = 4


@dataclass(frozen=True)
class VectorIndexPlan:
    """The vector index to build: IVF partitions, each an HNSW graph over scalar-quantised vectors."""

    num_partitions: int
    m: int = 20
    ef_construction: int = 150

    def config(self) -> HnswSq:
        """The LanceDB index configuration."""
        return HnswSq(
            distance_type="cosine",
            num_partitions=self.num_partitions,
            m=self.m,
            ef_construction=self.ef_construction,
        )

    def describe(self) -> str:
        """A short label, e.g. ``IVF_HNSW_SQ partitions=1 m=20 ef_construction=150``."""
        return (
            f"IVF_HNSW_SQ partitions={self.num_partitions} m={self.m} ef_construction={self.ef_construction}"
        )


@dataclass(frozen=True)
class VectorSearchParameters:
    """Query-time settings of a vector search over the index (``None``: LanceDB's default)."""

    ef: int | None = None
    nprobes: int | None = None
    refine_factor: int | None = None


def vector_index_plan(rows: int, *, ann_index_threshold: int) -> VectorIndexPlan | None:
    """The vector index for ``rows`` chunks, or ``None`` when an exact scan should serve them.

    ``ann_index_threshold`` 0 turns the vector index off at every size.
    """
    if not ann_index_threshold or rows < ann_index_threshold:
        return None
    return VectorIndexPlan(num_partitions=max(1, math.ceil(rows / ROWS_PER_PARTITION)))


def vector_search_parameters(rows: int, *, ann_index_threshold: int) -> VectorSearchParameters | None:
    """Query settings for ``rows`` chunks under ``vector_index_plan``'s index; ``None`` for an exact scan.

    ``ef`` (candidates kept while walking a graph) grows with the logarithm of the graph's size
    (100 at 10,000 chunks, 361 at 100,000, 512 from 500,000); every partition is probed (there are
    few: one per ``ROWS_PER_PARTITION`` chunks); the refine step re-ranks ``refine_factor`` x limit
    candidates on the full vectors. Real embeddings need both to keep recall@10 above 0.95.
    """
    plan = vector_index_plan(rows, ann_index_threshold=ann_index_threshold)
    if plan is None:
        return None
    per_graph = rows / plan.num_partitions
    ef = int(min(512, max(100, 100 * math.log2(max(per_graph, 2)) - 1300)))
    return VectorSearchParameters(ef=ef, nprobes=plan.num_partitions, refine_factor=8)


async def refresh_indexes(tables: Tables, *, ann_index_threshold: int) -> int | None:
    """Create missing indexes (the vector one per ``vector_index_plan``), else optimize; the row count.

    A commit conflict with another process's refresh is retried, then left to the next refresh
    (``None``). Afterwards the memory the builders freed goes back to the system
    (``release_free_memory``: a vector index build over 60,000 chunks leaves 90-140 MB free in
    malloc's arenas, which a server would otherwise keep).
    """
    for attempt in range(_ATTEMPTS):
        try:
            rows = await _refresh(tables, ann_index_threshold=ann_index_threshold)
        except RuntimeError as error:
            if not is_commit_conflict(error):
                raise
            if attempt == _ATTEMPTS - 1:
                logger.info("index refresh left to the next one: %s", error)
                return None
            await asyncio.sleep(0.25 * (attempt + 1))
            continue
        await asyncio.to_thread(release_free_memory)
        return rows
    return None


async def _refresh(tables: Tables, *, ann_index_threshold: int) -> int:
    if tables.chunks is None:
        return 0
    async with tables.write_lock:
        chunks = tables.chunks
        indexed = {tuple(ix.columns) for ix in await chunks.list_indices()}
        created = False
        if (FTS_COLUMN,) not in indexed:
            await chunks.create_index(FTS_COLUMN, config=FTS(), replace=True)
            created = True
        if ("document_id",) not in indexed:
            await chunks.create_index("document_id", config=BTree(), replace=True)
            created = True
        if (GROUPS,) not in indexed:  # answers the readers' prefilter (access.Reader.to_sql)
            await chunks.create_index(GROUPS, config=LabelList(), replace=True)
            created = True
        rows = await chunks.count_rows()
        plan = vector_index_plan(rows, ann_index_threshold=ann_index_threshold)
        if ("vector",) not in indexed and plan is not None:
            await chunks.create_index("vector", config=plan.config(), replace=True)
            created = True
        if not created:
            await chunks.optimize(cleanup_older_than=timedelta(minutes=10))
        if tables.documents is not None:
            await tables.documents_version()  # replaces a connection holding too many index versions
        return rows
