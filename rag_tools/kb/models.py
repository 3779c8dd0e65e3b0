"""The values the knowledge base hands out: documents, chunks, search hits, ingestion outcomes."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, Field, field_validator

from .access import shown_groups

__all__ = [
    "Document",
    "DocumentFile",
    "DocumentPage",
    "IngestOutcome",
    "IngestProgress",
    "IngestReport",
    "SearchHit",
]


class Document(BaseModel):
    """A document in the knowledge base; ``content`` is filled only when asked for.

    ``uri`` is the display source (a path relative to the ingested folder, a file name, or the URL
    the document was ingested from), never a path on the server. ``groups`` are who may read it
    (``[]``: everyone).
    """

    document_id: str
    uri: str
    title: str
    format: str
    content_hash: str
    chunk_count: int
    size_chars: int
    updated_at: datetime
    groups: list[str] = Field(default_factory=list)
    content: str | None = None

    @field_validator("groups", mode="before")
    @classmethod
    def _shown(cls, value: Any) -> list[str]:
        return shown_groups(value)


class DocumentPage(BaseModel):
    """One page of a document listing."""

    documents: list[Document]
    page: int
    page_size: int
    total: int

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.page_size))

    @property
    def has_next(self) -> bool:
        return self.page < self.pages


class DocumentFile(NamedTuple):
    """A document's original file as it was ingested."""

    data: bytes
    media_type: str
    filename: str


class SearchHit(BaseModel):
    """A chunk returned by a search, with its source and (optionally) surrounding text.

    ``uri`` is the document's display source, as on ``Document``. ``page`` is a PDF page (for
    ``#page=N`` links); ``locator`` names the place for people: ``"page 3"``, ``"slide 3"``,
    ``"Sheet1, rows 12-20"``, or ``""`` when the format has none.
    """

    chunk_id: str
    document_id: str
    title: str
    uri: str
    text: str
    headings: list[str] = Field(default_factory=list)
    page: int | None = None
    locator: str = ""
    position: int
    section: int
    score: float
    context: str | None = Field(
        default=None, description="The hit with neighbouring text of the same section, when expanded."
    )

    @property
    def location(self) -> str:
        """Where the hit sits, for people: heading path and locator (``"Offline folders, slide 3"``).

        A locator that already starts with the heading path (a sheet's name) stands alone.
        """
        path = " > ".join(self.headings)
        if path and self.locator.startswith(path):
            return self.locator
        return ", ".join(part for part in (path, self.locator) if part)


IngestStatus = Literal["added", "updated", "unchanged", "deleted", "cancelled", "error"]


class IngestOutcome(BaseModel):
    """What happened to one source during ingestion.

    ``deleted``: a sync removed the document (its file is gone from the synced source);
    ``cancelled``: the run was stopped before this source was written (nothing of it was).
    """

    source: str
    status: IngestStatus
    document_id: str | None = None
    title: str | None = None
    chunks: int = 0
    error: str | None = None
    warnings: list[str] = Field(default_factory=list)
    """What was ingested only in part or with doubt (pages OCR read with low confidence)."""


class IngestProgress(BaseModel):
    """Where an ingestion run stands; sent to ``on_progress`` as chunks are embedded and files finish.

    ``chunks_total`` counts the chunks of the files parsed so far, so it grows until
    ``chunks_total_final``; ``outcome`` is set on the event that reports one file's outcome.
    """

    files_total: int
    files_done: int = 0
    chunks_total: int = 0
    chunks_done: int = 0
    chunks_total_final: bool = False
    outcome: IngestOutcome | None = None


class IngestReport(BaseModel):
    """Per-source outcomes of an ingestion run, in the order the sources were given."""

    outcomes: list[IngestOutcome] = Field(default_factory=list)

    def count(self, status: IngestStatus) -> int:
        return sum(1 for o in self.outcomes if o.status == status)

    @property
    def errors(self) -> list[IngestOutcome]:
        return [o for o in self.outcomes if o.status == "error"]

    def summary(self) -> str:
        chunks = sum(o.chunks for o in self.outcomes if o.status in ("added", "updated"))
        extra = "".join(
            f", {self.count(status)} {status}" for status in ("deleted", "cancelled") if self.count(status)
        )
        return (
            f"{self.count('added')} added, {self.count('updated')} updated, "
            f"{self.count('unchanged')} unchanged{extra}, {self.count('error')} failed; {chunks} chunks written"
        )
