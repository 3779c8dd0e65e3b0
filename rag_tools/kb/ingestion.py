"""Preparing sources for the knowledge base and writing them: the steps the ingestion pipeline runs.

``prepare`` (a worker thread) reads, checks, parses and chunks one source, or finds it unchanged;
``write_batch`` stores embedded documents: files, then the new version's chunks beside the old
ones, then the ``documents`` rows, which publish the new versions in one commit (a chunk is visible
only while its id carries the listed content hash), then the old versions' chunks are deleted. A
search, in this process or another, sees a document's old version or its new one, whole, never a
mix and never a part; a write interrupted anywhere (a store lost mid-way) leaves the last published
version, and the next ingest redoes the rest.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

import lancedb
import pyarrow as pa

from .access import stored_groups
from .chunking import ChunkDraft, chunk_document, chunk_sections, linearize_tables
from .filters import in_list, sql_literal
from .models import IngestOutcome
from .readers import (
    MEDIA_TYPES,
    NO_TEXT,
    PdfPages,
    Section,
    decode_text,
    detect_format,
    parse_document,
    pdf_content,
)
from .sources import Source
from .tables import (
    FTS_COLUMN,
    GROUPS,
    WRITTEN_AT,
    Tables,
    chunking_version,
    chunks_schema,
    documents_schema,
    files_schema,
    version_prefix,
)

__all__ = [
    "FILE_ERRORS",
    "PDF_PAGES_PER_STEP",
    "RESUMABLE_BYTES",
    "STREAMED_TEXT_BYTES",
    "Known",
    "PreparedDocument",
    "file_failure",
    "known_documents",
    "prepare",
    "search_text",
    "stored_positions",
    "write_batch",
]

PDF_PAGES_PER_STEP = 16
#: A text file this big is chunked a piece at a time (``TEXT_PIECE_CHARS``), so that its first
#: chunks are embedded and committed while the rest waits, and its chunks are never all in memory.
STREAMED_TEXT_BYTES = 1 << 20
TEXT_PIECE_CHARS = 256 * 1024
#: A file this big may have chunks committed by an earlier, interrupted ingest: they are looked up
#: (``stored_positions``) and not embedded again.
RESUMABLE_BYTES = 512 * 1024
_LOOKUP_BATCH = 500


@dataclass(frozen=True)
class Known:
    """What the knowledge base already holds for a document: enough to skip an unchanged one."""

    content_hash: str
    title: str
    chunk_count: int
    whole: bool = True
    """Its published version still has its chunks; a version that lost them is written again."""


@dataclass
class PreparedDocument:
    """A parsed and chunked source waiting for its vectors, then for its write.

    A PDF or a big text file arrives with its first chunks only: ``rest`` yields the chunks that
    follow (the pipeline calls ``next_rows`` in a worker thread) until the document is complete.

    A big document's chunks are committed as they are embedded, unpublished (``partial`` writes):
    ``written`` counts the chunks stored so far, by this run or an interrupted one before it
    (``stored``: their positions), which ``chunk_rows`` and ``vectors`` no longer hold.
    """

    source: Source
    updated: bool
    doc_row: dict[str, Any]
    file_row: dict[str, Any]
    chunk_rows: list[dict[str, Any]]
    vectors: list[list[float]] = field(default_factory=list)
    rest: Iterator[list[dict[str, Any]]] | None = None
    error: str | None = None
    cancelled: bool = False
    warnings: list[str] = field(default_factory=list)
    resumable: bool = False
    stored: frozenset[int] = frozenset()
    written: int = 0
    partial: bool = False
    file_written: bool = False

    def skip_stored(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``rows`` without the chunks an earlier ingest already committed (they count as written)."""
        if not self.stored:
            return rows
        kept = [row for row in rows if row["position"] not in self.stored]
        self.written += len(rows) - len(kept)
        return kept

    def committed(self, count: int) -> None:
        """The first ``count`` chunks held were committed by a partial write: let them go."""
        del self.chunk_rows[:count]
        del self.vectors[:count]
        self.written += count

    @property
    def texts(self) -> list[str]:
        """The texts to embed, one per chunk."""
        return [row[FTS_COLUMN] for row in self.chunk_rows]

    @property
    def pending(self) -> int:
        """Chunks parsed but not embedded yet."""
        return len(self.chunk_rows) - len(self.vectors)

    @property
    def embedded(self) -> bool:
        """Complete, and every chunk has its vector: ready to write."""
        return self.rest is None and self.error is None and not self.cancelled and self.pending == 0

    @property
    def dropped(self) -> bool:
        """Failed or cancelled: it goes no further."""
        return self.error is not None or self.cancelled

    def next_rows(self) -> list[dict[str, Any]] | None:
        """The chunks of the next pages, or ``None`` once the document is complete (blocking)."""
        return next(self.rest, None) if self.rest is not None else None

    def outcome(self) -> IngestOutcome:
        if self.cancelled:
            return IngestOutcome(source=self.source.label, status="cancelled")
        if self.error is not None:
            return IngestOutcome(source=self.source.label, status="error", error=self.error)
        return IngestOutcome(
            source=self.source.label,
            status="updated" if self.updated else "added",
            document_id=self.doc_row["document_id"],
            title=self.doc_row["title"],
            chunks=self.written + len(self.chunk_rows),
            warnings=self.warnings,
        )


