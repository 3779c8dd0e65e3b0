"""What to ingest: files, folders and glob patterns expanded into sources with identity and display.

Each source has two names. Its ``origin`` (the absolute ``file://`` URI of a file, ``upload://name``
for an upload, or the URI the caller gave) identifies the document across re-ingestions and never
leaves the knowledge base. Its ``display`` is what clients see as ``uri``: the path relative to
the ingested folder (or glob base), the file name of a single file or upload, or the caller's URI.

A sync mirrors a ``SyncSource`` (a ``LocalFolder`` here; an S3 prefix in ``s3``), whose files
become sources the same way (``sync`` plans what to ingest and delete).
"""

from __future__ import annotations

import glob
import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import quote

from ..arguments import as_list
from .errors import KnowledgeBaseError
from .models import IngestOutcome
from .readers import SUPPORTED_SUFFIXES

__all__ = [
    "LocalFolder",
    "Source",
    "SyncFile",
    "SyncSource",
    "SyncSourceError",
    "bytes_source",
    "document_id_for",
    "expand_sources",
    "folder_files",
    "is_ingestible",
    "upload_origin",
]

_GLOB_CHARS = frozenset("*?[")


def document_id_for(uri: str) -> str:
    """The stable id of the document whose origin is ``uri``: re-ingesting it updates the same document."""
    return hashlib.sha256(uri.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Source:
    """One thing to ingest: where its bytes come from, its identity and its display source.

    ``groups`` are who may read it (``()``: everyone); ``None`` keeps a known document's groups
    (a new one is everyone's).
    """

    label: str
    origin: str
    display: str
    name: str
    read: Callable[[], bytes]
    title: str | None = None
    groups: tuple[str, ...] | None = None
    size: Callable[[], int] | None = None
    """Its size in bytes without reading it, when that is known (a file's ``stat``)."""

    @property
    def document_id(self) -> str:
        return document_id_for(self.origin)


def upload_origin(name: str) -> str:
    """The origin of a file uploaded as ``name`` (``document_id_for`` of it is its document's id)."""
    return f"upload://{name}"


def bytes_source(data: bytes, *, name: str, uri: str | None, title: str | None) -> Source:
    """An in-memory source (an upload): shown as ``uri`` when given, else as ``name``."""
    if not isinstance(data, bytes | bytearray | memoryview):
        hint = ": encode text first (text.encode())" if isinstance(data, str) else ""
        raise TypeError(f"an upload's data must be bytes, not {type(data).__name__}{hint}")
    return Source(
        label=name,
        origin=uri or upload_origin(name),
        display=uri or name,
        name=name,
        read=lambda: data,
        title=title,
    )


def _file_source(path: Path, base: Path | None) -> Source:
    try:
        display = path.relative_to(base).as_posix() if base is not None else path.name
    except ValueError:  # a glob match outside its base (``..`` in the pattern)
        display = path.name
    return Source(
        label=str(path),
        origin=path.resolve().as_uri(),
        display=display,
        name=path.name,
        read=path.read_bytes,
        size=lambda: path.stat().st_size,
    )


def _glob_base(pattern: str) -> Path:
    """The folder a glob pattern starts from: its longest leading part without wildcards."""
    parts: list[str] = []
    for part in Path(pattern).parts[:-1]:
        if _GLOB_CHARS & set(part):
            break
        parts.append(part)
    return Path(*parts) if parts else Path(".")


def is_ingestible(relative: str) -> bool:
    """A file a folder's ingestion takes: a supported suffix, no hidden part in its relative path,
    and not an Office owner file (``~$report.docx``, which Word and Excel keep beside a file while
    it is open: a few bytes naming who has it, never a document)."""
    parts = relative.split("/")
    name = parts[-1]
    return (
        PurePosixPath(name).suffix.lower() in SUPPORTED_SUFFIXES
        and not name.startswith("~$")
        and not any(p.startswith(".") for p in parts)
    )


def folder_files(folder: Path) -> list[Path]:
    """The files under ``folder`` that its ingestion takes, in a stable order."""
    return [
        child
        for child in sorted(folder.rglob("*"))
        if child.is_file() and is_ingestible(child.relative_to(folder).as_posix())
    ]


def expand_sources(paths: Iterable[str | Path]) -> list[Source | IngestOutcome]:
    """Files to ingest, in a stable order; problems become error outcomes in place."""
    seen: set[Path] = set()
    result: list[Source | IngestOutcome] = []

    def add(path: Path, base: Path | None) -> None:
        key = path.resolve()
        if key not in seen:
            seen.add(key)
            result.append(_file_source(path, base))

    for entry in as_list(paths, "paths"):
        text = str(entry)
        path = Path(text)
        if path.is_dir():
            found = folder_files(path)
            for child in found:
                add(child, path)
            if not found:
                supported = ", ".join(sorted(SUPPORTED_SUFFIXES))
                result.append(_error(text, f"no files to ingest in this folder (supported: {supported})"))
        elif path.exists():
            add(path, None)
        elif _GLOB_CHARS & set(text):
            base = _glob_base(text)
            files = [m for m in sorted(Path(m) for m in glob.glob(text, recursive=True)) if m.is_file()]
            if not files:
                result.append(_error(text, "no files match this pattern"))
            for match in files:
                add(match, base)
        else:
            result.append(_error(text, "no such file or directory"))
    return result


def _error(source: str, message: str) -> IngestOutcome:
    return IngestOutcome(source=source, status="error", error=message)


# -- what a sync mirrors ---------------------------------------------------------------------


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
