"""Index maintenance on the chunks table: full-text and id indexes always, the ANN index past a size.

Indexes are created once; afterwards ``optimize`` folds new rows into them and compacts the small
fragments that each write commit leaves behind.
"""

from __future__ import annotations

from datetime import timedelta

from lancedb.index import FTS, BTree, HnswSq

from .tables import FTS_COLUMN, Tables

__all__ = ["refresh_indexes"]


async def refresh_indexes(tables: Tables, *, ann_index_threshold: int) -> None:
    """Create missing indexes (the HNSW-SQ one once ``ann_index_threshold`` chunks exist), else optimize."""
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