def search_text(title: str, headings: Sequence[str], text: str) -> str:
    """What is embedded and full-text indexed for a chunk: its title, heading path and text, a
    table's rows each with their column headers (``chunking.linearize_tables``)."""
    return "\n".join(part for part in (title, " / ".join(headings), linearize_tables(text)) if part)


FILE_ERRORS = (OSError, ValueError, UnicodeError)
"""What reading or parsing one file raises: that file fails, the rest of its batch goes on."""


def file_failure(exc: BaseException) -> str:
    """The one-line reason a file failed, as its outcome and the job show it."""
    message = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return " ".join(message.split())


async def known_documents(tables: Tables, document_ids: Sequence[str]) -> dict[str, Known]:
    """The stored state of those of ``document_ids`` that the knowledge base holds."""
    if tables.documents is None or not document_ids:
        return {}
    known: dict[str, Known] = {}
    for start in range(0, len(document_ids), _LOOKUP_BATCH):
        batch = in_list("document_id", document_ids[start : start + _LOOKUP_BATCH])
        rows = (
            await tables.documents.query()
            .where(batch)
            .select(["document_id", "content_hash", "title", "chunk_count"])
            .to_list()
        )
        first_chunks = [
            f"{version_prefix(row['document_id'], row['content_hash'])}0"
            for row in rows
            if row["chunk_count"]
        ]
        present: set[str] = set()
        if tables.chunks is not None and first_chunks:
            query = tables.chunks.query().where(f"{batch} AND {in_list('chunk_id', first_chunks)}")
            present = {row["document_id"] for row in await query.select(["document_id"]).to_list()}
        for row in rows:
            whole = not row["chunk_count"] or row["document_id"] in present
            known[row["document_id"]] = Known(row["content_hash"], row["title"], row["chunk_count"], whole)
    return known


def prepare(
    source: Source, known: Known | None, *, max_chars: int, max_bytes: int | None = None
) -> IngestOutcome | PreparedDocument:
    """Read, check, parse and chunk ``source`` (blocking: run it in a worker thread).

    Returns an outcome when there is nothing to embed: the source is unchanged, or it cannot be
    ingested (missing, unreadable, unsupported, binary, broken, over ``max_bytes``), with the
    reason. A PDF comes back with no chunks yet and its pages to parse in ``rest``, a big text file
    with its first piece's chunks.
    """
    try:
        fmt = detect_format(source.name)
        if max_bytes is not None and source.size is not None:
            _check_size(source.size(), max_bytes)
        data = source.read()
        if max_bytes is not None:
            _check_size(len(data), max_bytes)
        digest = hashlib.sha256(data)  # the bytes, then what they were read with: no copy of a big file
        digest.update(f"|{fmt}|{max_chars}|{chunking_version(fmt)}".encode())
        content_hash = digest.hexdigest()
        if (
            known is not None
            and known.whole
            and known.content_hash == content_hash
            and source.title in (None, known.title)
        ):
            return IngestOutcome(
                source=source.label,
                status="unchanged",
                document_id=source.document_id,
                title=known.title,
                chunks=known.chunk_count,
            )
        if fmt == "pdf":
            pages = PdfPages(data)
        elif fmt == "text" and len(data) > STREAMED_TEXT_BYTES:
            text = decode_text(data, fmt)
        else:
            parsed = parse_document(data, name=source.name, format=fmt)
    except FILE_ERRORS as exc:
        return IngestOutcome(source=source.label, status="error", error=file_failure(exc))
    doc_row = {
        "document_id": source.document_id,
        "uri": source.display,
        "title": source.title or "",
        "format": fmt,
        "content_hash": content_hash,
        "chunk_count": 0,
        "size_chars": 0,
        "updated_at": datetime.now(UTC),
        "content": "",
        "origin": source.origin,
    }
    file_row = {
        "document_id": source.document_id,
        "filename": PurePosixPath(source.name).name,
        "media_type": MEDIA_TYPES[fmt],
        "data": data,
    }
    doc = PreparedDocument(source, known is not None, doc_row, file_row, [])
    doc.resumable = len(data) >= RESUMABLE_BYTES
    fallback = Path(source.name).stem.replace("_", " ").replace("-", " ").strip() or source.name
    if fmt == "pdf":
        doc.rest = _pdf_rows(pages, doc_row, max_chars, fallback, doc.warnings)
        return doc
    if fmt == "text" and len(data) > STREAMED_TEXT_BYTES:
        # its content is its file's (``documents``): the row keeps none, or publishing it would
        # copy the whole text again
        doc_row.update(title=source.title or fallback, size_chars=len(text))
        doc.rest = _text_rows(text, doc_row, max_chars)
        return doc
    if source.title:
        parsed.title = source.title
    doc.chunk_rows = _rows(doc_row, parsed.title, chunk_document(parsed, max_chars=max_chars))
    doc_row.update(title=parsed.title, chunk_count=len(doc.chunk_rows), size_chars=len(parsed.content))
    doc_row["content"] = parsed.content
    doc.warnings = parsed.warnings
    return doc


