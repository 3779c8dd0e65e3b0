"""Split parsed sections into size-bounded chunks without crossing a section boundary.

Splitting inside a section is delegated to ``semantic-text-splitter``, which prefers the largest
semantic unit that fits (block, sentence, word) and never exceeds the capacity in characters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from semantic_text_splitter import MarkdownSplitter, TextSplitter

from .readers import ParsedDocument

__all__ = ["ChunkDraft", "chunk_document"]


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
    splitter = _splitter(doc.format in ("markdown", "html"), max_chars)
    drafts: list[ChunkDraft] = []
    for section_index, section in enumerate(doc.sections):
        for piece in splitter.chunks(section.text):
            if piece.strip():
                drafts.append(
                    ChunkDraft(piece, len(drafts), section_index, list(section.headings), section.page)
                )
    return drafts
