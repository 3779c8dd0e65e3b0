"""``KnowledgeBase``: the one public client over a LanceDB knowledge base.

It composes the modules beside it: ``tables`` (connection, schemas, format and embedder checks),
``sources`` / ``ingestion`` / ``pipeline`` (what to ingest, preparing and writing, the staged
pipeline), ``indexing`` (FTS, id and ANN indexes), ``search`` (hybrid, vector and text search with
context) and ``documents`` (listing, lookup, files, deletion). Every public method turns storage
failures into ``KnowledgeBaseUnavailable``.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from pathlib import Path

from lancedb.rerankers import Reranker
from pydantic_ai.embeddings import EmbeddingModel

from ..config import RagConfig, SearchMode
from ..embeddings import DEFAULT_EMBEDDER, embedder_name, resolve_embedding_model
from . import documents as _documents
from .access import ALL, Reader, check_groups
from .errors import (
    EmbedderMismatchError,
    KnowledgeBaseError,
    KnowledgeBaseFormatError,
    KnowledgeBaseUnavailable,
    storage_errors,
)
from .filters import DocumentFilter, FilterLike, combine_filters
from .fusion import DEFAULT_FUSION, Fusion
from .indexing import DEFAULT_ANN_INDEX_THRESHOLD, VectorSearchParameters, refresh_indexes
from .models import (
    Document,
    DocumentFile,
    DocumentPage,
    IngestOutcome,
    IngestProgress,
    IngestReport,
    SearchHit,
)
from .pipeline import Stop, ingest_sources
from .reranking import resolve_reranker
from .search import search_chunks, searchable_query
from .sizing import ChunkCounts, VectorSearchOverrides
from .sources import Source, bytes_source, document_id_for, expand_sources
from .sweep import sweep_orphans
from .sync import SyncPlan, SyncSource, open_sync_source, run_sync
from .tables import Tables

__all__ = [
    "EmbedderMismatchError",
    "KnowledgeBase",
    "KnowledgeBaseError",
    "KnowledgeBaseFormatError",
    "KnowledgeBaseUnavailable",
    "document_id_for",
]


class KnowledgeBase:
    """Async client over a LanceDB knowledge base.

    Use as ``async with KnowledgeBase(path) as kb:``. Opening an existing knowledge base with an
    embedder other than the one that built it raises ``EmbedderMismatchError``.

    The vector index and its query settings follow the number of chunks (``indexing``);
    ``ann_ef``, ``ann_nprobes`` and ``ann_refine_factor`` override the settings chosen by size (kept
    in ``vector_search``, whose ``exact`` makes every vector search an exact scan). ``fusion`` tunes
    hybrid search (``fusion.Fusion``); ``reranker`` reorders each search's best candidates.

    ``reader`` is who reads through this object (``access.Reader``; every document by default):
    searches, listings and lookups show only the documents it may read, filtered inside each
    query. ``restricted(reader)`` gives a view for one caller that shares the connection.

    ``uri`` is a folder or an object-store URI (``s3://bucket/prefix``, ``gs://``, ``az://``); the
    object store's credentials and endpoint come from its standard variables (``AWS_ENDPOINT_URL``,
    ``AWS_ACCESS_KEY_ID``, ...), which ``storage_options`` (LanceDB's keys) override.
    """

    DEFAULT_ANN_INDEX_THRESHOLD = DEFAULT_ANN_INDEX_THRESHOLD

    def __init__(
        self,
        uri: str | Path,
        *,
        embedder: str | EmbeddingModel = DEFAULT_EMBEDDER,
        chunk_max_chars: int = 1200,
        ann_index_threshold: int = DEFAULT_ANN_INDEX_THRESHOLD,
        ann_ef: int | None = None,
        ann_nprobes: int | None = None,
        ann_refine_factor: int | None = None,
        read_consistency_interval: timedelta | None = timedelta(0),
        storage_options: dict[str, str] | None = None,
        reranker: str | Reranker | None = None,
        max_file_mb: float = 512.0,
    ) -> None:
        self.uri = str(uri)
        self.max_file_bytes = int(max_file_mb * 2**20)
        self.embedding_model = resolve_embedding_model(embedder)
        self.embedder = embedder_name(self.embedding_model)
        self.chunk_max_chars = chunk_max_chars
        self.ann_index_threshold = ann_index_threshold
        self.vector_search = VectorSearchOverrides(ann_ef, ann_nprobes, ann_refine_factor)
        self.fusion: Fusion = DEFAULT_FUSION
        self.reranker: Reranker | None = resolve_reranker(reranker)
        self.reader: Reader = ALL
        self._counts = ChunkCounts()  # the views share it: a view made per request finds the counts
        self._tables = Tables(
            self.uri,
            embedder=self.embedder,
            read_consistency_interval=read_consistency_interval,
            storage_options=storage_options,
        )

    @classmethod
    def from_config(cls, config: RagConfig) -> KnowledgeBase:
        """A knowledge base at ``config.resolved_kb_uri`` with the configured embedder and bounds."""
        return cls(
            config.resolved_kb_uri,
            embedder=config.embedder,
            chunk_max_chars=config.chunk_max_chars,
            ann_index_threshold=config.ann_index_threshold,
            read_consistency_interval=timedelta(seconds=config.kb_read_consistency_seconds),
            storage_options=config.kb_storage_options,
            reranker=resolve_reranker(config.reranker, chat_model=config.model),
            max_file_mb=config.max_file_mb,
        )

    def restricted(self, reader: Reader) -> KnowledgeBase:
        """A view of this knowledge base for ``reader``: same connection, tables and embedder.

        Every read through the view (search, listing, lookup, chunks, files) shows only the
        documents ``reader`` may read. Writes are not restricted (who may change what is the
        caller's rule). Close the knowledge base itself, not its views. Asked for its own reader,
        the knowledge base is its own view (the common case of every run of an administrator).
        """
        if reader == self.reader:
            return self
        view = copy.copy(self)
        view.reader = reader
        return view

    async def __aenter__(self) -> KnowledgeBase:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    @storage_errors
    async def open(self) -> None:
        """Connect, check that the stored vectors were made by this embedder, migrate an old format."""
        await self._tables.open()

    def close(self) -> None:
        """Release the connection; the object can be opened again."""
        self._tables.close()

    @property
    def dimensions(self) -> int | None:
        """The vector dimension recorded with the knowledge base (``None`` before the first write)."""
        return self._tables.dimensions

    @storage_errors
    async def ingest_paths(
        self,
        paths: Iterable[str | Path],
        *,
        on_progress: Callable[[IngestProgress], None] | None = None,
        on_plan: Callable[[int], None] | None = None,
        groups: Sequence[str] | None = None,
    ) -> IngestReport:
        """Ingest files, folders (recursively) and glob patterns.

        ``groups`` makes every source readable by those groups only (``[]``: everyone); without it
        a known document keeps its groups and a new one is everyone's. An unchanged document given
        other groups is not re-embedded: only its groups change.

        Parsing, embedding and writing run as a pipeline. An unreadable, missing, unsupported or
        binary source becomes an ``error`` outcome with the reason, and the rest are still ingested.
        ``on_plan`` receives the number of sources; ``on_progress`` an ``IngestProgress`` after each
        embedded batch of chunks and with each file's outcome (problems found while planning first).
        """
        await self.open()
        checked = None if groups is None else check_groups(groups)
        sources = expand_sources(paths)
        if on_plan:
            on_plan(len(sources))
        outcomes = await self._ingest(sources, on_progress, groups=checked)
        await self.refresh_indexes()
        return IngestReport(outcomes=outcomes)

    async def ingest_file(self, path: str | Path) -> IngestOutcome:
        """Ingest one file; see ``ingest_paths``."""
        report = await self.ingest_paths([path])
        return report.outcomes[0]

    @storage_errors
    async def ingest_bytes(
        self,
        data: bytes,
        *,
        name: str,
        uri: str | None = None,
        title: str | None = None,
        on_progress: Callable[[IngestProgress], None] | None = None,
        stop: Stop | None = None,
        groups: Sequence[str] | None = None,
    ) -> IngestOutcome:
        """Ingest an in-memory source (an upload); ``name``'s suffix gives the format; ``groups`` as
        in ``ingest_paths``.

        The document is shown as ``uri`` when given (e.g. the URL it came from), else as ``name``;
        its original bytes are kept for ``get_document_file``. ``on_progress`` as in ``ingest_paths``.
        Once ``stop()`` is true before the document is written, it is not, and comes out ``cancelled``.
        """
        await self.open()
        checked = None if groups is None else check_groups(groups)
        source = bytes_source(data, name=name, uri=uri, title=title)
        (outcome,) = await self._ingest([source], on_progress, stop, groups=checked)
        if outcome.status in ("added", "updated") or checked is not None:
            await self.refresh_indexes()
        return outcome

    @storage_errors
    async def sync(
        self,
        source: str | SyncSource,
        *,
        on_plan: Callable[[SyncPlan], None] | None = None,
        on_progress: Callable[[IngestProgress], None] | None = None,
        stop: Stop | None = None,
        groups: Sequence[str] | None = None,
    ) -> IngestReport:
        """Mirror a folder or ``s3://bucket/prefix`` into the knowledge base (``sync.py``); ``groups``
        as in ``ingest_paths``, for every file of the source.

        New and changed files are ingested, unchanged ones skipped by content hash, and documents
        of an earlier sync of the same source whose file is gone are deleted; a file that fails is
        an ``error`` outcome and the rest go on. ``on_plan`` gets the plan once the source is
        listed; ``on_progress`` as in ``ingest_paths``, over every outcome (deletions last). Once
        ``stop()`` is true what was not done yet comes out ``cancelled``. A source that cannot be
        listed, or lists nothing, raises ``SyncSourceError`` and changes nothing.
        """
        await self.open()
        checked = None if groups is None else check_groups(groups)
        src = open_sync_source(source) if isinstance(source, str) else source
        ingest = functools.partial(self._ingest, groups=checked)  # (files, progress, stop)
        outcomes = await run_sync(
            self._tables, src, ingest, on_plan=on_plan, on_progress=on_progress, stop=stop
        )
        await self.refresh_indexes()
        return IngestReport(outcomes=outcomes)

    @storage_errors
    async def sweep_orphans(self, min_age_seconds: float) -> list[str]:
        """Remove what writes that stopped before publishing left (original files and chunks of
        documents never listed), once older than ``min_age_seconds``; the ids swept (``sweep.py``)."""
        await self.open()
        return await sweep_orphans(self._tables, min_age_seconds)

    async def _ingest(
        self,
        sources: list[Source | IngestOutcome] | list[Source],
        on_progress: Callable[[IngestProgress], None] | None,
        stop: Stop | None = None,
        *,
        groups: tuple[str, ...] | None = None,
    ) -> list[IngestOutcome]:
        return await ingest_sources(
            self._tables,
            self.embedding_model,
            sources,
            max_chars=self.chunk_max_chars,
            embed_query=self.embed_query,
            on_progress=on_progress,
            stop=stop,
            groups=groups,
            max_bytes=self.max_file_bytes,
        )

    async def embed_query(self, query: str) -> list[float]:
        """The query vector, checked against the knowledge base's dimension."""
        result = await self.embedding_model.embed(query, input_type="query")
        vector = list(result.embeddings[0])
        self._tables.check_dimensions(len(vector))
        return vector

    @storage_errors
    async def refresh_indexes(self) -> None:
        """Keep indexes current: full-text and id indexes always, the vector index past the threshold."""
        rows = await refresh_indexes(self._tables, ann_index_threshold=self.ann_index_threshold)
        if rows is not None:
            self._counts.record(rows)

    def vector_search_parameters(self) -> VectorSearchParameters | None:
        """The vector query settings for the current size and overrides; ``None`` for an exact scan."""
        return self._counts.parameters(self.vector_search, ann_index_threshold=self.ann_index_threshold)

    @storage_errors
    async def delete_document(self, document_id_or_uri: str, *, expected: Document | None = None) -> bool:
        """Remove a document, its chunks and its file; ``False`` when there was no such document.

        By id, origin or display uri; a uri several documents share is an ``AmbiguousDocumentError``
        (nothing is deleted). With ``expected`` (the document as the caller read it, say to check
        who may delete it), only while it is still that version with those groups: otherwise
        ``DocumentChanged`` and nothing is deleted.
        """
        await self.open()
        return await _documents.delete_document(self._tables, document_id_or_uri, expected)

    @storage_errors
    async def set_document_groups(
        self, document_id: str, groups: Sequence[str], *, expected: Document | None = None
    ) -> Document | None:
        """Make a document readable by ``groups`` only (``[]``: everyone); ``None`` when there is no
        such document. ``InvalidGroups`` for a bad name. Not restricted by ``reader``. With
        ``expected``, only while it is still that version with those groups (``DocumentChanged``)."""
        checked = check_groups(groups)
        await self.open()
        document = await _documents.set_groups(self._tables, document_id, checked, expected)
        if document is not None:
            await self.refresh_indexes()
        return document

    @storage_errors
    async def search(
        self,
        query: str,
        *,
        limit: int = 5,
        mode: SearchMode = "hybrid",
        filter: FilterLike | None = None,
        context_chars: int = 0,
    ) -> list[SearchHit]:
        """The ``limit`` best chunks for ``query`` (its first ``QUERY_CHARS`` characters).

        ``hybrid`` fuses vector and full-text results (``fusion``: weighted scores); ``vector`` and
        ``text`` use one of them. With ``context_chars`` each hit's ``context`` holds the hit
        surrounded by neighbouring chunks of its section, up to that many characters.
        """
        query = searchable_query(query, limit)
        await self.open()
        chunks = self._tables.chunks
        if chunks is None or not query.strip():
            return []
        vector_search = await self._counts.for_search(
            chunks, self.reader, self.vector_search, ann_index_threshold=self.ann_index_threshold
        )
        return await search_chunks(
            self._tables,
            chunks,
            query,
            embed_query=self.embed_query,
            limit=limit,
            mode=mode,
            filter=filter,
            context_chars=context_chars,
            vector_search=vector_search,
            reader=self.reader,
            fusion=self.fusion,
            reranker=self.reranker,
        )

    @storage_errors
    async def list_documents(
        self,
        page: int = 1,
        page_size: int = 50,
        *,
        filter: FilterLike | None = None,
        query: str | None = None,
    ) -> DocumentPage:
        """Documents ordered by title (case-insensitive), then uri; ``page`` counts from 1. ``query``
        keeps those whose title or uri contains it, ignoring case and spaces: the document filter's
        own rule for a name (``DocumentFilter(names=...)``)."""
        await self.open()
        if query is not None and query.strip():
            filter = combine_filters(filter, DocumentFilter(names=(query.strip(),)))
        return await _documents.list_documents(self._tables, page, page_size, filter, self.reader)

    @storage_errors
    async def get_document(
        self, query: str, *, filter: FilterLike | None = None, with_content: bool = True
    ) -> Document | None:
        """Find a document by exact uri, else partial uri, else partial title (case-insensitive).
        Among several partial matches the shortest (most specific) uri or title wins, then the
        alphabetical order."""
        await self.open()
        return await _documents.find_document(self._tables, query, filter, with_content, self.reader)

    @storage_errors
    async def get_document_by_id(self, document_id: str, *, with_content: bool = False) -> Document | None:
        """The document with this id, or ``None`` (also when the reader may not read it)."""
        await self.open()
        return await _documents.document_by_id(
            self._tables, document_id, with_content=with_content, reader=self.reader
        )

    @storage_errors
    async def document_readability(self, document_ids: set[str]) -> dict[str, bool]:
        """For each of ``document_ids`` that exists, whether the reader may read it (others left out)."""
        await self.open()
        return await _documents.readability(self._tables, document_ids, self.reader)

    @storage_errors
    async def document_ids_for_uris(self, uris: set[str]) -> dict[str, frozenset[str]]:
        """The ids of the documents shown as each of ``uris`` (display sources; those that show one),
        whoever may read them: pair with ``document_readability``."""
        await self.open()
        return await self._tables.ids_by_uri(uris)

    @storage_errors
    async def get_document_file(self, document_id: str) -> DocumentFile | None:
        """The document's original file ``(data, media_type, filename)``, or ``None`` (also for
        documents ingested before originals were kept: format 1 knowledge bases)."""
        await self.open()
        return await _documents.document_file(self._tables, document_id, self.reader)

    @storage_errors
    async def get_chunks(self, document_id: str) -> list[SearchHit]:
        """A document's chunks in document order (``score`` is 0)."""
        await self.open()
        return await _documents.document_chunks(self._tables, document_id, self.reader)

    @storage_errors
    async def check_readable(self) -> None:
        """Read the knowledge base's data files, not only its manifests (readiness): a damaged file
        raises ``KnowledgeBaseDamaged``, an outage ``KnowledgeBaseUnavailable``. A table is read again
        only once it has changed (one column of every row, once per version)."""
        await self.open()
        await self._tables.read_data()

    @storage_errors
    async def count_documents(self) -> int:
        """How many documents the knowledge base holds that the reader may read."""
        await self.open()
        return await _documents.count_documents(self._tables, self.reader)

    @storage_errors
    async def count_chunks(self) -> int:
        """How many chunks the knowledge base holds."""
        await self.open()
        chunks = self._tables.chunks
        return await chunks.count_rows() if chunks is not None else 0
