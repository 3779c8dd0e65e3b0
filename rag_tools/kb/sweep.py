"""The orphan sweep: rows of documents that were never published, left by a write that stopped.

A write stores a document's original file first, then its chunks, then publishes it with its
``documents`` row (rag_tools/kb/NOTES.md). A process that dies (or a store that goes away) between
the first write and the publication leaves an original and chunks nobody can see: a retry of the
same document replaces them, but a new upload that is never retried keeps them forever. The sweep
removes them once they are older than an age floor (``written_at``), so a write still in flight, in
this process or another, is never touched: its rows are younger, and the age is part of each delete.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from .filters import in_list, sql_literal
from .tables import WRITTEN_AT, Tables

__all__ = ["sweep_orphans"]

_BATCH = 500


async def sweep_orphans(tables: Tables, min_age_seconds: float) -> list[str]:
    """Remove the original files and chunks of unpublished documents written more than
    ``min_age_seconds`` ago; the ids of the documents swept, sorted.

    Candidates come from the ``files`` table (one row per document, written first), so chunks
    whose original is gone already, or rows without ``written_at`` (written before the column
    existed), are left alone.
    """
    if tables.files is None:
        return []
    cutoff = datetime.now(UTC) - timedelta(seconds=min_age_seconds)
    old = f"{WRITTEN_AT} < TIMESTAMP {sql_literal(cutoff.strftime('%Y-%m-%d %H:%M:%S.%f'))}"
    rows = await tables.files.query().where(old).select(["document_id"]).to_list()
    candidates = sorted({row["document_id"] for row in rows})
    orphans: list[str] = []
    for start in range(0, len(candidates), _BATCH):
        batch = candidates[start : start + _BATCH]
        published: set[str] = set()
        if tables.documents is not None:
            query = tables.documents.query().where(in_list("document_id", batch)).select(["document_id"])
            published = {row["document_id"] for row in await query.to_list()}
        orphans += [i for i in batch if i not in published]
    async with tables.write_lock:  # no write of this process interleaves; others are younger
        for start in range(0, len(orphans), _BATCH):
            predicate = f"{in_list('document_id', orphans[start : start + _BATCH])} AND {old}"
            if tables.chunks is not None:  # chunks first: an interrupted sweep finds the file again
                await tables.chunks.delete(predicate)
            await tables.files.delete(predicate)
    return orphans
