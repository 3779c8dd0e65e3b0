"""Generated scans of known text: a page of text rendered as a photo of paper would be.

The text is drawn with a real font at a scanner's resolution, then degraded as scans are: a small
rotation, grey paper with speckle noise, a blur and JPEG compression. Because the text is known,
the character error rate of an OCR engine on it can be computed (``cer``). Used by the OCR tests
(``tests/test_ocr.py``) and the OCR bench (``bench/ocr.py``).
"""

from __future__ import annotations

import io
import random
import textwrap
from pathlib import Path

from PIL import Image, ImageDraw, ImageFilter, ImageFont

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf"
SANS = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"

PARAGRAPHS = [
    "The replication slot keeps write-ahead log segments until every standby has confirmed them. "
    "A standby that stays disconnected for a long time therefore fills the primary's disk.",
    "Quarterly budget review: travel spending fell by twelve percent while cloud storage costs "
    "rose by eight percent, mostly from archived backups kept longer than the retention policy.",
    "To rotate a certificate, upload the new key pair, wait until every node reports the new "
    "fingerprint, then revoke the old certificate. Never revoke before the rollout finishes.",
    "The warehouse in Rotterdam receives pallets on Mondays and Thursdays; deliveries outside "
    "those days are held at the gate and charged a handling fee of forty euros per pallet.",
    "Incident 2291: the queue workers stopped consuming after a configuration push removed the "
    "broker's address. Rolling back the push restored service within nineteen minutes.",
]


def page_text(seed: int, paragraphs: int = 3) -> str:
    """A page's worth of known prose (whole paragraphs, in a seeded order)."""
    rng = random.Random(seed)
    return "\n\n".join(rng.sample(PARAGRAPHS, paragraphs))


def render_page(
    text: str,
    *,
    dpi: int = 200,
    skew: float = 0.6,
    noise: float = 0.04,
    jpeg_quality: int = 70,
    seed: int = 0,
    font: str = FONT,
    points: float = 11,
) -> Image.Image:
    """``text`` on an A4 page as a scanner at ``dpi`` would give it back (greyscale)."""
    rng = random.Random(seed)
    width, height = int(8.27 * dpi), int(11.69 * dpi)
    page = Image.new("L", (width, height), 236)
    draw = ImageDraw.Draw(page)
    face = ImageFont.truetype(font, round(points * dpi / 72))
    margin = int(0.9 * dpi)
    line_height = int(face.size * 1.45)
    chars_per_line = int((width - 2 * margin) / (face.size * 0.52))
    y = margin
    for paragraph in text.split("\n\n"):
        for line in textwrap.wrap(paragraph, chars_per_line):
            draw.text((margin, y), line, fill=25, font=face)
            y += line_height
        y += line_height // 2
    if noise:
        speckles = int(width * height * noise / 50)
        for _ in range(speckles):
            x, yy = rng.randrange(width), rng.randrange(height)
            page.putpixel((x, yy), rng.choice((90, 140, 255)))
    page = page.rotate(skew, resample=Image.Resampling.BICUBIC, fillcolor=236, expand=False)
    page = page.filter(ImageFilter.GaussianBlur(0.6 * dpi / 200))
    buffer = io.BytesIO()
    page.save(buffer, "JPEG", quality=jpeg_quality)
    return Image.open(io.BytesIO(buffer.getvalue()))


def image_bytes(image: Image.Image, fmt: str = "PNG", **options: object) -> bytes:
    """``image`` encoded as ``fmt`` (``PNG``, ``JPEG``, ``TIFF``)."""
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def scanned_pdf(pages: list[Image.Image], target: Path | io.BytesIO, *, dpi: int = 200) -> None:
    """A PDF whose pages are these images only (no text layer), as a scanner writes it."""
    first, *rest = [p.convert("RGB") for p in pages]
    first.save(target, "PDF", resolution=dpi, save_all=True, append_images=rest)


def cer(expected: str, actual: str) -> float:
    """Character error rate: edit distance over the expected length, whitespace runs as one space."""
    a, b = " ".join(expected.split()), " ".join(actual.split())
    if not a:
        return float(bool(b))
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1] / len(a)
