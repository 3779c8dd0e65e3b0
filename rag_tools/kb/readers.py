"""Turn a source (text, Markdown, HTML, PDF, office formats, images) into a title and sections.

A section is the unit the chunker never crosses: the text under one heading, one PDF page, one
slide or one sheet. HTML pages are read by ``html`` (main content, heading paths, tables); PDF
text comes from ``pypdf`` page by page so that page numbers reach the chunks, and a page without
a text layer is read by OCR (``ocr``), as are PNG, JPEG and TIFF files. The office formats
(``.docx``, ``.pptx``, ``.xlsx``, ``.csv``, ``.epub``) are read by ``office``.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import ocr
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
    "IMAGE_FORMATS",
    "MARKDOWN_FORMATS",
    "MAX_OCR_PAGES",
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
    "open_pdfium",
    "parse_document",
    "parse_markdown",
    "pdf_content",
    "render_page",
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
    ".png": "png",
    ".jpg": "jpeg",
    ".jpeg": "jpeg",
    ".tif": "tiff",
    ".tiff": "tiff",
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
    "png": "image/png",
    "jpeg": "image/jpeg",
    "tiff": "image/tiff",
}

#: The formats read by OCR as a whole.
IMAGE_FORMATS: frozenset[DocumentFormat] = frozenset({"png", "jpeg", "tiff"})
#: Pages of one file (PDF pages without a text layer, TIFF pages) OCR reads at most: a 500-page
#: scan is read, page by page in bounded memory; beyond this the file fails in one line.
MAX_OCR_PAGES = int(os.environ.get("RAGSTREAM_OCR_MAX_PAGES", "1000"))

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
    if fmt in IMAGE_FORMATS:
        return _parse_image(data, fmt, fallback_title)
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
    try:
        sections = pages.sections(0, pages.count)
    finally:
        pages.close()
    pages.require_text(sections)
    title = pages.title(sections, fallback_title)
    return ParsedDocument(title, "pdf", pdf_content(sections), sections, pages.warnings())


def _parse_image(data: bytes, fmt: DocumentFormat, fallback_title: str) -> ParsedDocument:
    """A picture (each page of a TIFF) read by OCR; a page is ``page N`` for its citation."""
    if not ocr.ocr_available():
        raise ValueError(ocr.MISSING_OCR)
    image = ocr.open_image(data)
    frames = getattr(image, "n_frames", 1)
    if frames > MAX_OCR_PAGES:
        raise ValueError(f"the image has {frames} pages, over the limit of {MAX_OCR_PAGES} for OCR")
    read = [(number, ocr.read_image(frame)) for number, frame in enumerate(ocr.image_frames(image), 1)]
    sections = [
        Section(result.text, [], number, _ocr_locator(number if frames > 1 else None, result.confidence))
        for number, result in read
        if result.text.strip()
    ]
    if not sections:
        raise ValueError("no text found in the image, even by OCR")
    low = [(number, result.confidence) for number, result in read if result.text.strip()]
    warnings = _low_confidence(low)
    return ParsedDocument(fallback_title, fmt, pdf_content(sections), sections, warnings)


def _ocr_locator(page: int | None, confidence: float) -> str:
    """Where an OCR'd passage is and how sure the OCR was: ``page 3, OCR 94%``."""
    return f"page {page}, OCR {confidence:.0f}%" if page is not None else f"OCR {confidence:.0f}%"


def _low_confidence(pages: list[tuple[int, float]]) -> list[str]:
    low = [f"{page} ({confidence:.0f}%)" for page, confidence in pages if confidence < ocr.MIN_CONFIDENCE]
    if not low:
        return []
    return [f"low OCR confidence (under {ocr.MIN_CONFIDENCE:.0f}%) on page {', '.join(low)}: check the scan"]


