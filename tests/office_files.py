"""Office files that must fail, built with the same writer libraries as the sample corpus.

Each builder returns the bytes of one file a user might upload by mistake or an attacker on
purpose; ``BAD_FILES`` names them with the reason their ingestion must give. Used by
tests/test_office.py, the fuzz suite (tests/fuzzing/strategies.py) and bench/office.py.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "examples" / "corpus"
OFFICE_SAMPLES = (
    "support-onboarding.docx",
    "roadmap-2025.pptx",
    "price-list.xlsx",
    "status-history.csv",
    "admin-guide.epub",
)


def sample(name: str) -> bytes:
    """A sample file of the corpus."""
    return (CORPUS / name).read_bytes()


def corrupt_docx() -> bytes:
    """The sample document cut in half: the zip's central directory is gone."""
    data = sample("support-onboarding.docx")
    return data[: len(data) // 2]


def protected_docx() -> bytes:
    """The sample document encrypted with a password, as Word saves it (an OLE2 file)."""
    from msoffcrypto.format.ooxml import OOXMLFile

    out = io.BytesIO()
    OOXMLFile(io.BytesIO(sample("support-onboarding.docx"))).encrypt("secret", out)
    return out.getvalue()


def zip_bomb_docx(megabytes: int = 64) -> bytes:
    """A .docx whose document.xml inflates from about 64 KiB to ``megabytes`` MiB of zeros."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        with archive.open("word/document.xml", "w") as member:
            block = b"\0" * 2**20
            for _ in range(megabytes):
                member.write(block)
    return out.getvalue()


def sparse_xlsx() -> bytes:
    """A workbook with a value in A1 and one in XFD1048576: a million rows of empty cells between."""
    from openpyxl import Workbook

    workbook = Workbook()
    sheet = workbook.active
    sheet["A1"] = "start"
    sheet["XFD1048576"] = "end"
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


def sparse_xlsx_without_dimension() -> bytes:
    """The sparse workbook with its ``<dimension>`` removed: the size shows only while reading."""
    source = zipfile.ZipFile(io.BytesIO(sparse_xlsx()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for info in source.infolist():
            data = source.read(info)
            if info.filename == "xl/worksheets/sheet1.xml":
                data = data.replace(b'<dimension ref="A1:XFD1048576"/>', b"")
            archive.writestr(info.filename, data)
    return out.getvalue()


def pictures_pptx(slides: int = 3) -> bytes:
    """A deck whose slides hold only a picture each."""
    from PIL import Image
    from pptx import Presentation
    from pptx.util import Inches

    picture = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 30, 30)).save(picture, "PNG")
    deck = Presentation()
    for _ in range(slides):
        slide = deck.slides.add_slide(deck.slide_layouts[6])  # "Blank": no placeholders
        slide.shapes.add_picture(io.BytesIO(picture.getvalue()), Inches(1), Inches(1))
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def workbook_named_docx() -> bytes:
    """A spreadsheet renamed to .docx."""
    return sample("price-list.xlsx")


#: name: (builder, what the failure reason says)
BAD_FILES: dict[str, tuple[Callable[[], bytes], str]] = {
    "corrupt.docx": (corrupt_docx, "not a readable .docx file (broken zip archive"),
    "protected.docx": (protected_docx, "the file is password-protected (encrypted)"),
    "bomb.docx": (zip_bomb_docx, "word/document.xml inflates 1,029 times its packed size (a zip bomb?)"),
    "sparse.xlsx": (sparse_xlsx, "sheet 'Sheet' spans 1,048,576 rows and 16,384 columns"),
    "sparse-undeclared.xlsx": (sparse_xlsx_without_dimension, "sheet 'Sheet' has more than 100,000 rows"),
    "pictures.pptx": (pictures_pptx, "no text found on any slide (only pictures?)"),
    "renamed.docx": (workbook_named_docx, "not a .docx file (the archive has no word/document.xml)"),
}
