"""A cited page as a picture, with the cited passage's region marked: what a citation card shows.

A PDF page is rendered with pypdfium2 (the ``ocr`` extra); its words and their boxes come from the
page's text layer, or from OCR when it has none (a scanned page), as for an image document. The
passage's words are found among the page's words (longest common runs, ``difflib``), and each
line they cover is marked: a translucent band over the words, so the text stays readable.
"""

from __future__ import annotations

import difflib
import io
import itertools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..extras import extra_imports
from . import ocr
from .models import DocumentFile
from .readers import open_pdfium

if TYPE_CHECKING:  # Pillow comes with the ocr extra, imported when a page is drawn
    from PIL import Image

__all__ = ["PAGE_DPI", "PageImage", "PageNotFound", "page_image"]

#: The resolution a page is shown at (and OCR'd at, for a scanned page: 0% CER at 150 dpi).
PAGE_DPI = 150
_MAX_WIDTH = 1400  # an image document is scaled down to this for a card
_WORD = re.compile(r"\w[\w'’.-]*\w|\w", re.UNICODE)
_MARK_WORDS = 400  # words of the passage looked for (a passage is at most a chunk)
_MIN_RUN = 2  # a run of fewer matching words is chance, unless the passage is that short
_FILL = (255, 213, 0, 90)
_EDGE = (230, 140, 0, 255)


class PageNotFound(LookupError):
    """The document has no such page, or is not a format with pages to show."""


@dataclass(frozen=True)
class PageImage:
    """A PNG of the page and the marked region (left, top, right, bottom in its pixels; ``None``
    when the passage was not found on the page or none was given)."""

    png: bytes
    region: tuple[int, int, int, int] | None


def page_image(original: DocumentFile, page: int, mark: str | None) -> PageImage:
    """Page ``page`` (from 1) of a PDF or image document as a PNG, with ``mark`` found and marked.

    Raises ``PageNotFound`` for a page that does not exist or a format without pages,
    ``ValueError`` (one line) when the file cannot be read or rendered, and ``MissingExtra``
    without the ``ocr`` extra.
    """
    with extra_imports("ocr"):
        import pypdfium2  # noqa: F401  (rendering needs it; checked before any work)
        from PIL import Image  # noqa: F401
    if original.media_type == "application/pdf":
        image, words = _pdf_page(original.data, page)
    elif original.media_type.startswith("image/"):
        image, words = _image_page(original.data, page)
    else:
        raise PageNotFound(f"a {original.media_type} document has no pages to show")
    region = _mark(image, words, mark) if mark else None
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, "PNG", optimize=False)
    return PageImage(buffer.getvalue(), region)


def _pdf_page(data: bytes, page: int) -> tuple[Image.Image, list[ocr.Word]]:
    with ocr.PDFIUM_LOCK:
        pdf = open_pdfium(data)
        try:
            if not 1 <= page <= len(pdf):
                raise PageNotFound(f"the document has {len(pdf)} pages, not a page {page}")
            image = ocr.render_pdf_page(pdf, page - 1, PAGE_DPI)
            words = _text_layer_words(pdf, page - 1, image)
        finally:
            pdf.close()
    if not words and ocr.ocr_available():
        words = ocr.words_of_image(image)
    return image, words


def _text_layer_words(pdf: Any, index: int, image: Image.Image) -> list[ocr.Word]:
    """The words of a page's text layer, their boxes in ``image``'s pixels."""
    page = pdf[index]
    try:
        width, height = page.get_size()
        sx, sy = image.width / width, image.height / height
        text_page = page.get_textpage()
        try:
            count = text_page.count_chars()
            text = text_page.get_text_range(0, count) if count else ""
            words = []
            if len(text) != count:  # generated characters shift the indices: no reliable boxes
                return []
            for match in _WORD.finditer(text):
                left, bottom, _, top = text_page.get_charbox(match.start())
                _, bottom2, right, top2 = text_page.get_charbox(match.end() - 1)
                box = (
                    int(left * sx),
                    int((height - max(top, top2)) * sy),
                    int(right * sx),
                    int((height - min(bottom, bottom2)) * sy),
                )
                words.append(ocr.Word(match.group(), box))
            return words
        finally:
            text_page.close()
    finally:
        page.close()


def _image_page(data: bytes, page: int) -> tuple[Image.Image, list[ocr.Word]]:
    image = ocr.open_image(data)
    frames = getattr(image, "n_frames", 1)
    if not 1 <= page <= frames:
        raise PageNotFound(f"the image has {frames} page{'s' if frames > 1 else ''}, not a page {page}")
    frame = next(itertools.islice(ocr.image_frames(image), page - 1, None)).convert("RGB")
    if frame.width > _MAX_WIDTH:
        frame = frame.resize((_MAX_WIDTH, round(frame.height * _MAX_WIDTH / frame.width)))
    return frame, ocr.words_of_image(frame) if ocr.ocr_available() else []


def _norm(word: str) -> str:
    return word.lower().strip(".,;:!?()[]{}\"'’-")


def _mark(image: Image.Image, words: list[ocr.Word], mark: str) -> tuple[int, int, int, int] | None:
    """Mark the lines of ``words`` that spell ``mark``; the region marked, or ``None``."""
    wanted = [_norm(w) for w in _WORD.findall(mark)][:_MARK_WORDS]
    have = [_norm(w.text) for w in words]
    if not wanted or not have:
        return None
    matcher = difflib.SequenceMatcher(None, have, wanted, autojunk=False)
    least = min(_MIN_RUN, len(wanted))
    hits = sorted(
        i
        for block in matcher.get_matching_blocks()
        if block.size >= least
        for i in range(block.a, block.a + block.size)
    )
    if not hits:
        return None
    first, last = hits[0], hits[-1]  # the passage's extent: the words in between are its own
    lines: list[list[int]] = []
    for word in words[first : last + 1]:
        left, top, right, bottom = word.box
        line = lines[-1] if lines else None
        if line is not None and top < line[3] and bottom > line[1]:  # overlaps the line vertically
            line[0], line[1] = min(line[0], left), min(line[1], top)
            line[2], line[3] = max(line[2], right), max(line[3], bottom)
        else:
            lines.append([left, top, right, bottom])
    from PIL import Image, ImageDraw

    overlay = Image.new("RGBA", image.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(overlay)
    pad = max(2, image.width // 400)
    for left, top, right, bottom in lines:
        draw.rectangle((left - pad, top - pad, right + pad, bottom + pad), fill=_FILL)
    x0 = min(line[0] for line in lines) - 3 * pad
    y0 = min(line[1] for line in lines) - 3 * pad
    x1 = max(line[2] for line in lines) + 3 * pad
    y1 = max(line[3] for line in lines) + 3 * pad
    draw.rectangle((x0, y0, x1, y1), outline=_EDGE, width=pad)
    image.paste(Image.alpha_composite(image.convert("RGBA"), overlay).convert("RGB"))
    return (max(0, x0), max(0, y0), min(image.width, x1), min(image.height, y1))
