"""The LanceDB side of the knowledge base: connection, table schemas, format and embedder checks.

Four tables live in the knowledge base's directory (or URI):

- ``documents``: one row per document, with its full text and ``origin`` (where it was read from,
  e.g. the server's absolute file URI: the document's identity, never handed out);
- ``chunks``: text, vector, position, headings, page and locator (``"slide 3"``, ``"Sheet1, rows
  12-20"``) of each chunk, plus the document's display source in ``uri``;
- ``files``: the original bytes of each document, so that a client can download what it cited;
- ``meta``: which embedder built the vectors, their dimension and the storage format version.

``documents`` and ``chunks`` rows carry ``groups``, who may read the document (``access.py``; the
chunks' copy lets a search filter before top-k, the documents row decides).

``chunks`` and ``files`` rows carry ``written_at``, when their write started: the orphan sweep
(``sweep.py``) removes only rows of unpublished documents older than its age floor, so a write in
flight is never touched. The column is nullable and added on open where missing (rows written
before, or by an older version, keep ``NULL`` and are never swept); older versions still write.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, Generic, TypeVar
from urllib.parse import unquote

import lancedb
import pyarrow as pa

from .errors import (
    EmbedderMismatchError,
    KnowledgeBaseError,
    KnowledgeBaseFormatError,
    is_commit_conflict,
    unavailable,
)
from .filters import in_list, sql_literal

__all__ = [
    "CHUNKING_VERSION",
    "DOC_COLUMNS",
    "FORMAT_VERSION",
    "FTS_COLUMN",
    "GROUPS",
    "HIT_COLUMNS",
    "READER_REVISIONS",
    "WRITTEN_AT",
    "Tables",
    "chunking_version",
    "chunks_schema",
    "documents_schema",
    "files_schema",
    "version_prefix",
]

CHUNKS = "chunks"
DOCUMENTS = "documents"
FILES = "files"
META = "meta"
FTS_COLUMN = "search_text"
WRITTEN_AT = "written_at"
GROUPS = "groups"
_V = TypeVar("_V")
logger = logging.getLogger("ragstream.kb")
#: How long a table read whole (``read_data``) is taken as readable while its version stays the same.
READ_AGAIN_SECONDS = 60.0

#: Versions of the ``documents`` table (about one per ingest or delete) a connection lives through
#: before ``Tables`` replaces it, dropping the index files its cache holds open (``_reconnect``).
RECONNECT_AFTER_VERSIONS = 64
HIT_COLUMNS = [
    "chunk_id",
    "document_id",
    "title",
    "uri",
    "text",
    "headings",
    "page",
    "locator",
    "position",
    "section",
]
DOC_COLUMNS = [
    "document_id",
    "uri",
    "title",
    "format",
    "content_hash",
    "chunk_count",
    "size_chars",
    "updated_at",
    GROUPS,
]
# The storage layout. 1: uri held the absolute source path. 2: uri is the display source, the
# identity moved to documents.origin, originals are kept in files. 3: chunks have a locator.
# 4: documents and chunks have groups (who may read them; ["*"] is everyone).
FORMAT_VERSION = "4"
# Part of every content hash: bump it when parsing or chunking changes, so re-ingestion redoes all.
# 2: Markdown tables are split between rows, under their header row; chunks carry a locator.
# 3: a section under 200 characters joins the next one, a split's short tail is evened out, and a
#    code block cut between chunks is closed in one and opened again in the next.
CHUNKING_VERSION = "3"
# A format's own reader revision, added to ``CHUNKING_VERSION`` in its documents' content hashes:
# a change to one reader re-embeds that format's documents only.
# html 1, epub 1: pages read by rag_tools/kb/html.py (main content, whole paragraphs, tables).
# pdf 1, docx 1, pptx 1: pages without a text layer and pictures are read by OCR (rag_tools/kb/ocr.py).
READER_REVISIONS: dict[str, str] = {"html": "2", "epub": "1", "pdf": "1", "docx": "1", "pptx": "1"}


def chunking_version(fmt: str) -> str:
    """What a document of format ``fmt`` adds to its content hash (``"2"``, ``"2+html1"``)."""
    revision = READER_REVISIONS.get(fmt)
    return f"{CHUNKING_VERSION}+{fmt}{revision}" if revision else CHUNKING_VERSION


# A format 2 chunk's locator: its PDF page, the only place format 2 knew.
_PAGE_LOCATOR = "concat('page ', CAST(page AS STRING))"

# A format 3 document's groups: everyone (there was no restriction before).
_EVERYONE_SQL = "make_array('*')"

_V1_LOCAL = "starts_with(uri, 'file://') OR starts_with(uri, 'upload://')"
_V1_DISPLAY = "regexp_replace(uri, '^(file|upload)://(.*/)?', '')"


def version_prefix(document_id: str, content_hash: str) -> str:
    """How every chunk id of this version of a document starts: ``<document id>:<hash[:12]>:``.

    A chunk is visible only while its document's ``documents`` row carries the same hash, so the
    ``documents`` commit publishes a new version at once (see rag_tools/kb/NOTES.md).
    """
    return f"{document_id}:{content_hash[:12]}:"


def documents_schema() -> pa.Schema:
    """The ``documents`` table; ``origin`` is last because format 1 tables gain it as a new column."""
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
            pa.field("origin", pa.string(), nullable=True),
            _groups(),
        ]
    )


def chunks_schema(dimensions: int) -> pa.Schema:
    """The ``chunks`` table for vectors of ``dimensions`` floats."""
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
            pa.field(FTS_COLUMN, pa.string(), nullable=False),
            pa.field("vector", pa.list_(pa.float32(), dimensions), nullable=False),
            # format 2 tables gain the locator as a new column, then written_at: the same order here
            pa.field("locator", pa.string(), nullable=False),
            _written_at(),
            _groups(),
        ]
    )


def files_schema() -> pa.Schema:
    """The ``files`` table: a document's original bytes, its media type and file name."""
    return pa.schema(
        [
            pa.field("document_id", pa.string(), nullable=False),
            pa.field("filename", pa.string(), nullable=False),
            pa.field("media_type", pa.string(), nullable=False),
            pa.field("data", pa.large_binary(), nullable=False),
            _written_at(),
        ]
    )


