"""The office formats as sections: ``.docx``, ``.pptx``, ``.xlsx``, ``.csv`` and ``.epub``.

Each is read with the format's own well-kept library (python-docx, python-pptx, openpyxl, the
standard library's ``csv``, EbookLib; rag_tools/kb/NOTES.md says why these and not markitdown)
into Markdown sections that keep the structure citations need:

- ``.docx``: headings (``Title``, ``Heading N`` styles) make heading paths; tables become Markdown
  tables, list paragraphs list items, pictures their text read by OCR (``Picture: ...``).
- ``.pptx``: one section per slide, located ``"slide N"``, under the slide's title; text frames,
  tables (also inside groups), pictures (by OCR) and speaker notes, in the slide's order.
- ``.xlsx`` and ``.csv``: one Markdown table per sheet (the first non-empty row is its header), with
  each body row's source row number, so that a chunk is located ``"Sheet1, rows 12-20"``.
- ``.epub``: the spine's XHTML documents, in reading order, read as HTML.

Containers are checked before parsing (``containers.check_container``) and sheets are bounded
while they stream, so a hostile file fails with one line instead of exhausting memory or time.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..extras import extra_imports
from . import ocr
from .containers import check_container
from .html import parse_html
from .parsed import DocumentFormat, ParsedDocument, Section, decode_text

__all__ = ["MAX_SHEET_CELLS", "MAX_SHEET_COLUMNS", "MAX_SHEET_ROWS", "markdown_table", "parse_office"]

MAX_SHEET_ROWS = 100_000
MAX_SHEET_COLUMNS = 1_000
MAX_SHEET_CELLS = 2_000_000
_NO_TEXT: dict[str, str] = {
    "docx": "no text found in the document (only pictures?)",
    "pptx": "no text found on any slide (only pictures?)",
    "xlsx": "no cells with values in any sheet",
    "csv": "the file has no rows",
    "epub": "no text found in the book (only pictures?)",
}
_HEADING_STYLE = re.compile(r"^heading ([1-9])$", re.IGNORECASE)
_SPACE = re.compile(r"\s+")


def parse_office(data: bytes, fmt: DocumentFormat, fallback_title: str) -> ParsedDocument:
    """Read an office file into sections; ``ValueError`` (one line) when it cannot or should not be."""
    if fmt != "csv":
        check_container(data, fmt)
    try:
        parsed = _PARSERS[fmt](data, fallback_title)
    except ValueError:
        raise
    except Exception as exc:  # the libraries raise many types on a broken file (KeyError, lxml, zip errors)
        raise ValueError(
            f"not a readable .{fmt} file ({type(exc).__name__}: {_one_line(str(exc))})"
        ) from None
    if not parsed.sections:
        raise ValueError(_NO_TEXT[fmt])
    return parsed


def markdown_table(rows: list[list[str]]) -> str:
    """``rows`` as a Markdown table, the first row as its header; short rows are padded."""
    width = max(len(row) for row in rows)
    cells = [[_table_cell(value) for value in row] + [""] * (width - len(row)) for row in rows]
    lines = ["| " + " | ".join(cells[0]) + " |", "|" + " --- |" * width]
    lines += ["| " + " | ".join(row) + " |" for row in cells[1:]]
    return "\n".join(lines)


def _table_cell(value: str) -> str:
    return _SPACE.sub(" ", value).strip().replace("|", "\\|")


def _one_line(text: str, limit: int = 200) -> str:
    line = _SPACE.sub(" ", text).strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _join_blocks(blocks: list[str]) -> str:
    """Blocks separated by a blank line, except consecutive list items (one list)."""
    out: list[str] = []
    for block in blocks:
        if out and block.startswith("- ") and out[-1].startswith("- "):
            out[-1] += "\n" + block
        else:
            out.append(block)
    return "\n\n".join(out)


class _Pictures:
    """OCR of the pictures of one office file, when the ``ocr`` extra is there (``ocr``)."""

    def __init__(self) -> None:
        self.enabled = ocr.ocr_available()
        self.read = 0
        self.skipped: list[str] = []
        self.low: list[str] = []

    def text(self, blob: bytes, where: str) -> str:
        """The picture's text as a block (``""`` when it has none or is not read)."""
        if not self.enabled:
            self.skipped.append(where)
            return ""
        if self.read >= ocr.MAX_PICTURES:
            self.skipped.append(where)
            return ""
        self.read += 1
        try:
            result = ocr.read_picture(blob)
        except ValueError as exc:
            self.skipped.append(f"{where} ({_one_line(str(exc), 80)})")
            return ""
        if result is None or not result.text.strip():
            return ""
        if result.confidence < ocr.MIN_CONFIDENCE:
            self.low.append(f"{where} ({result.confidence:.0f}%)")
        return f"Picture: {_one_line(result.text, limit=100_000)}"

    def warnings(self) -> list[str]:
        notes = []
        if self.low:
            notes.append(f"low OCR confidence (under {ocr.MIN_CONFIDENCE:.0f}%) on {', '.join(self.low)}")
        if self.skipped:
            reason = "" if self.enabled else f": {ocr.MISSING_OCR}"
            notes.append(f"pictures not read: {', '.join(self.skipped[:10])}{reason}")
        return notes

    def no_text(self, message: str) -> str:
        """The no-text failure, naming the missing extra when pictures were left unread for it."""
        return f"{message}: {ocr.MISSING_OCR}" if self.skipped and not self.enabled else message


