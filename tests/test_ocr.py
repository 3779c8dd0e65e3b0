"""Scans read by OCR as users meet them: known text rendered to an image (tests/scans.py), read back
within 3% character errors, ingested and found by search; a PDF with text pages and scanned pages
answered from both kinds with the right page cited; pictures inside Word and PowerPoint files read;
low-confidence pages reported; an image bomb, a corrupt image and an over-long scan fail alone in
one line; without the ``ocr`` extra the reason names it."""

from __future__ import annotations

import asyncio
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
from ragstream.app import create_app
from ragstream.config import AppConfig
from tests.embedders import HashingEmbeddingModel
from tests.scans import SANS, cer, image_bytes, page_text, render_page, scanned_pdf
from tests.servers import serve
from tests.test_document_access import _as, _server, _upload
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
    path.write_bytes(mixed_pdf_bytes())
    return path


def mixed_pdf_bytes() -> bytes:
    """The mixed PDF's bytes (``mixed_pdf``)."""
    scan = io.BytesIO()
    _scan(WAREHOUSE, seed=5).convert("RGB").save(scan, "JPEG", quality=80)
    pdf = FPDF()
    pdf.set_title("Site manual")
    pdf.set_font("Helvetica", size=11)
    pdf.add_page()
    pdf.multi_cell(0, 6, "Backups. Nightly database backups are retained for thirty-five days in the vault.")
    pdf.add_page()
    pdf.image(io.BytesIO(scan.getvalue()), x=0, y=0, w=210)
    pdf.add_page()
    pdf.multi_cell(0, 6, "Access. Badges for the server room are issued by the facilities desk only.")
    return bytes(pdf.output())


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


async def test_a_cited_page_comes_as_a_picture_with_the_passage_marked_for_its_readers_only(
    scenario_config: Any,
) -> None:
    """``GET /documents/{id}/page``: the typed page and the scanned page, each with the passage's
    region where its text is; another group's reader gets 404, as for the document itself."""
    async with _server(scenario_config, scenario=False) as client:
        manual = await _upload(client, "root", "site-manual.pdf", mixed_pdf_bytes(), "hr")
        alice, bob = _as("alice"), _as("bob")
        typed = await client.get(
            f"/documents/{manual}/page",
            params={"page": 1, "mark": "Nightly database backups are retained for thirty-five days"},
            headers=alice,
        )
        assert typed.status_code == 200 and typed.headers["content-type"] == "image/png"
        image = Image.open(io.BytesIO(typed.content))
        left, top, right, bottom = map(int, typed.headers["x-passage-region"].split(","))
        assert top < image.height / 8 and right - left > image.width / 3  # the first lines of the page
        scanned = await client.get(
            f"/documents/{manual}/page", params={"page": 2, "mark": WAREHOUSE[60:220]}, headers=alice
        )
        assert scanned.status_code == 200
        left, top, right, bottom = map(int, scanned.headers["x-passage-region"].split(","))
        assert top < image.height / 6 and bottom - top > image.height / 60  # the scan's lines, by OCR
        unmarked = await client.get(f"/documents/{manual}/page", params={"page": 3}, headers=alice)
        assert unmarked.status_code == 200 and "x-passage-region" not in unmarked.headers
        beyond = await client.get(f"/documents/{manual}/page", params={"page": 4}, headers=alice)
        assert beyond.status_code == 404
        assert beyond.json()["error"]["message"] == "the document has 3 pages, not a page 4"
        hidden = await client.get(f"/documents/{manual}/page", params={"page": 1}, headers=bob)
        assert hidden.status_code == 404
        assert (
            hidden.json()["error"]["message"]
            == f"document {manual!r} not found, or kept without its original file"
        )
        notes = await _upload(client, "root", "notes.md", b"# Notes\n\nNo pages here.", None)
        flat = await client.get(f"/documents/{notes}/page", params={"page": 1}, headers=alice)
        assert flat.status_code == 404 and "has no pages" in flat.json()["error"]["message"]


async def test_pages_drawn_at_once_for_several_cards_all_come(scenario_config: Any) -> None:
    """A chat page with several PDF citations asks for their pictures at once: pdfium is not
    thread-safe, and two renders in two worker threads crashed the server (CI, exit 139)."""
    async with _server(scenario_config, scenario=False) as client:
        manual = await _upload(client, "root", "site-manual.pdf", mixed_pdf_bytes(), "hr")
        alice = _as("alice")
        pages = await asyncio.gather(
            *(
                client.get(f"/documents/{manual}/page", params={"page": 1 + n % 3}, headers=alice)
                for n in range(12)
            )
        )
        assert [page.status_code for page in pages] == [200] * 12
        assert len({page.content for page in pages[0::3]}) == 1  # page 1 drawn the same each time


async def test_the_chat_page_shows_the_cited_scanned_page_with_the_passage_marked(tmp_path: Path) -> None:
    """In Chromium: the card of a citation of the scanned page shows that page as a picture
    (tests/browser/page_card_screenshot.py takes docs/page-card.png the same way)."""
    from tests.browser.chat import launch_browser, require_built_page
    from tests.browser.page_card_screenshot import ingest_mixed_pdf, shown_page_card

    require_built_page()
    await ingest_mixed_pdf(tmp_path)
    async with serve(create_app(AppConfig(data_dir=tmp_path))) as url, launch_browser() as browser:
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        chat = await shown_page_card(page, url)
        card = page.locator("#sources .source.is-active")
        assert re.fullmatch(r"page 2, OCR \d+%", await card.locator(".source-where").inner_text())
        image = card.locator("img.source-page-image")
        src = await image.get_attribute("src") or ""
        assert "/page?page=2&mark=The+warehouse+in+Rotterdam" in src, src
        assert await image.get_attribute("alt") == "Page 2 of Site manual, the cited passage marked"
        region = (await page.request.get(url + src)).headers["x-passage-region"]
        assert region.count(",") == 3
        chat.assert_clean_console()
