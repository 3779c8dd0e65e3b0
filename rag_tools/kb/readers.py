"""Turn a source (text, Markdown, HTML, PDF, office formats) into a title and structural sections.

A section is the unit the chunker never crosses: the text under one heading, one PDF page, one
slide or one sheet. HTML pages are read by ``html`` (main content, heading paths, tables); PDF
text comes from ``pypdf`` page by page so that page numbers reach the chunks. The office formats
(``.docx``, ``.pptx``, ``.xlsx``, ``.csv``, ``.epub``) are read by ``office``.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .parsed import (
    BinaryContentError,
    DocumentFormat,
    ParsedDocument,
    Section,
    UnsupportedFormatError,
    decode_text,
    parse_markdown,
)

__all__ = [
    "MARKDOWN_FORMATS",
    "MEDIA_TYPES",
    "NO_TEXT",
    "NO_TEXT_LAYER",
    "SUPPORTED_SUFFIXES",
    "BinaryContentError",
    "DocumentFormat",
    "ParsedDocument",
    "PdfPages",
    "Section",
    "UnsupportedFormatError",
    "decode_text",
    "detect_format",
    "parse_document",
    "parse_markdown",
    "pdf_content",
]


SUPPORTED_SUFFIXES: dict[str, DocumentFormat] = {
    ".txt": "text",
    ".text": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
    ".docx": "docx",
    ".pptx": "pptx",
    ".xlsx": "xlsx",
    ".csv": "csv",
    ".epub": "epub",
}

MEDIA_TYPES: dict[DocumentFormat, str] = {
    "text": "text/plain",
    "markdown": "text/markdown",
    "html": "text/html",
    "pdf": "application/pdf",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "csv": "text/csv",
    "epub": "application/epub+zip",
}

#: The formats whose text is written in Markdown (headings, lists, tables) once read.
MARKDOWN_FORMATS: frozenset[DocumentFormat] = frozenset(
    {"markdown", "html", "docx", "pptx", "xlsx", "csv", "epub"}
)

NO_TEXT_LAYER = "no text layer (scanned document?)"
NO_TEXT = "the file holds no text"


def detect_format(name: str) -> DocumentFormat:
    """The format implied by a file name's suffix."""
    suffix = Path(name).suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        supported = ", ".join(sorted(SUPPORTED_SUFFIXES))
        raise UnsupportedFormatError(f"unsupported file type {suffix or '(none)'!r}; supported: {supported}")
    return SUPPORTED_SUFFIXES[suffix]


def parse_document(data: bytes, *, name: str, format: DocumentFormat | None = None) -> ParsedDocument:
    """Parse ``data`` (the raw bytes of ``name``) into sections."""
    fmt = format or detect_format(name)
    fallback_title = Path(name).stem.replace("_", " ").replace("-", " ").strip() or name
    if fmt == "pdf":
        return _parse_pdf(data, fallback_title)
    if fmt in ("docx", "pptx", "xlsx", "csv", "epub"):
        from .office import parse_office  # imported on first use: the office libraries load slowly

        return parse_office(data, fmt, fallback_title)
    text = decode_text(data, fmt)
    if fmt == "html":
        from .html import parse_html

        parsed = parse_html(text, fallback_title)
    elif fmt == "markdown":
        parsed = parse_markdown(text, fallback_title)
    else:
        parsed = ParsedDocument(fallback_title, "text", text, [Section(text)] if text.strip() else [])
    if not any(section.text.strip() for section in parsed.sections):
        raise ValueError(NO_TEXT)  # nothing to index is a failure, not an empty success
    return parsed


def _parse_pdf(data: bytes, fallback_title: str) -> ParsedDocument:
    pages = PdfPages(data)
    sections = pages.sections(0, pages.count)
    pages.require_text(sections)
    return ParsedDocument(pages.title(sections, fallback_title), "pdf", pdf_content(sections), sections)


class PdfPages:
    """A PDF read page by page, so that ingestion can embed the first pages while later ones parse."""

    def __init__(self, data: bytes) -> None:
        from pypdf import PdfReader

        with _pdf_errors():
            self._reader = PdfReader(io.BytesIO(data))
            self.count = len(self._reader.pages)
        try:
            meta_title = self._reader.metadata.title if self._reader.metadata else None
        except Exception:  # a broken info dictionary is not worth failing the document for
            meta_title = None
        self.metadata_title: str | None = (meta_title or "").strip() or None

    def sections(self, start: int, stop: int) -> list[Section]:
        """The pages ``start`` to ``stop`` (0-based, ``stop`` excluded) that hold text, numbered from 1."""
        with _pdf_errors():
            texts = [
                (self._reader.pages[i].extract_text() or "") for i in range(start, min(stop, self.count))
            ]
        return [
            Section(text.strip(), [], start + k + 1, f"page {start + k + 1}")
            for k, text in enumerate(texts)
            if text.strip()
        ]

    def require_text(self, sections: list[Section]) -> None:
        """Fail with the one-line reason when ``sections``, all the pages', hold no text: nothing to
        index is a failure, not an empty success."""
        if not sections:
            raise ValueError(NO_TEXT_LAYER if self.count else "the PDF has no pages")

    def title(self, sections: list[Section], fallback: str) -> str:
        """The metadata title, else the first line of the first page with text, else ``fallback``."""
        first_line = next((s.text.splitlines()[0].strip() for s in sections), None)
        return self.metadata_title or first_line or fallback


def pdf_content(sections: list[Section]) -> str:
    """A PDF's stored text: its pages with text, each under a ``[page N]`` marker."""
    return "\n\n".join(f"[page {s.page}]\n{s.text}" for s in sections)


@contextmanager
def _pdf_errors() -> Iterator[None]:
    from pypdf.errors import PdfReadError

    try:
        yield
    except (PdfReadError, ValueError, KeyError) as exc:
        raise ValueError(f"not a readable PDF: {exc}") from exc