def _parse_docx(data: bytes, fallback_title: str) -> ParsedDocument:
    with extra_imports("office"):
        from docx import Document
        from docx.table import Table

    document = Document(io.BytesIO(data))
    pictures = _Pictures()
    sections: list[Section] = []
    content: list[str] = []
    path: list[tuple[int, str]] = []
    blocks: list[str] = []
    first_title: str | None = None
    tables = 0  # tables met so far; a section's first table is the one after them
    first_table = 1

    def flush() -> None:
        nonlocal first_table
        text = _join_blocks(blocks).strip()
        if text:
            sections.append(Section(text, [heading for _, heading in path], first_table=first_table))
        blocks.clear()
        first_table = tables + 1

    for item in document.iter_inner_content():
        if isinstance(item, Table):
            rows = [[cell.text for cell in row.cells] for row in item.rows]
            rows = [row for row in rows if any(value.strip() for value in row)]
            if rows:
                tables += 1
                blocks.append(markdown_table(rows))
                content.append(blocks[-1])
            continue
        for rid in item._p.xpath(".//a:blip/@r:embed"):
            part = document.part.related_parts.get(rid)
            blob = getattr(part, "blob", None)
            if blob is not None and (picture := pictures.text(blob, f"picture {pictures.read + 1}")):
                blocks.append(picture)
                content.append(picture)
        text = _one_line(item.text, limit=100_000)
        if not text:
            continue
        style = item.style.name if item.style is not None else ""
        level = 0 if style == "Title" else _heading_level(style)
        if level is not None:
            flush()
            path = [(lvl, heading) for lvl, heading in path if lvl < level] + [(level, text)]
            content.append("#" * min(level + 1, 6) + " " + text)
            if level == 0 and first_title is None:
                first_title = text
            continue
        blocks.append(f"- {text}" if style.startswith("List") else text)
        content.append(blocks[-1])
    flush()
    title = first_title or (document.core_properties.title or "").strip() or fallback_title
    if not sections:
        raise ValueError(pictures.no_text(_NO_TEXT["docx"]))
    return ParsedDocument(title, "docx", _join_blocks(content), sections, pictures.warnings())


def _heading_level(style: str) -> int | None:
    match = _HEADING_STYLE.match(style)
    return int(match.group(1)) if match else None


def _parse_pptx(data: bytes, fallback_title: str) -> ParsedDocument:
    with extra_imports("office"):
        from pptx import Presentation

    deck = Presentation(io.BytesIO(data))
    pictures = _Pictures()
    sections: list[Section] = []
    content: list[str] = []
    for number, slide in enumerate(deck.slides, 1):
        title_shape = slide.shapes.title
        title = _one_line(title_shape.text_frame.text) if title_shape is not None else ""
        blocks: list[str] = []
        for shape in _shapes(slide.shapes):
            if title_shape is not None and shape.shape_id == title_shape.shape_id:
                continue
            if shape.has_text_frame:
                blocks += [f"- {line}" for p in shape.text_frame.paragraphs if (line := _one_line(p.text))]
            elif getattr(shape, "has_table", False) and shape.has_table:
                rows = [[cell.text for cell in row.cells] for row in shape.table.rows]
                if any(value.strip() for row in rows for value in row):
                    blocks.append(markdown_table(rows))
            elif (blob := _picture_blob(shape)) is not None and (
                picture := pictures.text(blob, f"a picture on slide {number}")
            ):
                blocks.append(picture)
        notes = slide.notes_slide.notes_text_frame if slide.has_notes_slide else None
        if notes is not None and (note := _one_line(notes.text, limit=100_000)):
            blocks.append(f"Notes: {note}")
        text = _join_blocks(blocks) or title
        if text:
            sections.append(Section(text, [title] if title else [], locator=f"slide {number}"))
            content.append(f"## Slide {number}" + (f": {title}" if title else "") + f"\n\n{text}")
    first = next((s.headings[0] for s in sections if s.headings), None)
    title = (deck.core_properties.title or "").strip() or first or fallback_title
    if not sections:
        raise ValueError(pictures.no_text(_NO_TEXT["pptx"]))
    return ParsedDocument(title, "pptx", "\n\n".join(content), sections, pictures.warnings())


def _picture_blob(shape: Any) -> bytes | None:
    """The image bytes of a picture shape (``None`` for other shapes and linked pictures)."""
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    try:
        return shape.image.blob if shape.shape_type == MSO_SHAPE_TYPE.PICTURE else None
    except (AttributeError, KeyError, ValueError, NotImplementedError):
        return None


def _shapes(shapes: Iterable[Any]) -> Iterator[Any]:
    """Every shape, those inside groups included, in the slide's order."""
    from pptx.shapes.group import GroupShape

    for shape in shapes:
        if isinstance(shape, GroupShape):
            yield from _shapes(shape.shapes)
        else:
            yield shape


