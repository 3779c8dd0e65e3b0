"""Search over the chunks table: hybrid (vector + full-text, RRF), vector or text, with context.

Only chunks the reader may read are searched (``access.Reader``: a predicate inside the query, so
the top-k are the reader's own), and each hit is checked again against its document's row, which
decides (a change of groups is published by the ``documents`` commit, before the chunks follow).
Only chunks of a document's published version count (``Tables.published``): chunks of a version
being written, or left by an interrupted write, are passed over; a search that read the chunks
just before a replace published reads them again, so it finds one whole version, never none.
Context expansion grows each hit with neighbouring chunks of the same section (alternately after
and before it) while they fit in the requested number of characters.
"""

from __future__ import annotations

import textwrap
from collections.abc import Awaitable, Callable
from typing import Any

import lancedb
from lancedb.rerankers import Reranker

from ..config import SearchMode
from .access import ALL, Reader
from .filters import FilterLike, all_of, as_filter, sql_literal
from .fusion import DEFAULT_FUSION, Fusion
from .indexing import VectorSearchParameters
from .ingestion import search_text
from .models import SearchHit
from .reranking import DEFAULT_RERANK_DEPTH, rerank_hits
from .tables import FTS_COLUMN, HIT_COLUMNS, Tables

__all__ = ["QUERY_CHARS", "hit_from_row", "search_chunks", "searchable_query"]

QUERY_CHARS = 1000
"""The longest query searched. The embedder reads about its first 1,000 characters (256 tokens)
anyway; full-text search over thousands of terms is only slower; and a tool's result that quotes
its query back stays short enough to reach the model whole."""


def searchable_query(query: str, limit: int = 1) -> str:
    """``query``, or its first ``QUERY_CHARS`` characters cut at a word boundary when it is longer.

    A query that is not a string, or a ``limit`` that is not a whole number of at least 1, is an error.
    """
    if not isinstance(query, str):
        raise TypeError(f"query must be a string, not {type(query).__name__}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a whole number of at least 1, not {limit!r}")
    if len(query) <= QUERY_CHARS:
        return query
    return textwrap.shorten(query, QUERY_CHARS, placeholder="") or query[:QUERY_CHARS]


_SCORE_COLUMNS: dict[str, list[str]] = {"vector": ["_distance"], "text": ["_score"], "hybrid": []}


_ROUNDS = 3


async def search_chunks(
    tables: Tables,
    chunks: lancedb.AsyncTable,
    query: str,
    *,
    embed_query: Callable[[str], Awaitable[list[float]]],
    limit: int,
    mode: SearchMode,
    filter: FilterLike | None,
    context_chars: int,
    vector_search: VectorSearchParameters | None,
    reader: Reader = ALL,
    fusion: Fusion = DEFAULT_FUSION,
    reranker: Reranker | None = None,
    rerank_depth: int = DEFAULT_RERANK_DEPTH,
) -> list[SearchHit]:
    """The ``limit`` best chunks for ``query`` in ``mode`` that ``reader`` may read, expanded when
    ``context_chars`` > 0.

    ``vector_search`` tunes the vector index's search; ``None`` scans every vector exactly. In
    ``hybrid`` mode each half ranks ``fusion.candidates`` chunks (at least ``limit``) and ``fusion``
    fuses them. A ``reranker`` reorders the best ``rerank_depth`` (at least ``limit``) before the
    ``limit`` best are kept.
    """
    restriction = as_filter(filter)
    predicate = all_of(restriction.to_sql() if restriction is not None else None, reader.to_sql())
    if mode not in ("hybrid", "vector", "text"):
        raise ValueError(f"unknown search mode {mode!r}; use hybrid, vector or text")
    vector = None if mode == "text" else await embed_query(query)

    def build(fetch: int) -> Any:
        if vector is None:
            builder: Any = chunks.query().nearest_to_text(query, columns=FTS_COLUMN)
        else:
            builder = _vector_query(chunks, vector, vector_search, fetch)
            if mode == "hybrid":
                builder = builder.nearest_to_text(query, columns=FTS_COLUMN).rerank(fusion.reranker())
        if predicate:
            builder = builder.where(predicate)
        return builder.select([*HIT_COLUMNS, *_SCORE_COLUMNS[mode]]).limit(fetch)

    wanted = max(limit, rerank_depth) if reranker is not None else limit
    fetch = max(wanted, fusion.candidates) if mode == "hybrid" else wanted
    for _ in range(_ROUNDS):  # unpublished chunks are rare: fetch more only when some were passed over
        rows = await build(fetch).to_list()
        published = await tables.published_access({row["document_id"] for row in rows})
        kept = [r for r in rows if _visible(r, published.get(r["document_id"]), reader)]
        if len(kept) >= wanted or (len(rows) < fetch and not _read_before_publication(rows, published)):
            break
        fetch = fetch * 2 + len(rows) - len(kept)
    hits = [hit_from_row(row, mode) for row in kept[:wanted]]
    if reranker is not None:
        texts = [search_text(h.title, h.headings, h.text) for h in hits]
        hits = (await rerank_hits(reranker, query, hits, texts))[:limit]
    if context_chars > 0 and hits:
        await _expand(chunks, hits, context_chars)
    return hits


