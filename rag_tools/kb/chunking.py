"""Split parsed sections into size-bounded chunks without crossing a section boundary.

Splitting text inside a section is delegated to ``semantic-text-splitter``, which prefers the
largest semantic unit that fits (block, sentence, word) and never exceeds the capacity in
characters. Markdown tables are split here instead, between rows: a chunk never cuts a row (a row
longer than the capacity is a chunk of its own), and every chunk of a table starts with the
table's header row, so that a continuation still says what its columns are. A section without a
table is split exactly as before tables were handled.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

from semantic_text_splitter import MarkdownSplitter, TextSplitter

from ..extractive import table_cells
from .readers import MARKDOWN_FORMATS, ParsedDocument, Section

__all__ = [
    "MIN_SECTION_CHARS",
    "ChunkDraft",
    "chunk_document",
    "chunk_sections",
    "linearize_tables",
    "locate_rows",
]

_DELIMITER_ROW = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
_WORD = re.compile(r"\w")
_FENCE_LINE = re.compile(r"```[\w+-]*")
#: A section shorter than this (a heading's one-line introduction, a short API entry) is joined to
#: the section after it: alone it is a chunk that states little, whose vector is mostly its heading
#: path, and that outranks the passages under it (the Python manual: 11% of chunks were under 200
#: characters; bench/RESULTS.md, "Real manuals").
MIN_SECTION_CHARS = 200


@dataclass
class ChunkDraft:
    """A chunk before it is embedded: its text and where it sits in the document."""

    text: str
    position: int
    section: int
    headings: list[str] = field(default_factory=list)
    page: int | None = None
    locator: str = ""


@dataclass
class _Piece:
    text: str
    rows: tuple[int, int] | None = None  # first and last body row (0-based) of the section's tables
    tables: tuple[int, int] | None = None  # first and last of the section's tables (0-based) it holds


@lru_cache(maxsize=16)
def _splitter(markdown: bool, capacity: int) -> TextSplitter | MarkdownSplitter:
    return MarkdownSplitter(capacity) if markdown else TextSplitter(capacity)


def chunk_document(doc: ParsedDocument, *, max_chars: int) -> list[ChunkDraft]:
    """Chunks of at most ``max_chars`` characters (a longer table row alone), in document order."""
    return chunk_sections(doc.sections, markdown=doc.format in MARKDOWN_FORMATS, max_chars=max_chars)


def chunk_sections(
    sections: Sequence[Section], *, markdown: bool, max_chars: int, position: int = 0, section: int = 0
) -> list[ChunkDraft]:
    """Chunks of ``sections``, numbered from ``position`` and ``section`` (to continue a document)."""
    splitter = _splitter(markdown, max_chars)
    drafts: list[ChunkDraft] = []
    for section_index, part in _joined(sections, section):
        blocks = _blocks(part.text) if markdown and "|" in part.text else [(False, part.text)]
        if len(blocks) == 1 and not blocks[0][0]:
            pieces = [
                _Piece(piece)
                for piece in _balanced(splitter.chunks(part.text), part.text, markdown, max_chars)
            ]
        else:
            pieces = _merge(_pieces(blocks, splitter, max_chars), max_chars)
        if markdown:
            pieces = _fenced(pieces)
        for piece in pieces:
            if _WORD.search(piece.text):  # not a lone code fence or rule a split left over
                locator = _locate(part, piece)
                drafts.append(
                    ChunkDraft(
                        piece.text,
                        position + len(drafts),
                        section_index,
                        list(part.headings),
                        part.page,
                        locator,
                    )
                )
    return drafts


def _joined(sections: Sequence[Section], first: int) -> Iterator[tuple[int, Section]]:
    """``sections`` numbered from ``first``, each one under ``MIN_SECTION_CHARS`` put in front of the
    next one of the same place (only prose sections without a page, rows or tables are joined, so a
    citation's page or rows stay exact). A joined section that is not the next one's parent keeps
    its heading as its first line."""
    carry: Section | None = None
    for index, part in enumerate(sections, first):
        if carry is not None and _joinable(part) and part.locator == carry.locator:
            own = carry.headings[-1:] if carry.headings != part.headings[: len(carry.headings)] else []
            part = replace(part, text="\n\n".join([*own, carry.text.strip(), part.text]))
        elif carry is not None:
            yield index - 1, carry
        carry = None
        if _joinable(part) and len(part.text.strip()) < MIN_SECTION_CHARS:
            carry = part
        else:
            yield index, part
    if carry is not None:
        yield first + len(sections) - 1, carry


def _balanced(pieces: list[str], text: str, markdown: bool, max_chars: int) -> list[str]:
    """``pieces`` of ``text``, split again into pieces of even size when the last one is a tail
    under ``MIN_SECTION_CHARS`` (a 1,233-character section cut at 1,200 left a 36-character chunk)."""
    if len(pieces) < 2 or len(pieces[-1]) >= MIN_SECTION_CHARS:
        return pieces
    capacity = min(max_chars, -(-len(text) // len(pieces)) + MIN_SECTION_CHARS // 2)
    even = _splitter(markdown, capacity).chunks(text)
    return even if min(map(len, even)) > len(pieces[-1]) else pieces


def _fenced(pieces: list[_Piece]) -> list[_Piece]:
    """``pieces`` each whole Markdown: a code block a split cut in two is closed at the end of one
    piece and opened again (with its language) at the start of the next, so that no chunk starts
    inside code, which a card would show as prose and an answer would quote."""
    opening: str | None = None  # the fence line of a block a piece left open
    fenced = []
    for piece in pieces:
        lines = piece.text.split("\n")
        if opening is not None:
            if lines and _FENCE_LINE.fullmatch(lines[0].strip()):
                lines = lines[1:]  # the block's own closing fence: the previous piece closed it
                opening = None
            else:
                lines = [opening, *lines]
        opening = None
        for line in lines:
            if _FENCE_LINE.match(line.strip()):
                opening = None if opening is not None else line.strip()
        if opening is not None:
            lines.append(opening[:3])
        fenced.append(replace(piece, text="\n".join(lines)))
    return fenced


def _joinable(section: Section) -> bool:
    return section.page is None and section.rows is None and section.first_table is None


def linearize_tables(text: str) -> str:
    """``text`` with each Markdown table row written as its cells under their column headers
    (``Name: bigint, Storage Size: 8 bytes, ...``), the header and delimiter rows dropped: what is
    embedded and full-text indexed, so that a question naming a row's value and a column ("bigint
    storage size") meets both in one line. The stored text keeps the table."""
    if "|" not in text:
        return text
    lines = text.split("\n")
    out: list[str] = []
    header: list[str] | None = None
    for n, line in enumerate(lines):
        if not line.lstrip().startswith("|"):
            header = None
            out.append(line)
        elif n + 1 < len(lines) and _DELIMITER_ROW.match(lines[n + 1]):
            header = table_cells(line)
        elif not _DELIMITER_ROW.match(line):
            cells = table_cells(line)
            if header is not None and len(cells) == len(header):
                out.append(
                    ", ".join(f"{h}: {c}" if h else c for h, c in zip(header, cells, strict=True) if c)
                )
            else:
                out.append(", ".join(c for c in cells if c))
    return "\n".join(out)


def _locate(section: Section, piece: _Piece) -> str:
    if piece.rows is not None and section.rows:
        return locate_rows(section, piece.rows)
    if piece.tables is not None and section.first_table is not None:
        first, last = (section.first_table + t for t in piece.tables)
        return f"table {first}" if first == last else f"tables {first}-{last}"
    return section.locator


def locate_rows(section: Section, rows: tuple[int, int]) -> str:
    """The locator of a chunk holding body rows ``rows`` of ``section``'s table: ``"Sheet1, rows 12-20"``."""
    assert section.rows is not None
    first, last = section.rows[rows[0]], section.rows[min(rows[1], len(section.rows) - 1)]
    span = f"row {first}" if first == last else f"rows {first}-{last}"
    return f"{section.locator}, {span}" if section.locator else span


def _blocks(text: str) -> list[tuple[bool, str]]:
    """``text`` cut into runs of prose and Markdown tables: ``(is_table, text)`` in order."""
    lines = text.split("\n")
    blocks: list[tuple[bool, str]] = []
    prose: list[str] = []
    i = 0
    while i < len(lines):
        if lines[i].lstrip().startswith("|") and i + 1 < len(lines) and _DELIMITER_ROW.match(lines[i + 1]):
            end = i + 2
            while end < len(lines) and lines[end].lstrip().startswith("|"):
                end += 1
            if "\n".join(prose).strip():
                blocks.append((False, "\n".join(prose)))
            prose = []
            blocks.append((True, "\n".join(lines[i:end])))
            i = end
        else:
            prose.append(lines[i])
            i += 1
    if "\n".join(prose).strip() or not blocks:
        blocks.append((False, "\n".join(prose)))
    return blocks


def _pieces(
    blocks: list[tuple[bool, str]], splitter: TextSplitter | MarkdownSplitter, max_chars: int
) -> list[_Piece]:
    """Prose split by the splitter; tables split between rows, each piece under the header row.

    Body rows are numbered across the section's tables in order (a sheet's section is one table).
    """
    pieces: list[_Piece] = []
    row_base = table = 0
    for is_table, text in blocks:
        if not is_table:
            pieces += [_Piece(piece) for piece in splitter.chunks(text)]
            continue
        lines = text.split("\n")
        header, body = "\n".join(lines[:2]), lines[2:]
        start = 0
        while start < len(body):
            size, end = len(header), start
            while end < len(body) and (end == start or size + 1 + len(body[end]) <= max_chars):
                size += 1 + len(body[end])
                end += 1
            rows = (row_base + start, row_base + end - 1)
            pieces.append(_Piece("\n".join([header, *body[start:end]]), rows, (table, table)))
            start = end
        if not body:
            pieces.append(_Piece(header, None, (table, table)))
        row_base += len(body)
        table += 1
    return pieces


def _merge(pieces: list[_Piece], max_chars: int) -> list[_Piece]:
    """Consecutive pieces joined while they fit in ``max_chars`` (a short table beside its prose)."""
    merged: list[_Piece] = []
    for piece in pieces:
        if not piece.text.strip():
            continue
        last = merged[-1] if merged else None
        if last is not None and len(last.text) + 2 + len(piece.text) <= max_chars:
            merged[-1] = _Piece(
                f"{last.text}\n\n{piece.text}", _span(last.rows, piece.rows), _span(last.tables, piece.tables)
            )
        else:
            merged.append(piece)
    return merged


def _span(a: tuple[int, int] | None, b: tuple[int, int] | None) -> tuple[int, int] | None:
    if a is None or b is None:
        return a or b
    return (min(a[0], b[0]), max(a[1], b[1]))
