"""Documents in the knowledge base: listing, lookup, a document's chunks and file, deletion.

Every lookup takes the ``Reader`` it answers for: a document it may not read is not there (its
predicate is part of the query). Every query here selects the public columns only: a document's ``origin`` (the path it was read
from on the server) is used for matching but never returned.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC
from typing import Any

from .access import ALL, Reader, stored_groups
from .errors import AmbiguousDocumentError, DocumentChanged
from .filters import FilterLike, all_of, as_filter, in_list, sql_literal
from .models import Document, DocumentFile, DocumentPage, SearchHit
from .parsed import decode_text
from .search import hit_from_row
from .tables import DOC_COLUMNS, GROUPS, HIT_COLUMNS, WRITTEN_AT, Tables, version_prefix

__all__ = [
    "count_documents",
    "delete_document",
    "document_chunks",
    "document_file",
    "documents_where",
    "find_document",
    "list_documents",
    "readability",
    "regroup",
    "set_groups",
]

_BATCH = 500

_ROUNDS = 3
"""Reads of a document's chunks: a replace publishing between the version read and its chunks' read
means reading again at the new version."""


async def documents_where(
    tables: Tables,
    predicate: str | None,
    *,
    with_content: bool = False,
    limit: int | None = None,
    reader: Reader = ALL,
) -> list[Document]:
    """Documents matching ``predicate`` (all when ``None``) that ``reader`` may read, without their
    text unless asked."""
    if tables.documents is None:
        return []
    query = tables.documents.query().select([*DOC_COLUMNS, "content"] if with_content else DOC_COLUMNS)
    predicate = all_of(predicate, reader.to_sql())
    if predicate:
        query = query.where(predicate)
    if limit:
        query = query.limit(limit)
    docs = [Document(**row) for row in await query.to_list()]
    if with_content:
        docs = [await _with_streamed_content(tables, doc) for doc in docs]
    return docs


async def _with_streamed_content(tables: Tables, doc: Document) -> Document:
    """``doc`` with its text read from its original when its row does not keep it: a big text
    (``ingestion.STREAMED_TEXT_BYTES``) is stored once, as its file, not again as its row's content,
    which cost a copy of the whole file in memory at the write that publishes it."""
    if doc.content or not doc.size_chars or doc.format != "text":
        return doc
    original = await document_file(tables, doc.document_id)
    return doc if original is None else doc.model_copy(update={"content": decode_text(original.data, "text")})


async def document_by_id(
    tables: Tables, document_id: str, *, with_content: bool = False, reader: Reader = ALL
) -> Document | None:
    """The document with this id, or ``None`` (also when ``reader`` may not read it)."""
    docs = await documents_where(
        tables, f"document_id = {sql_literal(document_id)}", with_content=with_content, limit=1, reader=reader
    )
    return docs[0] if docs else None


async def count_documents(tables: Tables, reader: Reader = ALL) -> int:
    """How many documents ``reader`` may read."""
    documents = tables.documents
    return 0 if documents is None else await documents.count_rows(reader.to_sql())


async def readability(tables: Tables, document_ids: set[str], reader: Reader) -> dict[str, bool]:
    """For each of ``document_ids`` that exists, whether ``reader`` may read its published version."""
    if not document_ids:
        return {}
    published = await tables.published_access(document_ids)
    return {i: reader.may_read(groups) for i, (_, groups) in published.items()}


async def list_documents(
    tables: Tables, page: int, page_size: int, filter: FilterLike | None, reader: Reader = ALL
) -> DocumentPage:
    """One page of the documents ``reader`` may read, ordered by title (case-insensitive), then uri.

    The order is found over the matching documents' ids, titles and uris only; the page's rows are
    read whole afterwards, so a page of a knowledge base of many thousands costs one narrow scan.
    """
    if page < 1 or page_size < 1:
        raise ValueError("page and page_size must be at least 1")
    if tables.documents is None:
        return DocumentPage(documents=[], page=page, page_size=page_size, total=0)
    restriction = as_filter(filter)
    predicate = all_of(restriction.to_sql() if restriction else None, reader.to_sql())
    query = tables.documents.query().select(["document_id", "title", "uri"])
    if predicate:
        query = query.where(predicate)
    keys = sorted(
        ((row["title"].casefold(), row["uri"], row["document_id"]) for row in await query.to_list()),
    )
    start = (page - 1) * page_size
    wanted = [document_id for _, _, document_id in keys[start : start + page_size]]
    rows = (
        {d.document_id: d for d in await documents_where(tables, in_list("document_id", wanted))}
        if wanted
        else {}
    )
    documents = [rows[i] for i in wanted if i in rows]  # one deleted in between is left out
    return DocumentPage(documents=documents, page=page, page_size=page_size, total=len(keys))


async def find_document(
    tables: Tables, query: str, filter: FilterLike | None, with_content: bool, reader: Reader = ALL
) -> Document | None:
    """By exact uri, else partial uri, else partial title; the shortest match wins, then alphabetical."""
    if not query.strip():
        return None
    restriction = as_filter(filter)
    restrict = restriction.to_sql() if restriction else None
    needle = sql_literal(query.lower())
    for predicate, key in (
        (f"uri = {sql_literal(query)}", None),
        (f"strpos(lower(uri), {needle}) > 0", "uri"),
        (f"strpos(lower(title), {needle}) > 0", "title"),
    ):
        docs = await documents_where(tables, all_of(predicate, restrict), reader=reader)
        if docs:
            if key:
                docs.sort(key=lambda d: (len(getattr(d, key)), getattr(d, key).casefold(), d.uri))
            doc = docs[0]
            if with_content:
                return await document_by_id(tables, doc.document_id, with_content=True, reader=reader)
            return doc
    return None


async def document_chunks(tables: Tables, document_id: str, reader: Reader = ALL) -> list[SearchHit]:
    """A document's chunks in document order (``score`` is 0); none when ``reader`` may not read it."""
    published = (await tables.published_access({document_id})).get(document_id)
    rows: list[dict[str, Any]] = []
    for _ in range(_ROUNDS):
        if tables.chunks is None or published is None or not reader.may_read(published[1]):
            return []
        prefix = published[0]
        rows = (
            await tables.chunks.query()
            .where(
                f"document_id = {sql_literal(document_id)} AND starts_with(chunk_id, {sql_literal(prefix)})"
            )
            .select(HIT_COLUMNS)
            .to_list()
        )
        if rows:
            break
        # none: a replace may have published a new version and deleted this one since it was read
        again = (await tables.published_access({document_id})).get(document_id)
        if again == published:
            break
        published = again
    rows.sort(key=lambda r: r["position"])
    return [hit_from_row(r, None) for r in rows]


