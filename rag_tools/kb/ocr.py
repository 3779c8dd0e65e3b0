"""OCR of scanned PDF pages and pictures: Debian's tesseract-ocr 5 through pytesseract (the ``ocr`` extra).

Chosen over rapidocr-onnxruntime by measurement on generated scans of known text (``bench/ocr.py``,
bench/RESULTS.md): tesseract read them with a lower character error rate and 3-4x faster. Every
image is checked before it is decoded (``open_image``): an image bomb (more than ``MAX_PIXELS``
pixels declared), a corrupt file and an unknown format fail in one line, and a PDF page is rendered
(pypdfium2) at ``OCR_DPI`` or less, so that no page costs more than ``MAX_PIXELS`` pixels of work.
"""

from __future__ import annotations

import io
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..extras import MissingExtra, extra_imports

if TYPE_CHECKING:  # Pillow comes with the ocr extra; it is imported when an image is opened
    from PIL import Image

__all__ = [
    "MAX_PICTURES",
    "MAX_PIXELS",
    "MIN_CONFIDENCE",
    "MISSING_OCR",
    "OCR_DPI",
    "PDFIUM_LOCK",
    "OcrText",
    "Word",
    "image_frames",
    "ocr_available",
    "open_image",
    "read_image",
    "read_picture",
    "render_pdf_page",
    "words_of_image",
]

MISSING_OCR = f"{MissingExtra('ocr')}, with Debian's tesseract-ocr and tesseract-ocr-eng"
#: Pixels one image (or one rendered page) may have: an A4 page at 600 dpi is 35 million.
MAX_PIXELS = 40_000_000
#: Frames of a multi-page TIFF read at most.
MAX_FRAMES = 1000
#: The resolution scanned PDF pages are rendered at for OCR (measured: 0% CER at 150-300 dpi).
OCR_DPI = 200
#: A page whose mean word confidence (0-100) is below this is reported with the file's outcome.
MIN_CONFIDENCE = 70.0
#: Pictures inside office files smaller than this many pixels on a side (icons, bullets) are not read.
MIN_PICTURE_SIDE = 48
#: Pictures of one office file OCR reads at most (the rest are named in the outcome's warnings).
MAX_PICTURES = 200
#: Seconds tesseract may spend on one page before the page fails.
PAGE_TIMEOUT_SECONDS = 120
#: Held around every pdfium call: pdfium is not thread-safe, not even across documents (pypdfium2's
#: documentation), and two renders at once (a page picture while a scan is read) crashed the process.
#: Tesseract runs outside it, so scanned pages are still read in parallel.
PDFIUM_LOCK = threading.RLock()
_LANG = os.environ.get("RAGSTREAM_OCR_LANG", "eng")
_PDF_POINTS_PER_INCH = 72
_HYPHENATED = re.compile(r"(\w)- ([a-z])")  # a word broken at a line end, joined again


@dataclass(frozen=True)
class Word:
    """A word on a page and its box, in pixels of the image it was read from."""

    text: str
    box: tuple[int, int, int, int]  # left, top, right, bottom


@dataclass
class OcrText:
    """The text OCR read on one image, its mean word confidence (0-100) and its words' boxes."""

    text: str
    confidence: float
    words: list[Word] = field(default_factory=list)


def ocr_available() -> bool:
    """Whether OCR can run here: pytesseract imports and the tesseract program is installed."""
    try:
        import pytesseract

        pytesseract.get_tesseract_version()
    except Exception:
        return False
    return True


def open_image(data: bytes) -> Image.Image:
    """The image in ``data``, its size checked before any pixel is decoded."""
    with extra_imports("ocr"):
        from PIL import Image, UnidentifiedImageError
    Image.MAX_IMAGE_PIXELS = None  # our own check (``_check_size``) runs first and names the limit
    try:
        image = Image.open(io.BytesIO(data))
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise ValueError(f"not a readable image: {exc}") from exc
    _check_size(image.width, image.height)
    return image


