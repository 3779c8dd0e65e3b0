"""Mirroring a folder or an object-store prefix into the knowledge base.

A sync lists its source, ingests every file (the pipeline skips unchanged ones by content hash),
then deletes the documents whose file is gone. Its documents are its own: a synced file's
``origin`` is ``sync:<root, percent-encoded>/<path relative to the root>``, so the sync's documents
are exactly those whose origin starts with ``sync:<root>/``. The root is encoded whole (no ``/``
left in it), so a sync of ``docs`` never claims a document of a sync of ``docs/guides``, and
neither ever touches a document ingested by hand or uploaded (``file://...``, ``upload://...``).
Clients see the relative path as the document's ``uri``, as for a folder ingested by hand.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from .documents import delete_document
from .filters import sql_literal
from .models import Document, IngestOutcome, IngestProgress
from .pipeline import Stop
from .sources import LocalFolder, Source, SyncFile, SyncSource, SyncSourceError
from .tables import DOC_COLUMNS, Tables

__all__ = [
    "LocalFolder",
    "SyncFile",
    "SyncPlan",
    "SyncSource",
    "SyncSourceError",
    "open_sync_source",
    "run_sync",
    "synced_documents",
]

Ingest = Callable[
    [list[Source], Callable[[IngestProgress], None], "Stop | None"], Awaitable[list[IngestOutcome]]
]


def open_sync_source(spec: str) -> SyncSource:
    """``s3://bucket/prefix`` (through the standard AWS variables), else a local folder."""
    if spec.startswith("s3://"):
        from .s3 import S3Prefix  # boto3 is imported only by a sync that needs it

        return S3Prefix(spec)
    if "://" in spec:
        raise SyncSourceError(
            f"cannot sync {spec!r}: only local folders and s3://bucket/prefix are supported"
        )
    return LocalFolder(spec)


@dataclass
class SyncPlan:
    """What a sync is about to do: the files to ingest (unchanged ones are skipped by content hash
    while ingesting) and the documents whose file is gone."""

    source: SyncSource
    files: list[Source]
    removed: list[Document] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        """One name per outcome, in the order outcomes come: files, then removed documents."""
        return [s.label for s in self.files] + [d.uri for d in self.removed]


async def synced_documents(tables: Tables, source: SyncSource) -> dict[str, Document]:
    """The documents a previous sync of ``source`` left, by origin."""
    if tables.documents is None:
        return {}
    rows = (
        await tables.documents.query()
        .where(f"starts_with(origin, {sql_literal(source.namespace)})")
        .select([*DOC_COLUMNS, "origin"])
        .to_list()
    )
    return {row.pop("origin"): Document(**row) for row in rows}


async def plan_sync(tables: Tables, source: SyncSource, files: list[SyncFile]) -> SyncPlan:
    """Compare a listing of ``source`` with what the knowledge base holds of it."""
    if not files:
        raise SyncSourceError(
            f"nothing to sync: {source.root} holds no file to ingest (nothing was deleted; an empty "
            "source is taken for a wrong one)"
        )
    sources = [source.source(f) for f in files]
    current = {s.origin for s in sources}
    known = await synced_documents(tables, source)
    removed = sorted((d for origin, d in known.items() if origin not in current), key=lambda d: d.uri)
    return SyncPlan(source, sources, removed)


async def run_sync(
    tables: Tables,
    source: SyncSource,
    ingest: Ingest,
    *,
    on_plan: Callable[[SyncPlan], None] | None = None,
    on_progress: Callable[[IngestProgress], None] | None = None,
    stop: Stop | None = None,
) -> list[IngestOutcome]:
    """List ``source``, ``ingest`` its files, then delete the documents whose file is gone.

    The deletions come after the ingest, so a renamed file is never missing from search in
    between; ``on_progress`` counts every outcome against the plan (deletions last), and once
    ``stop()`` is true the deletions not made yet come out ``cancelled``.
    """
    plan = await plan_sync(tables, source, await asyncio.to_thread(source.list))
    if on_plan:
        on_plan(plan)
    last = IngestProgress(files_total=len(plan.names))

    def progress(state: IngestProgress) -> None:
        nonlocal last
        last = state.model_copy(update={"files_total": last.files_total})
        if on_progress:
            on_progress(last)

    outcomes = await ingest(plan.files, progress, stop)
    for document in plan.removed:
        if stop is not None and stop():
            outcome = IngestOutcome(source=document.uri, status="cancelled")
        else:
            await delete_document(tables, document.document_id)
            outcome = IngestOutcome(
                source=document.uri, status="deleted", document_id=document.document_id, title=document.title
            )
        outcomes.append(outcome)
        progress(last.model_copy(update={"files_done": len(outcomes), "outcome": outcome}))
    return outcomes
