"""Split parsed sections into size-bounded chunks without crossing a section boundary.

Splitting inside a section is delegated to ``semantic-text-splitter``, which prefers the largest
semantic unit that fits (block, sentence, word) and never exceeds the capacity in characters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from semantic_text_splitter import MarkdownSplitter, TextSplitter

from .readers import ParsedDocument, Section

__all__ = ["ChunkDraft", "chunk_document", "chunk_sections"]


@dataclass
class ChunkDraft:
    """A chunk before it is embedded: its text and where it sits in the document."""

    text: str
    position: int
    section: int
    headings: list[str] = field(default_factory=list)
    page: int | None = None


@lru_cache(maxsize=16)
def _splitter(markdown: bool, capacity: int) -> TextSplitter | MarkdownSplitter:
    return MarkdownSplitter(capacity) if markdown else TextSplitter(capacity)


def chunk_document(doc: ParsedDocument, *, max_chars: int) -> list[ChunkDraft]:
    """Chunks of at most ``max_chars`` characters, numbered in document order."""
    return chunk_sections(doc.sections, markdown=doc.format in ("markdown", "html"), max_chars=max_chars)


def chunk_sections(
    sections: Sequence[Section], *, markdown: bool, max_chars: int, position: int = 0, section: int = 0
) -> list[ChunkDraft]:
    """Chunks of ``sections``, numbered from ``position`` and ``section`` (to continue a document)."""
    splitter = _splitter(markdown, max_chars)
    drafts: list[ChunkDraft] = []
    for section_index, part in enumerate(sections, section):
        for piece in splitter.chunks(part.text):
            if piece.strip():
                drafts.append(
                    ChunkDraft(piece, position + len(drafts), section_index, list(part.headings), part.page)
                )
    return drafts
