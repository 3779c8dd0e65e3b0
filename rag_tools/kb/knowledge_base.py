"""The knowledge base: documents and chunks in LanceDB, ingestion, hybrid search, lookup.

``KnowledgeBase`` is an async client over an embedded LanceDB directory (or any LanceDB URI).
Three tables live there: ``documents`` (one row per source, with its full text), ``chunks`` (text,
vector, position, headings, page) and ``meta`` (which embedder built the vectors).

Replacing a changed document is one ``merge_insert`` commit on ``chunks`` (insert the new chunks,
delete the document's old ones), so a concurrent search sees the old version or the new one,
never both and never neither.
"""

from __future__ import annotations

import asyncio
import functools
import glob
import hashlib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import lancedb
import pyarrow as pa
from lancedb.index import FTS, BTree, HnswSq
from lancedb.rerankers import RRFReranker
from pydantic_ai.embeddings import EmbeddingModel

from ..config import RagConfig, SearchMode
from ..embeddings import DEFAULT_EMBEDDER, embedder_name, resolve_embedding_model
from .chunking import ChunkDraft, chunk_document
from .filters import Filter, sql_literal
from .models import Document, DocumentPage, IngestOutcome, IngestReport, SearchHit
from .readers import SUPPORTED_SUFFIXES, ParsedDocument, detect_format, parse_document

__all__ = ["EmbedderMismatchError", "KnowledgeBase", "KnowledgeBaseError", "KnowledgeBaseUnavailable"]

_CHUNKS = "chunks"
_DOCUMENTS = "documents"
_META = "meta"
_FTS_COLUMN = "search_text"
_HIT_COLUMNS = ["chunk_id", "document_id", "title", "uri", "text", "headings", "page", "position", "section"]
_SCORE_COLUMNS: dict[str, list[str]] = {"vector": ["_distance"], "text": ["_score"], "hybrid": []}
_DOC_COLUMNS = [
    "document_id",
    "uri",
    "title",
    "format",
    "content_hash",
    "chunk_count",
    "size_chars",
    "updated_at",
]
_WRITE_BATCH_CHUNKS = 2000
_FORMAT_VERSION = "1"
_GLOB_CHARS = frozenset("*?[")


class KnowledgeBaseError(RuntimeError):
    """The knowledge base cannot do what was asked (missing, unreadable, misconfigured)."""


class EmbedderMismatchError(KnowledgeBaseError):
    """The knowledge base was built with another embedder; its vectors are not comparable."""


class KnowledgeBaseUnavailable(KnowledgeBaseError):
    """The knowledge base's files could not be read or written (moved, deleted, unreadable, full).

    LanceDB reports such failures as ``OSError`` or ``RuntimeError("lance error: ...")``; every public
    method of ``KnowledgeBase`` turns them into this one type so that callers can tell "the knowledge
    base is unavailable" from a bug.
    """


_P = ParamSpec("_P")
_T = TypeVar("_T")


