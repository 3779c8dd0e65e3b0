"""A source as ingestion sees it (``ParsedDocument`` of ``Section``s), and the text readers every
format shares: decoding text safely, Markdown into sections (HTML: ``html``, on top of this).

It sits below ``readers`` (the dispatch by format, and PDF) and ``office`` (the office formats),
which both build on it: ``readers`` hands the office formats to ``office``, which never needs
``readers`` back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "BinaryContentError",
    "DocumentFormat",
    "ParsedDocument",
    "Section",
    "UnsupportedFormatError",
    "decode_text",
    "parse_markdown",
]

DocumentFormat = Literal[
    "text", "markdown", "html", "pdf", "docx", "pptx", "xlsx", "csv", "epub", "png", "jpeg", "tiff"
]

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
    warnings: list[str] = field(default_factory=list)
    """What was read only in part (low OCR confidence, pictures not read), reported with the outcome."""


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
        kind = "text" if fmt == "text" else f"{fmt} text"  # not "text text"
        raise BinaryContentError(f"this is a binary file (it contains NUL bytes), not {kind}")
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
    """Markdown split into sections by heading path; the first level-1 heading is the title."""
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