def _check_size(size: int, max_bytes: int) -> None:
    if size > max_bytes:
        raise ValueError(
            f"the file is {size / 2**20:,.1f} MB, over the limit of {max_bytes / 2**20:g} MB per file "
            "(RAGSTREAM_MAX_FILE_MB)"
        )


def _text_rows(text: str, doc_row: dict[str, Any], max_chars: int) -> Iterator[list[dict[str, Any]]]:
    """The chunk rows of a big text, ``TEXT_PIECE_CHARS`` at a time, each piece ending at a
    paragraph (else a line) break; sets ``doc_row``'s chunk count at the end."""
    if not text.strip():
        raise ValueError(NO_TEXT)
    start = position = 0
    while start < len(text):
        stop = min(len(text), start + TEXT_PIECE_CHARS)
        if stop < len(text):
            cut = text.rfind("\n\n", start + TEXT_PIECE_CHARS // 2, stop)
            if cut < 0:
                cut = text.rfind("\n", start + TEXT_PIECE_CHARS // 2, stop)
            stop = cut + 1 if cut >= 0 else stop
        drafts = chunk_sections(
            [Section(text[start:stop])], markdown=False, max_chars=max_chars, position=position
        )
        start, position = stop, position + len(drafts)
        if drafts:
            yield _rows(doc_row, doc_row["title"], drafts)
    doc_row["chunk_count"] = position


async def stored_positions(tables: Tables, document_id: str, content_hash: str) -> frozenset[int]:
    """The positions of the chunks of this version of a document already in the knowledge base
    (committed by an ingest that stopped before publishing it)."""
    if tables.chunks is None:
        return frozenset()
    prefix = sql_literal(version_prefix(document_id, content_hash))
    query = tables.chunks.query().where(
        f"document_id = {sql_literal(document_id)} AND starts_with(chunk_id, {prefix})"
    )
    return frozenset(row["position"] for row in await query.select(["position"]).to_list())


def _rows(doc_row: dict[str, Any], title: str, drafts: Sequence[ChunkDraft]) -> list[dict[str, Any]]:
    document_id, content_hash = doc_row["document_id"], doc_row["content_hash"]
    return [
        {
            "chunk_id": f"{version_prefix(document_id, content_hash)}{draft.position}",
            "document_id": document_id,
            "title": title,
            "uri": doc_row["uri"],
            "position": draft.position,
            "section": draft.section,
            "headings": draft.headings,
            "page": draft.page,
            "locator": draft.locator,
            "text": draft.text,
            FTS_COLUMN: search_text(title, draft.headings, draft.text),
        }
        for draft in drafts
    ]


def _pdf_rows(
    pages: PdfPages, doc_row: dict[str, Any], max_chars: int, fallback_title: str, warnings: list[str]
) -> Iterator[list[dict[str, Any]]]:
    """The chunk rows of a PDF, ``PDF_PAGES_PER_STEP`` pages at a time; completes ``doc_row`` and
    ``warnings`` at the end.

    The title (given, else the metadata's, else the first line of the first page with text) goes
    into every chunk's embedded text, so chunks are held back until the first page with text.
    """
    title: str | None = doc_row["title"] or pages.metadata_title
    sections: list[Section] = []
    chunked = position = 0
    try:
        for start in range(0, pages.count, PDF_PAGES_PER_STEP):
            sections.extend(pages.sections(start, start + PDF_PAGES_PER_STEP))
            if title is None:
                if not sections:
                    continue
                title = pages.title(sections, "")
            drafts = chunk_sections(
                sections[chunked:], markdown=False, max_chars=max_chars, position=position, section=chunked
            )
            chunked, position = len(sections), position + len(drafts)
            if drafts:
                yield _rows(doc_row, title, drafts)
    finally:
        pages.close()
    pages.require_text(sections)
    warnings.extend(pages.warnings())
    content = pdf_content(sections)
    doc_row.update(
        title=title or fallback_title, chunk_count=position, content=content, size_chars=len(content)
    )


def _stale_chunks(prefixes: list[str], before: str) -> str:
    """The chunks of these documents (a published version's ``version_prefix`` each) that are not
    of that version and were written ``before``. One ``IN`` over the prefixes when they have one
    length (document ids are): an ``OR`` per document cost seconds per thousand small files."""
    if not prefixes:
        return ""
    width = len(prefixes[0])
    if all(len(prefix) == width for prefix in prefixes):
        ids = in_list("document_id", [prefix.split(":", 1)[0] for prefix in prefixes])
        return (
            f"{ids} AND left(chunk_id, {width}) NOT IN ({', '.join(map(sql_literal, prefixes))}) AND {before}"
        )
    return " OR ".join(
        f"(document_id = {sql_literal(prefix.split(':', 1)[0])} AND NOT starts_with(chunk_id, "
        f"{sql_literal(prefix)}) AND {before})"
        for prefix in prefixes
    )


def _sql_time(moment: datetime) -> str:
    """``moment`` as the text of a SQL ``TIMESTAMP`` literal (UTC, microseconds)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


async def _write_originals(
    files: lancedb.AsyncTable, docs: Sequence[PreparedDocument], written_at: datetime
) -> None:
    """Store the documents' original files: one ``files`` row each, replacing the one it had.

    Each file's bytes go to LanceDB as they are (an Arrow buffer over them, no copy), and a
    document without a row yet gets it by an append: a ``merge_insert`` of a 50 MB cell peaked
    at 230 MB over its bytes where an append of the same buffer peaks at 110. Another handle may
    append a row for the same new document at the same moment: the last to append finds two and
    keeps the newer (``_keep_newest``), as a ``merge_insert`` would have kept the last.
    """
    ids = [d.doc_row["document_id"] for d in docs]
    stored = {
        row["document_id"]
        for row in await files.query().where(in_list("document_id", ids)).select(["document_id"]).to_list()
    }
    new = [d for d in docs if d.doc_row["document_id"] not in stored]
    if new:
        await files.add(_originals_table(new, written_at))
        await _keep_newest(files, [d.doc_row["document_id"] for d in new])
    replaced = [d for d in docs if d.doc_row["document_id"] in stored]
    if replaced:
        await (
            files.merge_insert("document_id")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute(_originals_table(replaced, written_at))
        )


async def _keep_newest(files: lancedb.AsyncTable, document_ids: list[str]) -> None:
    """Delete all but the newest ``files`` row of each of these documents (one read when each has
    one row, as it has but for two writers appending at once)."""
    rows = (
        await files.query()
        .where(in_list("document_id", document_ids))
        .select(["document_id", WRITTEN_AT])
        .to_list()
    )
    newest: dict[str, datetime] = {}
    counts: dict[str, int] = {}
    for row in rows:
        i = row["document_id"]
        counts[i] = counts.get(i, 0) + 1
        newest[i] = max(newest.get(i, row[WRITTEN_AT]), row[WRITTEN_AT])
    for i, count in counts.items():
        if count > 1:
            stamp = sql_literal(_sql_time(newest[i]))
            await files.delete(f"document_id = {sql_literal(i)} AND {WRITTEN_AT} < TIMESTAMP {stamp}")


def _originals_table(docs: Sequence[PreparedDocument], written_at: datetime) -> pa.Table:
    """The ``files`` rows of ``docs``, each file's bytes in a buffer over them (not copied)."""
    schema = files_schema()
    return pa.Table.from_batches(
        [
            pa.record_batch(
                [
                    pa.array([doc.file_row["document_id"]], pa.string()),
                    pa.array([doc.file_row["filename"]], pa.string()),
                    pa.array([doc.file_row["media_type"]], pa.string()),
                    _binary(doc.file_row["data"]),
                    pa.array([written_at], schema.field(WRITTEN_AT).type),
                ],
                schema=schema,
            )
            for doc in docs
        ],
        schema=schema,
    )


def _binary(data: bytes) -> pa.Array:
    """A one-value ``large_binary`` array over ``data`` itself."""
    offsets = pa.array([0, len(data)], pa.int64()).buffers()[1]
    return pa.Array.from_buffers(pa.large_binary(), 1, [None, offsets, pa.py_buffer(data)])


async def _published_hashes(documents: lancedb.AsyncTable, document_ids: list[str]) -> dict[str, str]:
    """The content hash each of these documents is published with (absent: not published)."""
    rows = (
        await documents.query()
        .where(in_list("document_id", document_ids))
        .select(["document_id", "content_hash"])
        .to_list()
    )
    return {row["document_id"]: row["content_hash"] for row in rows}


async def write_batch(
    tables: Tables, batch: Sequence[PreparedDocument], probe_dimensions: Callable[[], Awaitable[int]]
) -> None:
    """Store embedded documents and their files; one ``documents`` commit publishes the new versions.

    A ``partial`` document (a big one, committed as it is embedded) has its original and the
    chunks it holds stored, and is not published: its chunks stay invisible until the write of
    its last chunks publishes it, so a search never sees part of a version.

    A source without ``groups`` keeps the stored document's (read under the write lock, so a
    change of groups made while the document was being embedded is kept); a new one is everyone's.

    Other handles on the store (processes, hosts) may write the same documents at once, without a
    common lock. A version is published only over the version this write read before stamping
    its rows (a conditional ``documents`` commit): when another writer published first, this one
    is left unpublished. Only a write that published cleans up, and only chunks written before its
    own, so a concurrent writer's newer chunks are never removed from under its publication.
    """
    unique = {doc.doc_row["document_id"]: doc for doc in batch}
    async with tables.write_lock:
        keep = [i for i, d in unique.items() if d.source.groups is None]
        current = await tables.groups_of(keep)
        groups = {
            i: stored_groups(d.source.groups)
            if d.source.groups is not None
            else current.get(i) or stored_groups(())
            for i, d in unique.items()
        }
        for i, doc in unique.items():
            doc.doc_row[GROUPS] = groups[i]
        rows = [
            {**row, "vector": vector, GROUPS: groups[doc.doc_row["document_id"]]}
            for doc in unique.values()
            for row, vector in zip(
                doc.chunk_rows[: len(doc.vectors)] if doc.partial else doc.chunk_rows,
                doc.vectors,
                strict=True,
            )
        ]
        dimensions = len(rows[0]["vector"]) if rows else tables.dimensions
        if dimensions is None:  # only empty documents so far: anything can be recorded later
            dimensions = await probe_dimensions()
        chunks, documents, files = await tables.ensure(dimensions)
        publish = {i: d for i, d in unique.items() if not d.partial}
        replacing = await _published_hashes(documents, list(publish)) if publish else {}
        written_at = datetime.now(UTC)  # after the read: a writer that read our version stamps later
        for row in rows:
            row[WRITTEN_AT] = written_at
        originals = [d for d in unique.values() if not d.file_written]
        if originals:
            await _write_originals(files, originals, written_at)
            for doc in originals:
                doc.file_written = True
                doc.file_row["data"] = b""  # stored: a big file's bytes need not wait for its last part
        if rows:
            await (
                chunks.merge_insert("chunk_id")
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute(pa.Table.from_pylist(rows, schema=chunks_schema(dimensions)))
            )
        if not publish:
            return  # a big document's chunks so far, invisible until its ``documents`` row comes
        still_replacing = " OR ".join(
            f"(target.document_id = {sql_literal(i)} AND target.content_hash = {sql_literal(h)})"
            for i, h in replacing.items()
        )
        await (
            documents.merge_insert("document_id")
            .when_matched_update_all(where=still_replacing or "false")
            .when_not_matched_insert_all()
            .execute(pa.Table.from_pylist([d.doc_row for d in publish.values()], schema=documents_schema()))
        )
        published = await _published_hashes(documents, list(publish))
        before = f"({WRITTEN_AT} IS NULL OR {WRITTEN_AT} < TIMESTAMP {sql_literal(_sql_time(written_at))})"
        stale = _stale_chunks(
            [
                version_prefix(i, d.doc_row["content_hash"])
                for i, d in publish.items()
                if published.get(i) == d.doc_row["content_hash"]
            ],
            before,
        )
        if stale:
            await chunks.delete(stale)