def _storage_errors(
    method: Callable[Concatenate[KnowledgeBase, _P], Awaitable[_T]],
) -> Callable[Concatenate[KnowledgeBase, _P], Awaitable[_T]]:
    @functools.wraps(method)
    async def wrapper(self: KnowledgeBase, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return await method(self, *args, **kwargs)
        except KnowledgeBaseError:
            raise
        except (OSError, RuntimeError) as error:
            raise KnowledgeBaseUnavailable(
                f"the knowledge base at {self.uri} is unavailable: {error}"
            ) from error

    return wrapper


@dataclass
class _Prepared:
    outcome: IngestOutcome
    doc_row: dict[str, Any]
    chunk_rows: list[dict[str, Any]]


def _documents_schema() -> pa.Schema:
    return pa.schema(
        [
            pa.field("document_id", pa.string(), nullable=False),
            pa.field("uri", pa.string(), nullable=False),
            pa.field("title", pa.string(), nullable=False),
            pa.field("format", pa.string(), nullable=False),
            pa.field("content_hash", pa.string(), nullable=False),
            pa.field("chunk_count", pa.int32(), nullable=False),
            pa.field("size_chars", pa.int64(), nullable=False),
            pa.field("updated_at", pa.timestamp("us", tz="UTC"), nullable=False),
            pa.field("content", pa.large_string(), nullable=False),
        ]
    )


def _chunks_schema(dimensions: int) -> pa.Schema:
    return pa.schema(
        [
            pa.field("chunk_id", pa.string(), nullable=False),
            pa.field("document_id", pa.string(), nullable=False),
            pa.field("title", pa.string(), nullable=False),
            pa.field("uri", pa.string(), nullable=False),
            pa.field("position", pa.int32(), nullable=False),
            pa.field("section", pa.int32(), nullable=False),
            pa.field("headings", pa.list_(pa.string()), nullable=False),
            pa.field("page", pa.int32(), nullable=True),
            pa.field("text", pa.string(), nullable=False),
            pa.field(_FTS_COLUMN, pa.string(), nullable=False),
            pa.field("vector", pa.list_(pa.float32(), dimensions), nullable=False),
        ]
    )


def document_id_for(uri: str) -> str:
    """The stable id of the document at ``uri``: re-ingesting the same uri updates the same document."""
    return hashlib.sha256(uri.encode()).hexdigest()[:24]


def _search_text(title: str, headings: Sequence[str], text: str) -> str:
    return "\n".join(part for part in (title, " / ".join(headings), text) if part)


class KnowledgeBase:
    """Async client over a LanceDB knowledge base.

    Use as ``async with KnowledgeBase(path) as kb:``. Opening an existing knowledge base with an
    embedder other than the one that built it raises ``EmbedderMismatchError``.
    """

    def __init__(
        self,
        uri: str | Path,
        *,
        embedder: str | EmbeddingModel = DEFAULT_EMBEDDER,
        chunk_max_chars: int = 1200,
        ann_index_threshold: int = 50_000,
        ann_ef: int = 200,
        ann_refine_factor: int | None = 4,
        read_consistency_interval: timedelta | None = timedelta(0),
    ) -> None:
        self.uri = str(uri)
        self.embedding_model = resolve_embedding_model(embedder)
        self.embedder = embedder_name(self.embedding_model)
        self.chunk_max_chars = chunk_max_chars
        self.ann_index_threshold = ann_index_threshold
        self.ann_ef = ann_ef
        self.ann_refine_factor = ann_refine_factor
        self._read_consistency_interval = read_consistency_interval
        self._db: lancedb.AsyncConnection | None = None
        self._chunks: lancedb.AsyncTable | None = None
        self._documents: lancedb.AsyncTable | None = None
        self._dimensions: int | None = None
        self._write_lock = asyncio.Lock()

    @classmethod
    def from_config(cls, config: RagConfig) -> KnowledgeBase:
        """A knowledge base at ``config.resolved_kb_uri`` with the configured embedder and bounds."""
        return cls(
            config.resolved_kb_uri,
            embedder=config.embedder,
            chunk_max_chars=config.chunk_max_chars,
            ann_index_threshold=config.ann_index_threshold,
        )

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> KnowledgeBase:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    @_storage_errors
    async def open(self) -> None:
        """Connect, and check that the stored vectors were made by this embedder."""
        if self._db is not None:
            return
        if "://" not in self.uri:
            Path(self.uri).mkdir(parents=True, exist_ok=True)
        self._db = await lancedb.connect_async(
            self.uri, read_consistency_interval=self._read_consistency_interval
        )
        names = set((await self._db.list_tables()).tables)
        if _META in names:
            meta = await self._read_meta()
            stored = meta.get("embedder")
            if stored and stored != self.embedder:
                raise EmbedderMismatchError(
                    f"the knowledge base at {self.uri} was built with embedder {stored!r} "
                    f"({meta.get('dimensions')} dimensions); the configured embedder is {self.embedder!r}. "
                    "Use the original embedder, or re-ingest into a new data directory."
                )
            self._dimensions = int(meta["dimensions"]) if "dimensions" in meta else None
        if _CHUNKS in names:
            self._chunks = await self._db.open_table(_CHUNKS)
        if _DOCUMENTS in names:
            self._documents = await self._db.open_table(_DOCUMENTS)

    def close(self) -> None:
        """Release the connection; the object can be opened again."""
        for table in (self._chunks, self._documents):
            if table is not None:
                table.close()
        if self._db is not None:
            self._db.close()
        self._db = self._chunks = self._documents = None

    @property
    def dimensions(self) -> int | None:
        """The vector dimension recorded with the knowledge base (``None`` before the first write)."""
        return self._dimensions

    def _require_open(self) -> lancedb.AsyncConnection:
        if self._db is None:
            raise KnowledgeBaseError("the knowledge base is not open; use 'async with KnowledgeBase(...)'")
        return self._db

    async def _read_meta(self) -> dict[str, str]:
        table = await self._require_open().open_table(_META)
        try:
            rows = await table.query().to_list()
        finally:
            table.close()
        return {row["key"]: row["value"] for row in rows}

    async def _ensure_tables(self, dimensions: int) -> tuple[lancedb.AsyncTable, lancedb.AsyncTable]:
        db = self._require_open()
        if self._dimensions is not None and self._dimensions != dimensions:
            raise EmbedderMismatchError(
                f"the knowledge base at {self.uri} holds {self._dimensions}-dimensional vectors but "
                f"{self.embedder!r} produced {dimensions}; re-ingest into a new data directory."
            )
        if self._dimensions is None:
            meta = [
                {"key": "embedder", "value": self.embedder},
                {"key": "dimensions", "value": str(dimensions)},
                {"key": "format_version", "value": _FORMAT_VERSION},
            ]
            await db.create_table(_META, data=meta, mode="overwrite")
            self._dimensions = dimensions
        if self._chunks is None:
            self._chunks = await db.create_table(_CHUNKS, schema=_chunks_schema(dimensions), exist_ok=True)
        if self._documents is None:
            self._documents = await db.create_table(_DOCUMENTS, schema=_documents_schema(), exist_ok=True)
        return self._chunks, self._documents

    # -- ingestion ---------------------------------------------------------------------------

    @_storage_errors
    async def ingest_paths(
        self,
        paths: Iterable[str | Path],
        *,
        on_progress: Callable[[IngestOutcome], None] | None = None,
        on_plan: Callable[[int], None] | None = None,
    ) -> IngestReport:
        """Ingest files, folders (recursively) and glob patterns.

        An unreadable, missing or unsupported source becomes an ``error`` outcome and the rest are
        still ingested. ``on_plan`` receives the number of sources, ``on_progress`` each outcome.
        """
        sources = _expand_sources(paths)
        if on_plan:
            on_plan(len(sources))
        report = IngestReport()
        pending: list[_Prepared] = []
        for source in sources:
            if isinstance(source, IngestOutcome):
                outcome = source
            else:
                outcome, prepared = await self._prepare_file(source)
                if prepared is not None:
                    pending.append(prepared)
                    if sum(len(p.chunk_rows) for p in pending) >= _WRITE_BATCH_CHUNKS:
                        await self._write(pending)
                        pending = []
            report.outcomes.append(outcome)
            if on_progress:
                on_progress(outcome)
        if pending:
            await self._write(pending)
        await self.refresh_indexes()
        return report

    async def ingest_file(self, path: str | Path) -> IngestOutcome:
        """Ingest one file; see ``ingest_paths``."""
        report = await self.ingest_paths([path])
        return report.outcomes[0]

    @_storage_errors
    async def ingest_bytes(
        self,
        data: bytes,
        *,
        name: str,
        uri: str | None = None,
        title: str | None = None,
    ) -> IngestOutcome:
        """Ingest an in-memory source (an upload); ``name``'s suffix gives the format."""
        try:
            prepared = await self._prepare(data, source=name, uri=uri or f"upload://{name}", title=title)
        except (ValueError, UnicodeError) as exc:
            return IngestOutcome(source=name, status="error", error=str(exc))
        if prepared.outcome.status != "unchanged":
            await self._write([prepared])
            await self.refresh_indexes()
        return prepared.outcome

    async def _prepare_file(self, path: Path) -> tuple[IngestOutcome, _Prepared | None]:
        source = str(path)
        try:
            detect_format(path.name)
            data = await asyncio.to_thread(path.read_bytes)
            prepared = await self._prepare(data, source=source, uri=path.resolve().as_uri())
        except (OSError, ValueError, UnicodeError) as exc:
            message = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            return IngestOutcome(source=source, status="error", error=message), None
        if prepared.outcome.status == "unchanged":
            return prepared.outcome, None
        return prepared.outcome, prepared

    async def _prepare(self, data: bytes, *, source: str, uri: str, title: str | None = None) -> _Prepared:
        await self.open()
        document_id = document_id_for(uri)
        fmt = detect_format(source)
        content_hash = hashlib.sha256(
            data + f"|{fmt}|{self.chunk_max_chars}|{_FORMAT_VERSION}".encode()
        ).hexdigest()
        existing = await self.get_document_by_id(document_id)
        if existing is not None and existing.content_hash == content_hash and title in (None, existing.title):
            return _Prepared(
                IngestOutcome(
                    source=source,
                    status="unchanged",
                    document_id=document_id,
                    title=existing.title,
                    chunks=existing.chunk_count,
                ),
                {},
                [],
            )
        parsed: ParsedDocument = await asyncio.to_thread(parse_document, data, name=source, format=fmt)
        if title:
            parsed.title = title
        drafts = chunk_document(parsed, max_chars=self.chunk_max_chars)
        vectors = await self._embed_documents(
            [_search_text(parsed.title, d.headings, d.text) for d in drafts]
        )
        chunk_rows = [
            _chunk_row(document_id, content_hash, parsed, uri, draft, vector)
            for draft, vector in zip(drafts, vectors, strict=True)
        ]
        doc_row = {
            "document_id": document_id,
            "uri": uri,
            "title": parsed.title,
            "format": parsed.format,
            "content_hash": content_hash,
            "chunk_count": len(chunk_rows),
            "size_chars": len(parsed.content),
            "updated_at": datetime.now(UTC),
            "content": parsed.content,
        }
        outcome = IngestOutcome(
            source=source,
            status="updated" if existing is not None else "added",
            document_id=document_id,
            title=parsed.title,
            chunks=len(chunk_rows),
        )
        return _Prepared(outcome, doc_row, chunk_rows)

    async def _embed_documents(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        result = await self.embedding_model.embed(texts, input_type="document")
        return [list(v) for v in result.embeddings]

    async def embed_query(self, query: str) -> list[float]:
        """The query vector, checked against the knowledge base's dimension."""
        result = await self.embedding_model.embed(query, input_type="query")
        vector = list(result.embeddings[0])
        if self._dimensions is not None and len(vector) != self._dimensions:
            raise EmbedderMismatchError(
                f"the knowledge base holds {self._dimensions}-dimensional vectors but {self.embedder!r} "
                f"produced {len(vector)}"
            )
        return vector

    async def _write(self, batch: list[_Prepared]) -> None:
        """Write documents and replace their chunks; one ``chunks`` commit for the whole batch."""
        unique = {p.doc_row["document_id"]: p for p in batch}
        rows = [row for p in unique.values() for row in p.chunk_rows]
        dimensions = len(rows[0]["vector"]) if rows else self._dimensions
        async with self._write_lock:
            if dimensions is None:  # only empty documents so far: anything can be recorded later
                dimensions = len(await self.embed_query("dimension probe"))
            chunks, documents = await self._ensure_tables(dimensions)
            ids = ", ".join(sql_literal(i) for i in unique)
            if rows:
                await (
                    chunks.merge_insert("chunk_id")
                    .when_matched_update_all()
                    .when_not_matched_insert_all()
                    .when_not_matched_by_source_delete(f"document_id IN ({ids})")
                    .execute(pa.Table.from_pylist(rows, schema=_chunks_schema(dimensions)))
                )
            else:
                await chunks.delete(f"document_id IN ({ids})")
            await (
                documents.merge_insert("document_id")
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute(
                    pa.Table.from_pylist([p.doc_row for p in unique.values()], schema=_documents_schema())
                )
            )

    @_storage_errors
    async def refresh_indexes(self) -> None:
        """Keep indexes current: full-text and id indexes always, the ANN index past the threshold."""
        if self._chunks is None:
            return
        async with self._write_lock:
            chunks = self._chunks
            indexed = {tuple(ix.columns) for ix in await chunks.list_indices()}
            created = False
            if (_FTS_COLUMN,) not in indexed:
                await chunks.create_index(_FTS_COLUMN, config=FTS(), replace=True)
                created = True
            if ("document_id",) not in indexed:
                await chunks.create_index("document_id", config=BTree(), replace=True)
                created = True
            rows = await chunks.count_rows()
            if ("vector",) not in indexed and self.ann_index_threshold and rows >= self.ann_index_threshold:
                await chunks.create_index("vector", config=HnswSq(distance_type="cosine"), replace=True)
                created = True
            if not created:
                await chunks.optimize(cleanup_older_than=timedelta(minutes=10))

    @_storage_errors
    async def delete_document(self, document_id_or_uri: str) -> bool:
        """Remove a document and its chunks; ``False`` when there was no such document."""
        doc = await self.get_document_by_id(document_id_or_uri) or await self._document_where(
            f"uri = {sql_literal(document_id_or_uri)}"
        )
        if doc is None or self._chunks is None or self._documents is None:
            return False
        predicate = f"document_id = {sql_literal(doc.document_id)}"
        async with self._write_lock:
            await self._chunks.delete(predicate)
            await self._documents.delete(predicate)
        return True

    # -- search ------------------------------------------------------------------------------

    @_storage_errors
    async def search(
        self,
        query: str,
        *,
        limit: int = 5,
        mode: SearchMode = "hybrid",
        filter: Filter | None = None,
        context_chars: int = 0,
    ) -> list[SearchHit]:
        """The ``limit`` best chunks for ``query``.

        ``hybrid`` fuses vector and full-text rankings (reciprocal rank fusion); ``vector`` and
        ``text`` use one of them. With ``context_chars`` each hit's ``context`` holds the hit
        surrounded by neighbouring chunks of its section, up to that many characters.
        """
        await self.open()
        if self._chunks is None or not query.strip():
            return []
        predicate = filter.to_sql() if filter is not None else None
        table = self._chunks
        if mode == "text":
            builder: Any = table.query().nearest_to_text(query, columns=_FTS_COLUMN)
        else:
            vector = await self.embed_query(query)
            builder = table.query().nearest_to(vector).distance_type("cosine").ef(self.ann_ef)
            if self.ann_refine_factor:
                builder = builder.refine_factor(self.ann_refine_factor)
            if mode == "hybrid":
                builder = builder.nearest_to_text(query, columns=_FTS_COLUMN).rerank(RRFReranker())
            elif mode != "vector":
                raise ValueError(f"unknown search mode {mode!r}; use hybrid, vector or text")
        if predicate:
            builder = builder.where(predicate)
        rows = await builder.select([*_HIT_COLUMNS, *_SCORE_COLUMNS[mode]]).limit(limit).to_list()
        hits = [_hit(row, mode) for row in rows]
        if context_chars > 0 and hits:
            await self._expand(hits, context_chars)
        return hits

    async def _expand(self, hits: list[SearchHit], max_chars: int) -> None:
        assert self._chunks is not None
        groups = {(h.document_id, h.section) for h in hits}
        predicate = " OR ".join(f"(document_id = {sql_literal(d)} AND section = {s})" for d, s in groups)
        rows = (
            await self._chunks.query()
            .where(predicate)
            .select(["document_id", "section", "position", "text"])
            .to_list()
        )
        by_section: dict[tuple[str, int], dict[int, str]] = {}
        for row in rows:
            by_section.setdefault((row["document_id"], row["section"]), {})[row["position"]] = row["text"]
        for hit in hits:
            hit.context = _grow(
                by_section.get((hit.document_id, hit.section), {}), hit.position, hit.text, max_chars
            )

    # -- documents ---------------------------------------------------------------------------

    @_storage_errors
    async def list_documents(
        self, page: int = 1, page_size: int = 50, *, filter: Filter | None = None
    ) -> DocumentPage:
        """Documents ordered by title (case-insensitive), then uri; ``page`` counts from 1."""
        if page < 1 or page_size < 1:
            raise ValueError("page and page_size must be at least 1")
        docs = await self._documents_where(filter.to_sql() if filter else None)
        docs.sort(key=lambda d: (d.title.casefold(), d.uri))
        start = (page - 1) * page_size
        return DocumentPage(
            documents=docs[start : start + page_size], page=page, page_size=page_size, total=len(docs)
        )

    @_storage_errors
    async def get_document(
        self, query: str, *, filter: Filter | None = None, with_content: bool = True
    ) -> Document | None:
        """Find a document by exact uri, else partial uri, else partial title (case-insensitive).

        Among several partial matches the shortest (most specific) uri or title wins, then the
        alphabetical order.
        """
        if not query.strip():
            return None
        restrict = filter.to_sql() if filter else None
        needle = sql_literal(query.lower())
        for predicate, key in (
            (f"uri = {sql_literal(query)}", None),
            (f"strpos(lower(uri), {needle}) > 0", "uri"),
            (f"strpos(lower(title), {needle}) > 0", "title"),
        ):
            where = f"({predicate}) AND {restrict}" if restrict else predicate
            docs = await self._documents_where(where)
            if docs:
                if key:
                    docs.sort(key=lambda d: (len(getattr(d, key)), getattr(d, key).casefold(), d.uri))
                doc = docs[0]
                return (
                    await self.get_document_by_id(doc.document_id, with_content=True) if with_content else doc
                )
        return None

    @_storage_errors
    async def get_document_by_id(self, document_id: str, *, with_content: bool = False) -> Document | None:
        """The document with this id, or ``None``."""
        return await self._document_where(
            f"document_id = {sql_literal(document_id)}", with_content=with_content
        )

    @_storage_errors
    async def get_chunks(self, document_id: str) -> list[SearchHit]:
        """A document's chunks in document order (``score`` is 0)."""
        await self.open()
        if self._chunks is None:
            return []
        rows = (
            await self._chunks.query()
            .where(f"document_id = {sql_literal(document_id)}")
            .select(_HIT_COLUMNS)
            .to_list()
        )
        rows.sort(key=lambda r: r["position"])
        return [SearchHit(**{k: r[k] for k in _HIT_COLUMNS}, score=0.0) for r in rows]

    @_storage_errors
    async def count_documents(self) -> int:
        await self.open()
        return await self._documents.count_rows() if self._documents is not None else 0

    @_storage_errors
    async def count_chunks(self) -> int:
        await self.open()
        return await self._chunks.count_rows() if self._chunks is not None else 0

    async def _document_where(self, predicate: str, *, with_content: bool = False) -> Document | None:
        docs = await self._documents_where(predicate, with_content=with_content, limit=1)
        return docs[0] if docs else None

    async def _documents_where(
        self, predicate: str | None, *, with_content: bool = False, limit: int | None = None
    ) -> list[Document]:
        await self.open()
        if self._documents is None:
            return []
        query = self._documents.query().select([*_DOC_COLUMNS, "content"] if with_content else _DOC_COLUMNS)
        if predicate:
            query = query.where(predicate)
        if limit:
            query = query.limit(limit)
        return [Document(**row) for row in await query.to_list()]


def _chunk_row(
    document_id: str,
    content_hash: str,
    parsed: ParsedDocument,
    uri: str,
    draft: ChunkDraft,
    vector: list[float],
) -> dict[str, Any]:
    return {
        "chunk_id": f"{document_id}:{content_hash[:12]}:{draft.position}",
        "document_id": document_id,
        "title": parsed.title,
        "uri": uri,
        "position": draft.position,
        "section": draft.section,
        "headings": draft.headings,
        "page": draft.page,
        "text": draft.text,
        _FTS_COLUMN: _search_text(parsed.title, draft.headings, draft.text),
        "vector": vector,
    }


def _hit(row: dict[str, Any], mode: SearchMode) -> SearchHit:
    if mode == "hybrid":
        score = float(row.get("_relevance_score", 0.0))
    elif mode == "vector":
        score = 1.0 - float(row.get("_distance", 1.0))
    else:
        score = float(row.get("_score", 0.0))
    return SearchHit(**{k: row[k] for k in _HIT_COLUMNS}, score=score)


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


def _expand_sources(paths: Iterable[str | Path]) -> list[Path | IngestOutcome]:
    """Files to ingest, in a stable order; problems become error outcomes in place."""
    seen: set[Path] = set()
    result: list[Path | IngestOutcome] = []

    def add(path: Path) -> None:
        key = path.resolve()
        if key not in seen:
            seen.add(key)
            result.append(path)

    for entry in paths:
        text = str(entry)
        path = Path(text)
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                rel = child.relative_to(path).parts
                if (
                    child.is_file()
                    and child.suffix.lower() in SUPPORTED_SUFFIXES
                    and not any(p.startswith(".") for p in rel)
                ):
                    add(child)
        elif path.exists():
            add(path)
        elif _GLOB_CHARS & set(text):
            matches = sorted(Path(m) for m in glob.glob(text, recursive=True))
            files = [m for m in matches if m.is_file()]
            if not files:
                result.append(IngestOutcome(source=text, status="error", error="no files match this pattern"))
            for match in files:
                add(match)
        else:
            result.append(IngestOutcome(source=text, status="error", error="no such file or directory"))
    return result