def _visible(row: dict[str, Any], published: tuple[str, list[str] | None] | None, reader: Reader) -> bool:
    """The chunk belongs to its document's published version, which ``reader`` may read."""
    return (
        published is not None and row["chunk_id"].startswith(published[0]) and reader.may_read(published[1])
    )


def _read_before_publication(rows: list[dict[str, Any]], published: dict[str, tuple[str, Any]]) -> bool:
    """Some document's rows are all of a version other than its published one.

    The chunks were read before a replace wrote its version and ``documents`` after it published
    (and maybe deleted the old chunks): read again, the chunks hold the published version. Rows an
    interrupted write left look the same until the sweep, so this costs at most ``_ROUNDS`` reads.
    """
    current: set[str] = set()
    other: set[str] = set()
    for row in rows:
        version = published.get(row["document_id"])
        if version is not None:
            (current if row["chunk_id"].startswith(version[0]) else other).add(row["document_id"])
    return bool(other - current)


def _vector_query(
    chunks: lancedb.AsyncTable, vector: list[float], settings: VectorSearchParameters | None, fetch: int
) -> Any:
    builder = chunks.query().nearest_to(vector).distance_type("cosine")
    if settings is None:
        return builder.bypass_vector_index()
    if settings.ef:  # the graph walk keeps at least the rows asked for (refine_factor times those)
        builder = builder.ef(max(settings.ef, fetch * (settings.refine_factor or 1)))
    if settings.nprobes:
        builder = builder.nprobes(settings.nprobes)
    if settings.refine_factor:
        builder = builder.refine_factor(settings.refine_factor)
    return builder


def hit_from_row(row: dict[str, Any], mode: SearchMode | None) -> SearchHit:
    """A hit from a chunks row; the score is normalised so that higher is better in every mode."""
    if mode == "hybrid":
        score = float(row.get("_relevance_score", 0.0))
    elif mode == "vector":
        score = 1.0 - float(row.get("_distance", 1.0))
    elif mode == "text":
        score = float(row.get("_score", 0.0))
    else:
        score = 0.0
    return SearchHit(**{k: row[k] for k in HIT_COLUMNS if row[k] is not None}, score=score)


async def _expand(chunks: lancedb.AsyncTable, hits: list[SearchHit], max_chars: int) -> None:
    groups = {(h.document_id, _version(h.chunk_id), h.section) for h in hits}
    predicate = " OR ".join(
        f"(document_id = {sql_literal(d)} AND starts_with(chunk_id, {sql_literal(v)}) AND section = {s})"
        for d, v, s in groups
    )
    rows = (
        await chunks.query().where(predicate).select(["document_id", "section", "position", "text"]).to_list()
    )
    by_section: dict[tuple[str, int], dict[int, str]] = {}
    for row in rows:
        by_section.setdefault((row["document_id"], row["section"]), {})[row["position"]] = row["text"]
    for hit in hits:
        hit.context = _grow(
            by_section.get((hit.document_id, hit.section), {}), hit.position, hit.text, max_chars
        )


def _version(chunk_id: str) -> str:
    """The version prefix of a chunk id (everything up to its position)."""
    return chunk_id[: chunk_id.rindex(":") + 1]


def _grow(section: dict[int, str], position: int, text: str, max_chars: int) -> str:
    """The hit plus neighbours taken alternately after and before it while they fit in ``max_chars``."""
    parts = {position: text}
    size = len(text)
    before, after = position - 1, position + 1
    while before in section or after in section:
        grew = False
        for pos in (after, before):
            if pos in section and size + len(section[pos]) <= max_chars:
                parts[pos] = section[pos]
                size += len(section[pos])
                grew = True
        if not grew:
            break
        before, after = before - 1, after + 1
    return "\n\n".join(parts[p] for p in sorted(parts))
