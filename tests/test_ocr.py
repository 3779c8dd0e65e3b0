"""Scans read by OCR as users meet them: known text rendered to an image (tests/scans.py), read back
within 3% character errors, ingested and found by search; a PDF with text pages and scanned pages
answered from both kinds with the right page cited; pictures inside Word and PowerPoint files read;
low-confidence pages reported; an image bomb, a corrupt image and an over-long scan fail alone in
one line; without the ``ocr`` extra the reason names it."""

from __future__ import annotations

import io
import re
import struct
import sys
import zlib
from pathlib import Path
from typing import Any

import httpx
import pytest
from fpdf import FPDF
from PIL import Image

from rag_tools.kb import KnowledgeBase, ocr, readers
from rag_tools.kb.readers import parse_document
from server.app import create_app
from server.config import AppConfig
from tests.embedders import HashingEmbeddingModel
from tests.scans import SANS, cer, image_bytes, page_text, render_page, scanned_pdf
from tests.servers import serve
from tests.test_office import _ask

pytestmark = pytest.mark.skipif(not ocr.ocr_available(), reason=ocr.MISSING_OCR)

WAREHOUSE = (
    "The warehouse in Rotterdam receives pallets on Mondays and Thursdays; deliveries outside "
    "those days are held at the gate and charged a handling fee of forty euros per pallet."
)