async def document_file(tables: Tables, document_id: str, reader: Reader = ALL) -> DocumentFile | None:
    """The original file of a document, or ``None`` (no such document, none kept, or ``reader`` may
    not read it)."""
    if tables.files is None:
        return None
    if not reader.reads_all and await document_by_id(tables, document_id, reader=reader) is None:
        return None
    rows = (
        await tables.files.query()
        .where(f"document_id = {sql_literal(document_id)}")
        .select(["data", "media_type", "filename"])
        .limit(1)
        .to_list()
    )
    return DocumentFile(rows[0]["data"], rows[0]["media_type"], rows[0]["filename"]) if rows else None


def _check_unchanged(found: Document, expected: Document | None) -> None:
    """``DocumentChanged`` when ``found`` is not the version and groups the caller read as ``expected``."""
    if expected is not None and (
        found.content_hash != expected.content_hash or sorted(found.groups) != sorted(expected.groups)
    ):
        raise DocumentChanged(
            f"document {found.document_id!r} changed since it was read (another editor replaced it or"
            " changed its groups); read it again"
        )


async def delete_document(tables: Tables, key: str, expected: Document | None = None) -> bool:
    """Remove the document with this id, display uri or origin from every table.

    A display uri shared by several documents (the same relative name in two ingested folders)
    names none of them: ``AmbiguousDocumentError`` lists their ids and nothing is deleted. With
    ``expected``, only while the document is still that version with those groups (checked under the
    write lock): an access check made on what the caller read then holds for what is deleted.
    """
    if tables.documents is None:
        return False
    found = await documents_where(
        tables, f"document_id = {sql_literal(key)}", limit=1
    ) or await documents_where(tables, f"uri = {sql_literal(key)} OR origin = {sql_literal(key)}")
    if not found:
        return False
    if len(found) > 1:
        ids = ", ".join(sorted(d.document_id for d in found))
        raise AmbiguousDocumentError(
            f"{key!r} is the uri of {len(found)} documents ({ids}): delete one by its document id"
        )
    document = found[0]
    document_id = sql_literal(document.document_id)
    async with tables.write_lock:  # unpublish first: an interrupted delete leaves no half document
        if expected is not None:
            now = await documents_where(tables, f"document_id = {document_id}", limit=1)
            if not now:
                return False
            _check_unchanged(now[0], expected)
        rows = await _written_no_later_than(tables, document)
        await tables.documents.delete(
            f"document_id = {document_id} AND content_hash = {sql_literal(document.content_hash)}"
        )
        for table in (tables.chunks, tables.files):
            if table is not None:
                await table.delete(rows)
    return True