def _parse_xlsx(data: bytes, fallback_title: str) -> ParsedDocument:
    with extra_imports("office"):
        from openpyxl import load_workbook

    workbook = load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        sections: list[Section] = []
        for sheet in workbook.worksheets:
            rows, columns = sheet.max_row, sheet.max_column
            if rows and columns and (rows > MAX_SHEET_ROWS or columns > MAX_SHEET_COLUMNS):
                raise ValueError(_too_big(sheet.title, f"spans {rows:,} rows and {columns:,} columns"))
            sheet.reset_dimensions()  # stream what the sheet holds, whatever its header claims
            section = _table_section(sheet.title, sheet.iter_rows(values_only=True), [sheet.title])
            if section is not None:
                sections.append(section)
        title = (workbook.properties.title or "").strip() or fallback_title
    finally:
        workbook.close()
    content = "\n\n".join(f"## {s.locator}\n\n{s.text}" for s in sections)
    return ParsedDocument(title, "xlsx", content, sections)


def _parse_csv(data: bytes, fallback_title: str) -> ParsedDocument:
    text = decode_text(data, "csv")
    try:
        dialect: Any = csv.Sniffer().sniff(text[:16_384], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    try:
        section = _table_section("", csv.reader(io.StringIO(text), dialect), [])
    except csv.Error as exc:
        raise ValueError(f"not a readable CSV file ({_one_line(str(exc))})") from None
    sections = [section] if section is not None else []
    return ParsedDocument(fallback_title, "csv", section.text if section else "", sections)


def _too_big(sheet: str, what: str) -> str:
    where = f"sheet {sheet!r}" if sheet else "the file"
    return (
        f"{where} {what}; at most {MAX_SHEET_ROWS:,} rows, {MAX_SHEET_COLUMNS:,} columns "
        f"and {MAX_SHEET_CELLS:,} cells with values are read"
    )


def _table_section(label: str, rows: Iterable[Iterable[Any]], headings: list[str]) -> Section | None:
    """A sheet's (or CSV file's) rows as one Markdown table section; ``None`` when it has no values.

    Empty rows are left out (their numbers are skipped), as are empty columns at either side. The
    limits are checked as the rows stream, so a sparse sheet (one cell at XFD1048576) fails fast.
    """
    kept: list[tuple[int, list[str]]] = []
    cells = 0
    first_column = MAX_SHEET_COLUMNS
    for number, row in enumerate(rows, 1):
        if number > MAX_SHEET_ROWS:
            raise ValueError(_too_big(label, f"has more than {MAX_SHEET_ROWS:,} rows"))
        values = list(row)
        if len(values) > MAX_SHEET_COLUMNS:
            if any(value is not None and value != "" for value in values[MAX_SHEET_COLUMNS:]):
                raise ValueError(
                    _too_big(label, f"has a value beyond column {MAX_SHEET_COLUMNS:,} in row {number:,}")
                )
            values = values[:MAX_SHEET_COLUMNS]
        texts = [_cell_text(value) for value in values]
        while texts and not texts[-1]:
            texts.pop()
        if not texts:
            continue
        used = sum(1 for text in texts if text)
        cells += used
        if cells > MAX_SHEET_CELLS:
            raise ValueError(_too_big(label, f"has more than {MAX_SHEET_CELLS:,} cells with values"))
        first_column = min(first_column, next(i for i, text in enumerate(texts) if text))
        kept.append((number, texts))
    if not kept:
        return None
    table = markdown_table([texts[first_column:] for _, texts in kept])
    return Section(table, headings, locator=label, rows=[number for number, _ in kept[1:]])


def _cell_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        return f"{value:.15g}"
    if isinstance(value, dt.datetime):
        return value.date().isoformat() if value.time() == dt.time() else value.isoformat(sep=" ")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    return str(value).strip()


def _parse_epub(data: bytes, fallback_title: str) -> ParsedDocument:
    import warnings

    with extra_imports("office"):
        import ebooklib
        from ebooklib import epub

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # EbookLib warns about its own option defaults
        book = epub.read_epub(io.BytesIO(data), options={"ignore_ncx": True})
    chapters = []
    for item_id, _linear in book.spine:
        item = book.get_item_with_id(item_id)
        if item is None or item.get_type() != ebooklib.ITEM_DOCUMENT or not item.is_chapter():
            continue
        chapter = parse_html(item.get_content().decode("utf-8", errors="replace"), fallback_title)
        if chapter.sections:
            chapters.append(chapter)
    titles = book.get_metadata("DC", "title")
    title = (str(titles[0][0]).strip() if titles else "") or (
        chapters[0].title if chapters else fallback_title
    )
    sections = [section for chapter in chapters for section in chapter.sections]
    return ParsedDocument(title, "epub", "\n\n".join(c.content for c in chapters), sections)


_PARSERS: dict[str, Callable[[bytes, str], ParsedDocument]] = {
    "docx": _parse_docx,
    "pptx": _parse_pptx,
    "xlsx": _parse_xlsx,
    "csv": _parse_csv,
    "epub": _parse_epub,
}