def _scan(text: str, **options: Any) -> Image.Image:
    """A half page: the tests' scans are short, OCR costs seconds per page on this machine."""
    image = render_page(text, **options)
    return image.crop((0, 0, image.width, image.height // 3))


def test_a_generated_scan_is_read_back_within_three_percent_character_errors() -> None:
    for seed, (fmt, name) in enumerate([("PNG", "scan.png"), ("JPEG", "scan.jpg")]):
        text = page_text(seed, paragraphs=2)
        parsed = parse_document(image_bytes(render_page(text, seed=seed), fmt), name=name)
        (section,) = parsed.sections
        assert cer(text, section.text) <= 0.03, section.text
        assert re.fullmatch(r"OCR \d+%", section.locator) and section.page == 1
        assert parsed.warnings == []


def test_each_page_of_a_tiff_is_a_page() -> None:
    first, second = _scan(WAREHOUSE, seed=1), _scan(page_text(4, 1), seed=2)
    data = image_bytes(first, "TIFF", save_all=True, append_images=[second], compression="tiff_lzw")
    parsed = parse_document(data, name="fax.tiff")
    assert [s.page for s in parsed.sections] == [1, 2]
    assert parsed.sections[0].locator.startswith("page 1, OCR ")
    assert "handling fee of forty euros" in parsed.sections[0].text


async def test_a_scanned_image_is_ingested_and_found_by_search(tmp_path: Path) -> None:
    (tmp_path / "delivery-rules.png").write_bytes(image_bytes(_scan(WAREHOUSE, seed=3)))
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as kb:
        (outcome,) = (await kb.ingest_paths([tmp_path / "delivery-rules.png"])).outcomes
        assert outcome.status == "added", outcome
        (hit,) = await kb.search("handling fee per pallet Rotterdam", limit=1, mode="text")
        assert hit.uri == "delivery-rules.png" and "forty euros per pallet" in hit.text
        assert hit.page == 1 and hit.locator.startswith("OCR ")
        original = await kb.get_document_file(hit.document_id)
        assert original is not None and original.media_type == "image/png"


def mixed_pdf(path: Path) -> Path:
    """Page 1 typed (a text layer), page 2 a scan of the warehouse rules, page 3 typed."""
    scan = io.BytesIO()
    _scan(WAREHOUSE, seed=5).convert("RGB").save(scan, "JPEG", quality=80)
    pdf = FPDF()
    pdf.set_font("Helvetica", size=11)
    pdf.add_page()
    pdf.multi_cell(0, 6, "Backups. Nightly database backups are retained for thirty-five days in the vault.")
    pdf.add_page()
    pdf.image(io.BytesIO(scan.getvalue()), x=0, y=0, w=210)
    pdf.add_page()
    pdf.multi_cell(0, 6, "Access. Badges for the server room are issued by the facilities desk only.")
    pdf.output(str(path))
    return path


async def test_a_mixed_pdf_is_answered_from_both_kinds_of_page_with_the_right_page_cited(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    (data / "docs").mkdir(parents=True)
    mixed_pdf(data / "docs" / "site-manual.pdf")
    config = AppConfig(data_dir=data, keepalive_seconds=5)
    async with KnowledgeBase.from_config(config) as kb:
        (outcome,) = (await kb.ingest_paths([data / "docs"])).outcomes
        assert outcome.status == "added" and outcome.warnings == [], outcome
        pages = {hit.page: hit.locator for hit in await kb.get_chunks(outcome.document_id or "")}
        assert pages[1] == "page 1" and pages[3] == "page 3"
        assert re.fullmatch(r"page 2, OCR \d+%", pages[2])
    async with (
        serve(create_app(config)) as url,
        httpx.AsyncClient(base_url=url, timeout=180) as client,
    ):
        for thread, question, fact, page in [
            ("scan", "What handling fee is charged per pallet outside delivery days?", "forty euros", 2),
            ("text", "How long are nightly database backups retained?", "thirty-five days", 1),
        ]:
            answer, state = await _ask(client, thread, question)
            quoted = next(s for s in re.split(r"(?<=\]) ", answer) if fact in s)
            card = state["citations"][re.search(r"\[(\d+)\]", quoted).group(1)]  # type: ignore[union-attr]
            assert (card["uri"], card["page"]) == ("site-manual.pdf", page), card


def test_pictures_inside_word_and_powerpoint_files_are_read() -> None:
    from docx import Document
    from pptx import Presentation
    from pptx.util import Inches

    picture = image_bytes(_scan(WAREHOUSE, seed=6))
    document = Document()
    document.add_heading("Delivery rules", level=1)
    document.add_paragraph("The rules as posted at the gate:")
    document.add_picture(io.BytesIO(picture))
    buffer = io.BytesIO()
    document.save(buffer)
    parsed = parse_document(buffer.getvalue(), name="rules.docx")
    assert "Picture: The warehouse in Rotterdam receives pallets" in parsed.content
    assert cer(WAREHOUSE, parsed.sections[0].text.split("Picture: ", 1)[1]) <= 0.03

    deck = Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[6])  # blank: the picture is all there is
    slide.shapes.add_picture(io.BytesIO(picture), Inches(0.5), Inches(0.5), width=Inches(9))
    buffer = io.BytesIO()
    deck.save(buffer)
    (section,) = parse_document(buffer.getvalue(), name="gate.pptx").sections
    assert section.locator == "slide 1" and "handling fee of forty euros" in section.text


def test_a_poor_scan_is_read_and_reported_with_its_low_confidence() -> None:
    poor = render_page(WAREHOUSE, dpi=100, noise=0.5, jpeg_quality=8, skew=3, font=SANS, points=8, seed=7)
    parsed = parse_document(image_bytes(poor), name="fax.png")
    (warning,) = parsed.warnings
    assert warning.startswith("low OCR confidence (under 70%) on page 1 (")


def _png_header_only(width: int, height: int) -> bytes:
    """A PNG that declares ``width`` x ``height`` pixels and holds a few bytes: an image bomb."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\0" * 64))
        + chunk(b"IEND", b"")
    )


async def test_an_image_bomb_a_corrupt_image_and_an_over_long_scan_fail_alone_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "bomb.png").write_bytes(_png_header_only(200_000, 200_000))
    jpeg = image_bytes(_scan(WAREHOUSE, seed=8), "JPEG")
    (folder / "torn.jpg").write_bytes(jpeg[: len(jpeg) // 3])
    (folder / "noise.tiff").write_bytes(b"II*\x00" + b"\x13" * 200)
    blank = Image.new("L", (170, 220), 236)
    scanned_pdf([blank] * 500, folder / "book-scan.pdf", dpi=20)
    (folder / "fine.png").write_bytes(image_bytes(_scan(WAREHOUSE, seed=9)))
    monkeypatch.setattr(readers, "MAX_OCR_PAGES", 40)
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as kb:
        report = await kb.ingest_paths([folder])
        outcomes = {Path(o.source).name: o for o in report.outcomes}
        assert outcomes.pop("fine.png").status == "added"
        reasons = {name: o.error or "" for name, o in outcomes.items()}
        assert all(o.status == "error" for o in outcomes.values()), outcomes
        assert reasons["bomb.png"] == (
            "image too large: 200000x200000 pixels, over the limit of 40,000,000 (an image bomb?)"
        )
        assert reasons["torn.jpg"].startswith("not a readable image")
        assert reasons["noise.tiff"].startswith("not a readable image")
        assert (
            reasons["book-scan.pdf"] == "more than 40 pages without a text layer to read by OCR (the limit)"
        )
        assert all("\n" not in reason for reason in reasons.values())
        assert await kb.count_documents() == 1


def test_a_picture_bomb_inside_a_deck_is_left_out_and_named() -> None:
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])
    slide.shapes.title.text = "Gate rules"
    slide.shapes.add_picture(io.BytesIO(_png_header_only(100_000, 100_000)), Inches(1), Inches(1))
    buffer = io.BytesIO()
    deck.save(buffer)
    parsed = parse_document(buffer.getvalue(), name="gate.pptx")
    assert [s.text for s in parsed.sections] == ["Gate rules"]
    (warning,) = parsed.warnings
    assert warning.startswith("pictures not read: a picture on slide 1 (image too large: 100000x100000")


def test_without_the_ocr_extra_a_scan_fails_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pytesseract", None)  # as if the extra were not installed
    with pytest.raises(ValueError, match=re.escape(ocr.MISSING_OCR)):
        parse_document(image_bytes(_scan(WAREHOUSE, seed=10)), name="scan.png")
    scan = io.BytesIO()
    scanned_pdf([_scan(WAREHOUSE, seed=10)], scan)
    with pytest.raises(ValueError, match=re.escape(f"no text layer (scanned document?): {ocr.MISSING_OCR}")):
        parse_document(scan.getvalue(), name="scan.pdf")