def image_frames(image: Image.Image) -> Iterator[Image.Image]:
    """Each frame (page) of ``image``, decoded one at a time; a corrupt frame fails in one line."""
    frames = getattr(image, "n_frames", 1)
    if frames > MAX_FRAMES:
        raise ValueError(f"the image has {frames} pages, over the limit of {MAX_FRAMES}")
    for index in range(frames):
        try:
            image.seek(index)
            _check_size(image.width, image.height)
            frame = image.copy()
            frame.load()
        except (OSError, ValueError, SyntaxError) as exc:
            raise ValueError(f"not a readable image (page {index + 1}): {exc}") from exc
        yield frame


def _check_size(width: int, height: int) -> None:
    if width * height > MAX_PIXELS:
        raise ValueError(
            f"image too large: {width}x{height} pixels, over the limit of {MAX_PIXELS:,} (an image bomb?)"
        )


def render_pdf_page(pdf: Any, index: int, dpi: float) -> Image.Image:
    """Page ``index`` (0-based) of a ``pypdfium2.PdfDocument`` as an RGB image at ``dpi`` or less,
    so that it has at most ``MAX_PIXELS`` pixels."""
    with PDFIUM_LOCK:
        page = pdf[index]
        try:
            width, height = page.get_size()  # points
            scale = dpi / _PDF_POINTS_PER_INCH
            area = width * height * scale * scale
            if area > MAX_PIXELS:
                scale *= (MAX_PIXELS / area) ** 0.5
            bitmap = page.render(scale=scale)
            try:
                return bitmap.to_pil().convert("RGB")  # a copy: the bitmap is freed here, locked
            finally:
                bitmap.close()
        finally:
            page.close()


def read_image(image: Image.Image) -> OcrText:
    """The text tesseract reads on ``image``: paragraphs in reading order, a paragraph's lines joined."""
    words, lines = _tesseract_words(image)
    confidences = [(conf, len(word.text)) for word, conf in words]
    weight = sum(n for _, n in confidences)
    confidence = sum(c * n for c, n in confidences) / weight if weight else 0.0
    return OcrText(lines, confidence, [word for word, _ in words])


def read_picture(data: bytes) -> OcrText | None:
    """The text of a picture inside a document (its first frame); ``None`` for an icon-sized
    picture. An unreadable or oversized picture is a ``ValueError`` the caller reports."""
    image = open_image(data)
    if min(image.width, image.height) < MIN_PICTURE_SIDE:
        return None
    return read_image(next(image_frames(image)))


def words_of_image(image: Image.Image) -> list[Word]:
    """The words tesseract finds on ``image`` with their boxes (to mark a passage on a page)."""
    return [word for word, _ in _tesseract_words(image)[0]]


def _tesseract_words(image: Image.Image) -> tuple[list[tuple[Word, float]], str]:
    try:
        import pytesseract
    except ImportError as exc:
        raise ValueError(MISSING_OCR) from exc
    # one thread per tesseract process: measured twice as fast on a busy 2-core machine, and the
    # pages of a PDF are read in parallel processes instead (``readers.PdfPages``)
    os.environ.setdefault("OMP_THREAD_LIMIT", "1")
    try:
        data = pytesseract.image_to_data(
            image.convert("L"),
            lang=_LANG,
            output_type=pytesseract.Output.DICT,
            timeout=PAGE_TIMEOUT_SECONDS,
            config="--psm 3",
        )
    except pytesseract.TesseractNotFoundError as exc:
        raise ValueError(MISSING_OCR) from exc
    except RuntimeError as exc:  # pytesseract's timeout
        raise ValueError(f"OCR gave up on a page after {PAGE_TIMEOUT_SECONDS} s: {exc}") from exc
    words: list[tuple[Word, float]] = []
    paragraphs: dict[tuple[int, int], dict[int, list[str]]] = {}
    for i, text in enumerate(data["text"]):
        text = text.strip()
        confidence = float(data["conf"][i])
        if not text or confidence < 0:
            continue
        left, top = data["left"][i], data["top"][i]
        box = (left, top, left + data["width"][i], top + data["height"][i])
        words.append((Word(text, box), confidence))
        paragraph = (data["block_num"][i], data["par_num"][i])
        paragraphs.setdefault(paragraph, {}).setdefault(data["line_num"][i], []).append(text)
    text = "\n\n".join(
        _HYPHENATED.sub(r"\1\2", " ".join(" ".join(line) for line in par.values()))
        for par in paragraphs.values()
    )
    return words, text