async def _written_no_later_than(tables: Tables, document: Document) -> str:
    """The rows of ``document``'s id written no later than its published version (the predicate).

    Another writer (a process, or another ``KnowledgeBase`` on the same store) may be publishing a
    newer version meanwhile: its rows are younger, so a delete that ran between its chunk and
    ``documents`` commits no longer leaves it published without chunks, which a re-ingest then
    skipped as unchanged. Rows without ``written_at`` (older writers) all go, as before.
    """
    document_id = f"document_id = {sql_literal(document.document_id)}"
    if tables.chunks is None:
        return document_id
    prefix = sql_literal(version_prefix(document.document_id, document.content_hash))
    query = tables.chunks.query().where(f"starts_with(chunk_id, {prefix})").select([WRITTEN_AT])
    written = [row[WRITTEN_AT] for row in await query.limit(1).to_list() if row[WRITTEN_AT] is not None]
    if not written:
        return document_id
    when = sql_literal(written[0].astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f"))
    return f"{document_id} AND ({WRITTEN_AT} IS NULL OR {WRITTEN_AT} <= TIMESTAMP {when})"


async def set_groups(
    tables: Tables, document_id: str, groups: tuple[str, ...], expected: Document | None = None
) -> Document | None:
    """Make the document readable by ``groups`` (``()``: everyone); ``None`` when there is none.
    With ``expected``, only while it is still that version with those groups (``DocumentChanged``).

    The ``documents`` row is written first: it decides (searches check every hit against it), so
    the change takes effect at that commit; the chunks' copy, which lets searches filter before
    top-k, follows. An interruption in between is repaired by the next call or ingest of it.
    """
    if tables.documents is None:
        return None
    predicate = f"document_id = {sql_literal(document_id)}"
    value = stored_groups(groups)
    async with tables.write_lock:
        found = await documents_where(tables, predicate, limit=1)
        if not found:
            return None
        _check_unchanged(found[0], expected)
        await tables.documents.update(updates={GROUPS: value}, where=predicate)
        if tables.chunks is not None:
            await tables.chunks.update(updates={GROUPS: value}, where=predicate)
    return await document_by_id(tables, document_id)


async def regroup(tables: Tables, document_ids: Sequence[str], groups: tuple[str, ...]) -> list[str]:
    """Make each of ``document_ids`` readable by ``groups`` (``()``: everyone), writing only those
    whose groups differ; the ids changed.

    ``set_groups`` for many documents at once (a sync that gives a folder new groups): one read and
    one update per table for each batch of ids, in one hold of the write lock, in the same order
    (``documents`` rows first).
    """
    if tables.documents is None or not document_ids:
        return []
    value = stored_groups(groups)
    changed: list[str] = []
    async with tables.write_lock:
        for start in range(0, len(document_ids), _BATCH):
            stored = await tables.groups_of(document_ids[start : start + _BATCH])
            ids = [i for i, current in stored.items() if current != value]
            if not ids:
                continue
            predicate = in_list("document_id", ids)
            await tables.documents.update(updates={GROUPS: value}, where=predicate)
            if tables.chunks is not None:
                await tables.chunks.update(updates={GROUPS: value}, where=predicate)
            changed += ids
    return changed
