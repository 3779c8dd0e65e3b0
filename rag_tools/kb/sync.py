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

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from urllib.parse import quote

from .errors import KnowledgeBaseError
from .filters import sql_literal
from .models import Document
from .sources import Source, folder_files
from .tables import DOC_COLUMNS, Tables

__all__ = [
    "LocalFolder",
    "SyncFile",
    "SyncPlan",
    "SyncSource",
    "SyncSourceError",
    "open_sync_source",
    "synced_documents",
]


class SyncSourceError(KnowledgeBaseError):
    """The source of a sync cannot be listed (missing, unreachable, refused, empty); nothing changed."""


@dataclass(frozen=True)
class SyncFile:
    """A file of a sync source: its path relative to the root, and how to read it (blocking)."""

    path: str
    read: Callable[[], bytes]


class SyncSource(ABC):
    """A folder or a prefix to mirror. ``root`` names it as a URI (``file:///...``, ``s3://b/p``)."""

    root: str

    @abstractmethod
    def list(self) -> list[SyncFile]:
        """Every ingestible file under the root, in a stable order (blocking).

        Raises ``SyncSourceError`` when the source cannot be listed.
        """

    @property
    def namespace(self) -> str:
        """How the origin of every document of this source starts."""
        return f"sync:{quote(self.root, safe='')}/"

    def source(self, file: SyncFile) -> Source:
        """The ingestion source of one of its files: shown as its relative path."""
        return Source(
            label=file.path,
            origin=self.namespace + file.path,
            display=file.path,
            name=PurePosixPath(file.path).name,
            read=file.read,
        )


class LocalFolder(SyncSource):
    """A folder on this machine (recursively; hidden and unsupported files are left out)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser().resolve()
        self.root = self.path.as_uri()

    def list(self) -> list[SyncFile]:
        if not self.path.is_dir():
            reason = "not a folder" if self.path.exists() else "no such folder"
            raise SyncSourceError(f"cannot sync {self.path}: {reason}")
        try:
            return [
                SyncFile(p.relative_to(self.path).as_posix(), p.read_bytes) for p in folder_files(self.path)
            ]
        except OSError as exc:
            raise SyncSourceError(f"cannot list {self.path}: {exc.strerror or exc}") from exc


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
