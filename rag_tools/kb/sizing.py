"""How a vector search runs, chosen by size: chunks counted in all and per restricted reader.

The vector index and its query settings follow the number of chunks (``indexing``); that count is
cached for ``ROWS_TTL_SECONDS`` (another worker may write meanwhile). A restricted reader of at
most ``RESTRICTED_EXACT_ROWS`` chunks gets an exact scan of its own rows instead of the index: at
100,000 chunks a reader of 10,000 searched in 8.6 ms exactly against 12.2 ms through the filtered
graph, exact either way (bench/RESULTS.md, ``bench/kb.py --restricted``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import lancedb

from .access import Reader
from .indexing import VectorSearchParameters, vector_search_parameters

__all__ = ["RESTRICTED_EXACT_ROWS", "ROWS_TTL_SECONDS", "ChunkCounts", "VectorSearchOverrides"]

ROWS_TTL_SECONDS = 30.0
RESTRICTED_EXACT_ROWS = 15_000
_READERS_KEPT = 1024


@dataclass
class VectorSearchOverrides:
    """Settings that replace the ones chosen by size; ``exact`` makes every vector search a scan."""

    ef: int | None = None
    nprobes: int | None = None
    refine_factor: int | None = None
    exact: bool = False


class ChunkCounts:
    """Chunks in all (key ``None``) and chunks each restricted reader may read (key: its groups),
    each with when it was counted. A knowledge base and its reader views share one."""

    def __init__(self) -> None:
        self._counts: dict[frozenset[str] | None, tuple[float, int]] = {}

    def record(self, rows: int) -> None:
        """The chunk count just read (by an index refresh)."""
        self._counts[None] = (time.monotonic(), rows)

    @property
    def rows(self) -> int:
        """The last count of all chunks (0 before any)."""
        return self._counts[None][1] if None in self._counts else 0

    async def refresh(self, chunks: lancedb.AsyncTable) -> None:
        """Count all chunks again when the cached count is older than ``ROWS_TTL_SECONDS``."""
        cached = self._counts.get(None)
        if cached is None or time.monotonic() - cached[0] > ROWS_TTL_SECONDS:
            self.record(await chunks.count_rows())

    async def for_reader(self, chunks: lancedb.AsyncTable, reader: Reader) -> int:
        """How many chunks a restricted reader may read (counted at most every 30 s per reader)."""
        groups = reader.groups
        assert groups is not None, "only restricted readers are counted"
        cached = self._counts.get(groups)
        if cached is None or time.monotonic() - cached[0] > ROWS_TTL_SECONDS:
            if len(self._counts) > _READERS_KEPT:
                self._counts = {k: v for k, v in self._counts.items() if k is None}
            cached = self._counts[groups] = (time.monotonic(), await chunks.count_rows(reader.to_sql()))
        return cached[1]

    def parameters(
        self, overrides: VectorSearchOverrides, *, ann_index_threshold: int
    ) -> VectorSearchParameters | None:
        """The vector query settings for the last count and ``overrides``; ``None`` for an exact scan."""
        if overrides.exact:
            return None
        chosen = vector_search_parameters(self.rows, ann_index_threshold=ann_index_threshold)
        if chosen is None:
            return None
        return VectorSearchParameters(
            ef=overrides.ef or chosen.ef,
            nprobes=overrides.nprobes or chosen.nprobes,
            refine_factor=overrides.refine_factor or chosen.refine_factor,
        )

    async def for_search(
        self,
        chunks: lancedb.AsyncTable,
        reader: Reader,
        overrides: VectorSearchOverrides,
        *,
        ann_index_threshold: int,
    ) -> VectorSearchParameters | None:
        """The settings a search by ``reader`` uses now: counts refreshed, few own rows scanned exactly."""
        await self.refresh(chunks)
        parameters = self.parameters(overrides, ann_index_threshold=ann_index_threshold)
        if (
            parameters is not None
            and not reader.reads_all
            and await self.for_reader(chunks, reader) <= RESTRICTED_EXACT_ROWS
        ):
            return None  # few rows of its own: scanning them exactly is faster than the graph
        return parameters
