"""Turn a source (text, Markdown, HTML, PDF, office formats) into a title and structural sections.

A section is the unit the chunker never crosses: the text under one heading, one PDF page, one
slide or one sheet. HTML is converted to Markdown (``markdownify``) and then read as Markdown; PDF
text comes from ``pypdf`` page by page so that page numbers reach the chunks. The office formats
(``.docx``, ``.pptx``, ``.xlsx``, ``.csv``, ``.epub``) are read by ``office``.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

__all__ = [
    "MARKDOWN_FORMATS",
    "MEDIA_TYPES",
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
    "html_to_markdown",
    "parse_document",
    "parse_markdown",
    "pdf_content",
]

DocumentFormat = Literal["text", "markdown", "html", "pdf", "docx", "pptx", "xlsx", "csv", "epub"]

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

# Share of control characters (other than tab, newlines, form feed) above which "text" is binary.
_CONTROL_RATIO = 0.05
_SNIFF_BYTES = 64 * 1024
_CONTROLS = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f]")


class UnsupportedFormatError(ValueError):
    """The source is not one of the formats the knowledge base can read."""


class BinaryContentError(UnsupportedFormatError):
    """A file named as text (``.md``, ``.txt``, ``.html``) holds binary data."""


@dataclass
class Section:
    """Text under one heading path (or on one page, slide or sheet).

    ``locator`` names where the section is for a citation (``"page 3"``, ``"slide 3"``, a sheet's
    name; ``""`` when the format has no such place). A section that is one Markdown table of a
    sheet or CSV file has ``rows``: the source row number of each of its body rows, so that a chunk
    of it is located as ``"Sheet1, rows 12-20"``. A Word document's section has ``first_table``,
    the number of its first table in the document, so that a chunk holding a table is located as
    ``"table 2"``.
    """

    text: str
    headings: list[str] = field(default_factory=list)
    page: int | None = None
    locator: str = ""
    rows: list[int] | None = None
    first_table: int | None = None


@dataclass
class ParsedDocument:
    """A source reduced to what ingestion needs."""

    title: str
    format: DocumentFormat
    content: str
    sections: list[Section]


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
        title, markdown = html_to_markdown(text)
        doc = parse_markdown(markdown, title or fallback_title)
        return ParsedDocument(doc.title, "html", doc.content, doc.sections)
    if fmt == "markdown":
        return parse_markdown(text, fallback_title)
    return ParsedDocument(fallback_title, "text", text, [Section(text)] if text.strip() else [])


def decode_text(data: bytes, fmt: DocumentFormat) -> str:
    """The text of a text-format file; binary content is refused rather than indexed as garbage."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            pass
    head = data[:_SNIFF_BYTES]
    if head.startswith(b"%PDF-"):
        raise BinaryContentError(f"this is a PDF file, not {fmt}: give it a .pdf name to ingest it")
    if b"\x00" in data:
        raise BinaryContentError(f"this is a binary file (it contains NUL bytes), not {fmt} text")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        try:
            text = data.decode("cp1252")
        except UnicodeDecodeError:
            text = data.decode("latin-1")
    sample = text[:_SNIFF_BYTES]
    controls = len(_CONTROLS.findall(sample))
    if sample and controls / len(sample) > _CONTROL_RATIO:
        raise BinaryContentError(
            f"this is a binary file ({controls / len(sample):.0%} control characters), not {fmt} text"
        )
    return text


def parse_markdown(text: str, fallback_title: str) -> ParsedDocument:
    from markdown_it import MarkdownIt

    lines = text.splitlines()
    tokens = MarkdownIt("commonmark").parse(text)
    headings: list[tuple[int, int, int, str]] = []  # (start line, end line, level, text)
    for i, token in enumerate(tokens):
        if token.type == "heading_open" and token.map:
            inline = tokens[i + 1]
            headings.append((token.map[0], token.map[1], int(token.tag[1]), inline.content.strip()))

    sections: list[Section] = []
    path: list[tuple[int, str]] = []
    cursor = 0

    def flush(until: int) -> None:
        body = "\n".join(lines[cursor:until]).strip()
        if body:
            sections.append(Section(body, [h for _, h in path]))

    for start, end, level, heading in headings:
        flush(start)
        path = [(lvl, h) for lvl, h in path if lvl < level]
        path.append((level, heading))
        cursor = end
    flush(len(lines))

    h1 = next((h for _, _, level, h in headings if level == 1), None)
    return ParsedDocument(h1 or fallback_title, "markdown", text, sections)


def html_to_markdown(html: str) -> tuple[str | None, str]:
    from bs4 import BeautifulSoup
    from markdownify import markdownify

    soup = BeautifulSoup(html, "html.parser")
    title = soup.title.get_text(" ", strip=True) if soup.title else None
    for tag in soup(["head", "script", "style", "noscript", "nav", "template", "svg"]):
        tag.decompose()
    root = soup.body or soup
    markdown = markdownify(str(root), heading_style="ATX", bullets="-")
    return title or None, markdown.strip()


def _parse_pdf(data: bytes, fallback_title: str) -> ParsedDocument:
    pages = PdfPages(data)
    sections = pages.sections(0, pages.count)
    if not sections:
        raise ValueError(NO_TEXT_LAYER if pages.count else "the PDF has no pages")
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
