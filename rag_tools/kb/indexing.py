"""Index maintenance on the chunks table: full-text and id indexes always, the ANN index past a size.

Indexes are created once; afterwards ``optimize`` folds new rows into them and compacts the small
fragments that each write commit leaves behind. Another process refreshing the same knowledge base
at the same time (two hosts ingesting into one store) makes LanceDB refuse one of the commits as a
conflict: the refresh is tried again, and if it keeps conflicting it is left to the next one (rows
not yet indexed are still searched, by a scan).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from lancedb.index import FTS, BTree, HnswSq

from .errors import is_commit_conflict
from .tables import FTS_COLUMN, Tables

__all__ = ["refresh_indexes"]

logger = logging.getLogger("ragstream.kb")

_ATTEMPTS = 4


async def refresh_indexes(tables: Tables, *, ann_index_threshold: int) -> None:
    """Create missing indexes (the HNSW-SQ one once ``ann_index_threshold`` chunks exist), else optimize.

    A commit conflict with another process's refresh is retried, then left to the next refresh.
    """
    for attempt in range(_ATTEMPTS):
        try:
            await _refresh(tables, ann_index_threshold=ann_index_threshold)
            return
        except RuntimeError as error:
            if not is_commit_conflict(error):
                raise
            if attempt == _ATTEMPTS - 1:
                logger.info("index refresh left to the next one: %s", error)
                return
            await asyncio.sleep(0.25 * (attempt + 1))


async def _refresh(tables: Tables, *, ann_index_threshold: int) -> None:
    if tables.chunks is None:
        return
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
        rows = await chunks.count_rows()
        if ("vector",) not in indexed and ann_index_threshold and rows >= ann_index_threshold:
            await chunks.create_index("vector", config=HnswSq(distance_type="cosine"), replace=True)
            created = True
        if not created:
            await chunks.optimize(cleanup_older_than=timedelta(minutes=10))