def _groups() -> pa.Field:
    """Who may read the row's document; nullable because format 3 tables gain it as a new column."""
    return pa.field(GROUPS, pa.list_(pa.string()), nullable=True)


def _written_at() -> pa.Field:
    return pa.field(WRITTEN_AT, pa.timestamp("us", tz="UTC"), nullable=True)


class Tables:
    """An open connection to a knowledge base's tables (``None`` until the first write creates them)."""

    def __init__(
        self,
        uri: str,
        *,
        embedder: str,
        read_consistency_interval: timedelta | None,
        storage_options: dict[str, str] | None = None,
    ) -> None:
        self.uri = uri
        self._storage_options = storage_options or None
        self.embedder = embedder
        self._read_consistency_interval = read_consistency_interval
        self.db: lancedb.AsyncConnection | None = None
        self.chunks: lancedb.AsyncTable | None = None
        self.documents: lancedb.AsyncTable | None = None
        self.files: lancedb.AsyncTable | None = None
        self.dimensions: int | None = None
        self.write_lock = asyncio.Lock()
        self._published: _RowsPerVersion[tuple[str, list[str] | None]] = _RowsPerVersion()
        self._by_uri: _RowsPerVersion[frozenset[str]] = _RowsPerVersion()
        self._connected_version: int | None = None  # of ``documents``, when the connection was made
        self._reconnecting = False
        self._read_whole: dict[str, tuple[int, float]] = {}  # each table's version read whole, and when

    async def read_data(self) -> None:
        """Read one small column of every row of every table: the data files themselves, which a
        count (the manifest alone) never opens. A table is read again once it has a new version, or
        ``READ_AGAIN_SECONDS`` after it was last read (a file may be damaged under the same version)."""
        for table in (self.documents, self.chunks, self.files):
            if table is None:
                continue
            version, now = await table.version(), time.monotonic()
            last = self._read_whole.get(table.name)
            if last is None or last[0] != version or now - last[1] > READ_AGAIN_SECONDS:
                await table.query().select(["document_id"]).to_arrow()
                self._read_whole[table.name] = (version, now)

    async def open(self) -> None:
        """Connect; check the embedder and the format, migrating a format 1 knowledge base.

        Once open, a table that did not exist yet is looked for again on every call: another
        process (an ingest beside a server) may have created it since.
        """
        if self.db is not None:
            if self.chunks is None or self.documents is None:
                await self._open_tables()
            return
        if "://" not in self.uri:
            Path(self.uri).mkdir(parents=True, exist_ok=True)
        self.db = await self._connect()
        try:
            await self._open_tables()
        except BaseException:
            self.close()
            raise

    async def _connect(self) -> lancedb.AsyncConnection:
        try:
            return await lancedb.connect_async(
                self.uri,
                read_consistency_interval=self._read_consistency_interval,
                storage_options=self._storage_options,
            )
        except ValueError as error:  # LanceDB reports an unreachable object store this way on connect
            raise unavailable(self.uri, error) from error

    async def _reconnect(self) -> None:
        """Replace the connection and its tables with new ones.

        LanceDB (0.40) keeps every index version a connection opened in the connection's cache, with
        the index file open, and evicts by size only; each optimize writes a new full-text index
        version, so a long-lived connection over a knowledge base that changes holds one more file
        per ingest (deleted ones too, with their disk space) until it runs out of descriptors.
        Dropping the old connection frees them; queries still running on its tables finish first.
        The new connection starts with a cold cache: the next search reads its indexes again. One
        that cannot be made (an object store's blip) leaves the old one in use, until the next try.
        """
        self._reconnecting = True
        try:
            db = await self._connect()
            names = set((await db.list_tables()).tables)
            opened = {name: await db.open_table(name) for name in (CHUNKS, DOCUMENTS, FILES) if name in names}
            version = await opened[DOCUMENTS].version() if DOCUMENTS in opened else None
        except Exception:
            logger.warning(
                "could not open a new connection to %s; keeping the old one", self.uri, exc_info=True
            )
            return
        finally:
            self._reconnecting = False
        self.db = db
        self.chunks = opened.get(CHUNKS, self.chunks)
        self.documents = opened.get(DOCUMENTS, self.documents)
        self.files = opened.get(FILES, self.files)
        self._connected_version = version

    async def documents_version(self) -> int:
        """The ``documents`` table's version now; a connection that has lived through
        ``RECONNECT_AFTER_VERSIONS`` of them is replaced first (``_reconnect``)."""
        if self.documents is None:
            raise KnowledgeBaseError("the knowledge base has no documents table yet")
        version = await self.documents.version()
        if self._connected_version is None or version < self._connected_version:
            self._connected_version = version
        elif version - self._connected_version >= RECONNECT_AFTER_VERSIONS and not self._reconnecting:
            await self._reconnect()
        return version

    async def _open_tables(self) -> None:
        db = self.require_open()
        names = set((await db.list_tables()).tables)
        if META in names:
            meta = await self._read_meta()
            stored = meta.get("embedder")
            if stored and stored != self.embedder:
                raise EmbedderMismatchError(
                    f"the knowledge base at {self.uri} was built with embedder {stored!r} "
                    f"({meta.get('dimensions')} dimensions); the configured embedder is {self.embedder!r}. "
                    "Use the original embedder, or re-ingest into a new data directory."
                )
            self.dimensions = int(meta["dimensions"]) if "dimensions" in meta else None
            version = meta.get("format_version", "1")
            if version == "1":
                await self._migrate_from_1(names, meta)
                version = "2"
            if version == "2":
                await self._migrate_from_2(names, meta)
                version = "3"
            if version == "3":
                await self._migrate_from_3(names, meta)
            elif version != FORMAT_VERSION:
                raise KnowledgeBaseFormatError(
                    f"the knowledge base at {self.uri} has storage format {version}, newer than this "
                    f"version of ragstream reads ({FORMAT_VERSION}); upgrade ragstream, or re-ingest "
                    "into a new data directory."
                )
        if CHUNKS in names and self.chunks is None:
            self.chunks = await _with_written_at(await db.open_table(CHUNKS))
        if DOCUMENTS in names and self.documents is None:
            self.documents = await db.open_table(DOCUMENTS)
        if FILES in names and self.files is None:
            self.files = await _with_written_at(await db.open_table(FILES))

    def close(self) -> None:
        """Release the connection and the tables."""
        for table in (self.chunks, self.documents, self.files):
            if table is not None:
                table.close()
        if self.db is not None:
            self.db.close()
        self.db = self.chunks = self.documents = self.files = None

    def require_open(self) -> lancedb.AsyncConnection:
        """The connection, or a clear error when the knowledge base was not opened."""
        if self.db is None:
            raise KnowledgeBaseError("the knowledge base is not open; use 'async with KnowledgeBase(...)'")
        return self.db

    async def published(self, document_ids: set[str]) -> dict[str, str]:
        """The published version (``version_prefix``) of each of these documents that is listed.

        Remembered per version of the ``documents`` table: a search repeats no lookup until a
        commit (of any process) changes the table.
        """
        return {i: prefix for i, (prefix, _) in (await self.published_access(document_ids)).items()}

    async def groups_of(self, document_ids: Sequence[str]) -> dict[str, list[str] | None]:
        """The stored ``groups`` of those of ``document_ids`` that are listed, read now (uncached:
        what writers read under the write lock)."""
        if self.documents is None or not document_ids:
            return {}
        rows = (
            await self.documents.query()
            .where(in_list("document_id", document_ids))
            .select(["document_id", GROUPS])
            .to_list()
        )
        return {row["document_id"]: row[GROUPS] for row in rows}

    async def published_access(self, document_ids: set[str]) -> dict[str, tuple[str, list[str] | None]]:
        """``published``, with each document's stored ``groups`` (who may read it, ``access.py``)."""
        if self.documents is None or not document_ids:
            return {}

        def read(rows: list[dict[str, Any]]) -> dict[str, tuple[str, list[str] | None]]:
            return {
                row["document_id"]: (version_prefix(row["document_id"], row["content_hash"]), row[GROUPS])
                for row in rows
            }

        columns = ["document_id", "content_hash", GROUPS]
        version = await self.documents_version()
        return await self._published.get(self.documents, version, "document_id", document_ids, columns, read)

    async def ids_by_uri(self, uris: set[str]) -> dict[str, frozenset[str]]:
        """The ids of the documents shown as each of ``uris`` (display sources; those found)."""
        if self.documents is None or not uris:
            return {}

        def read(rows: list[dict[str, Any]]) -> dict[str, frozenset[str]]:
            found: dict[str, set[str]] = {}
            for row in rows:
                found.setdefault(row["uri"], set()).add(row["document_id"])
            return {uri: frozenset(ids) for uri, ids in found.items()}

        version = await self.documents_version()
        return await self._by_uri.get(self.documents, version, "uri", uris, ["document_id", "uri"], read)

    async def _read_meta(self) -> dict[str, str]:
        table = await self.require_open().open_table(META)
        try:
            rows = await table.query().to_list()
        finally:
            table.close()
        return {row["key"]: row["value"] for row in rows}

    async def _write_meta(self, meta: dict[str, str]) -> None:
        rows = [{"key": key, "value": value} for key, value in meta.items()]
        await self.require_open().create_table(META, data=rows, mode="overwrite")

    def check_dimensions(self, dimensions: int) -> None:
        """``EmbedderMismatchError`` when vectors of ``dimensions`` floats cannot be stored or searched here."""
        if self.dimensions is not None and self.dimensions != dimensions:
            raise EmbedderMismatchError(
                f"the knowledge base at {self.uri} holds {self.dimensions}-dimensional vectors but "
                f"{self.embedder!r} produced {dimensions}; re-ingest into a new data directory."
            )

    async def ensure(
        self, dimensions: int
    ) -> tuple[lancedb.AsyncTable, lancedb.AsyncTable, lancedb.AsyncTable]:
        """The chunks, documents and files tables, created for ``dimensions`` if missing."""
        self.require_open()
        self.check_dimensions(dimensions)
        if self.dimensions is None:
            meta = {
                "embedder": self.embedder,
                "dimensions": str(dimensions),
                "format_version": FORMAT_VERSION,
            }
            await self._create(META, pa.Table.from_pylist([{"key": k, "value": v} for k, v in meta.items()]))
            await self._check_created_meanwhile(meta)
            self.dimensions = dimensions
        if self.chunks is None:
            self.chunks = await self._create(CHUNKS, chunks_schema(dimensions))
        if self.documents is None:
            self.documents = await self._create(DOCUMENTS, documents_schema())
        if self.files is None:
            self.files = await self._create(FILES, files_schema())
        return self.chunks, self.documents, self.files

    async def _create(self, name: str, content: pa.Schema | pa.Table) -> lancedb.AsyncTable:
        """The table (empty for a schema) unless it exists: another process may create it at the same moment.

        Never ``mode="overwrite"`` here: LanceDB 0.40 can panic when two processes overwrite one new
        table at once.
        """
        db = self.require_open()
        data, schema = (content, None) if isinstance(content, pa.Table) else (None, content)
        try:
            return await db.create_table(name, data=data, schema=schema, exist_ok=True)
        except (RuntimeError, ValueError) as error:
            if not (is_commit_conflict(error) or "already exists" in str(error)):
                raise
            return await db.open_table(name)

    async def _check_created_meanwhile(self, meta: dict[str, str]) -> None:
        """The recorded embedder is ours (another process may have created the knowledge base first)."""
        stored = await self._read_meta()
        if (stored.get("embedder"), stored.get("dimensions")) != (meta["embedder"], meta["dimensions"]):
            raise EmbedderMismatchError(
                f"the knowledge base at {self.uri} was just created with embedder {stored.get('embedder')!r} "
                f"({stored.get('dimensions')} dimensions); the configured embedder is {self.embedder!r}."
            )

    async def _migrate_from_1(self, names: set[str], meta: dict[str, str]) -> None:
        """Format 1 kept the source's absolute URI in ``uri``: move it to ``origin``, show the file name.

        Every step is idempotent and the format version is written last, so an interrupted
        migration is finished by the next open. Ids and content hashes do not change: unchanged
        files stay unchanged on re-ingestion.
        """
        db = self.require_open()
        renamed: dict[str, str] = {}
        if DOCUMENTS in names:
            documents = await db.open_table(DOCUMENTS)
            try:
                if "origin" not in (await documents.schema()).names:
                    await documents.add_columns({"origin": "uri"})
                await documents.update(updates_sql={"uri": _V1_DISPLAY}, where=_V1_LOCAL)
                rows = (
                    await documents.query()
                    .where("strpos(uri, '%') > 0")
                    .select(["document_id", "uri"])
                    .to_list()
                )
                for row in rows:
                    renamed[row["document_id"]] = unquote(row["uri"])
                    where = f"document_id = {sql_literal(row['document_id'])}"
                    await documents.update(updates={"uri": renamed[row["document_id"]]}, where=where)
            finally:
                documents.close()
        if CHUNKS in names:
            chunks = await db.open_table(CHUNKS)
            try:
                await chunks.update(updates_sql={"uri": _V1_DISPLAY}, where=_V1_LOCAL)
                for document_id, display in renamed.items():
                    where = f"document_id = {sql_literal(document_id)}"
                    await chunks.update(updates={"uri": display}, where=where)
            finally:
                chunks.close()
        await self._write_meta({**meta, "format_version": "2"})

    async def _migrate_from_2(self, names: set[str], meta: dict[str, str]) -> None:
        """Format 2 chunks had no locator: add it, ``"page N"`` for a PDF's chunks, else ``""``.

        Idempotent (the column is added only when missing) with the version written last, like
        ``_migrate_from_1``; content hashes do not change, so nothing is re-embedded until a
        document's file changes (or ``CHUNKING_VERSION`` does).
        """
        if CHUNKS in names:
            chunks = await self.require_open().open_table(CHUNKS)
            try:
                if "locator" not in (await chunks.schema()).names:
                    await chunks.add_columns({"locator": "''"})
                await chunks.update(
                    updates_sql={"locator": _PAGE_LOCATOR}, where="page IS NOT NULL AND locator = ''"
                )
            finally:
                chunks.close()
        await self._write_meta({**meta, "format_version": "3"})

    async def _migrate_from_3(self, names: set[str], meta: dict[str, str]) -> None:
        """Format 3 had no access control: add ``groups`` to documents and chunks, everyone's.

        The chunks are done first and the documents last (the documents row decides, see
        ``access.py``); each step only touches rows still missing the value, and the version is
        written last, so an interrupted migration finishes on the next open.
        """
        db = self.require_open()
        for name in (CHUNKS, DOCUMENTS):
            if name not in names:
                continue
            table = await db.open_table(name)
            try:
                if GROUPS not in (await table.schema()).names:
                    await table.add_columns({GROUPS: _EVERYONE_SQL})
                else:
                    await table.update(updates_sql={GROUPS: _EVERYONE_SQL}, where=f"{GROUPS} IS NULL")
            finally:
                table.close()
        await self._write_meta({**meta, "format_version": FORMAT_VERSION})