class PdfPages:
    """A PDF read page by page, so that ingestion can embed the first pages while later ones parse.

    A page without a text layer is rendered (pypdfium2) and read by OCR, the pages of a step in
    parallel tesseract processes; without the ``ocr`` extra such pages are left out and named
    in ``warnings``.
    """

    def __init__(self, data: bytes) -> None:
        from pypdf import PdfReader

        self._data = data
        self._pdfium: Any = None
        self._ocr = ocr.ocr_available()
        self._ocr_pages: list[tuple[int, float]] = []  # (page number, confidence)
        self._unread: list[int] = []  # pages with no text layer that OCR could not read here
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
        locators = [f"page {start + k + 1}" for k in range(len(texts))]
        scanned = [k for k, text in enumerate(texts) if not text.strip()]
        if scanned and not self._ocr:
            self._unread += [start + k + 1 for k in scanned]
        elif scanned:
            if len(self._ocr_pages) + len(scanned) > MAX_OCR_PAGES:
                raise ValueError(
                    f"more than {MAX_OCR_PAGES} pages without a text layer to read by OCR (the limit)"
                )
            with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
                results = list(pool.map(self._read_scanned, [start + k for k in scanned]))
            for k, result in zip(scanned, results, strict=True):
                texts[k] = result.text
                locators[k] = _ocr_locator(start + k + 1, result.confidence)
                self._ocr_pages.append((start + k + 1, result.confidence))
        return [
            Section(text.strip(), [], start + k + 1, locators[k])
            for k, text in enumerate(texts)
            if text.strip()
        ]

    def _read_scanned(self, index: int) -> ocr.OcrText:
        """Page ``index`` (0-based) rendered and read by OCR."""
        return ocr.read_image(render_page(self._document(), index, ocr.OCR_DPI))

    def _document(self) -> Any:
        with ocr.PDFIUM_LOCK:  # two reading threads open it once
            if self._pdfium is None:
                self._pdfium = open_pdfium(self._data)
            return self._pdfium

    def close(self) -> None:
        """Free the rendering document, if a scanned page opened one (under ``ocr.PDFIUM_LOCK``:
        left to the garbage collector, pdfium would be called from whichever thread runs it)."""
        if self._pdfium is not None:
            with ocr.PDFIUM_LOCK:
                self._pdfium.close()
            self._pdfium = None

    def warnings(self) -> list[str]:
        """Pages read with low OCR confidence, and scanned pages left unread (no ``ocr`` extra)."""
        notes = _low_confidence(self._ocr_pages)
        if self._unread:
            pages = ", ".join(map(str, self._unread))
            notes.append(f"page {pages} without a text layer not read: {ocr.MISSING_OCR}")
        return notes

    def require_text(self, sections: list[Section]) -> None:
        """Fail with the one-line reason when ``sections``, all the pages', hold no text: nothing to
        index is a failure, not an empty success."""
        if sections:
            return
        if not self.count:
            raise ValueError("the PDF has no pages")
        if self._unread:
            raise ValueError(f"{NO_TEXT_LAYER}: {ocr.MISSING_OCR}")
        raise ValueError(f"{NO_TEXT_LAYER}: OCR found no text on any page" if self._ocr else NO_TEXT_LAYER)

    def title(self, sections: list[Section], fallback: str) -> str:
        """The metadata title, else the first line of the first page with text, else ``fallback``."""
        first_line = next((s.text.splitlines()[0].strip() for s in sections), None)
        return self.metadata_title or first_line or fallback


def pdf_content(sections: list[Section]) -> str:
    """A PDF's stored text: its pages with text, each under a ``[page N]`` marker."""
    return "\n\n".join(f"[page {s.page}]\n{s.text}" for s in sections)


def open_pdfium(data: bytes) -> Any:
    """A ``pypdfium2.PdfDocument`` of ``data`` (the ``ocr`` extra); ``ValueError`` when unreadable."""
    try:
        import pypdfium2
    except ImportError as exc:
        raise ValueError(ocr.MISSING_OCR) from exc
    try:
        with ocr.PDFIUM_LOCK:
            return pypdfium2.PdfDocument(data)
    except pypdfium2.PdfiumError as exc:
        raise ValueError(f"not a readable PDF: {exc}") from exc


def render_page(pdf: Any, index: int, dpi: float) -> Any:
    """Page ``index`` of a ``pypdfium2.PdfDocument`` as an image (``ocr.render_pdf_page``)."""
    return ocr.render_pdf_page(pdf, index, dpi)


@contextmanager
def _pdf_errors() -> Iterator[None]:
    from pypdf.errors import PdfReadError

    try:
        yield
    except (PdfReadError, ValueError, KeyError) as exc:
        raise ValueError(f"not a readable PDF: {exc}") from exc