async def _with_written_at(table: lancedb.AsyncTable) -> lancedb.AsyncTable:
    """The table, with the nullable ``written_at`` column added if it lacks it (another process may
    add it at the same moment: that is as good)."""
    if WRITTEN_AT not in (await table.schema()).names:
        try:
            await table.add_columns(_written_at())
        except (RuntimeError, ValueError) as error:
            if not (is_commit_conflict(error) or "already exists" in str(error)):
                raise
    return table


class _RowsPerVersion(Generic[_V]):
    """Lookups of a table's rows by one column, kept until the table's version changes (a write)."""

    def __init__(self) -> None:
        self._version: int | None = None
        self._values: dict[str, _V | None] = {}

    async def get(
        self,
        table: lancedb.AsyncTable,
        version: int,
        column: str,
        keys: set[str],
        columns: list[str],
        read: Callable[[list[dict[str, Any]]], dict[str, _V]],
    ) -> dict[str, _V]:
        """``read``'s value for each of ``keys`` that has rows at ``version`` of the table (asking
        the table only for new keys)."""
        if version != self._version:
            self._version, self._values = version, {}
        # this version's lookups: a concurrent call at another version replaces the shared dict
        # while this one waits for its rows, which then go to the dict they were read for
        values = self._values
        missing = keys - values.keys()
        if missing:
            rows = await table.query().where(in_list(column, sorted(missing))).select(columns).to_list()
            found = read(rows)
            values.update({key: found.get(key) for key in missing})
        return {key: value for key in keys if (value := values[key]) is not None}
