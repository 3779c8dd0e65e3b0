"""Take docs/page-card.png: a citation card of a scanned PDF page, the page shown with the cited
passage marked (issue 49).

    python -m tests.browser.page_card_screenshot [--out docs/page-card.png]

Ingests the mixed PDF of tests/test_ocr.py (typed pages and a scanned one, read by OCR) into a
temporary directory, serves the product app (offline extractive model) on loopback, asks about the
scanned page in headless Chromium, opens the citation and saves the page (1280x900). Needs the built
page, Debian's Chromium and the ocr extra, like tests/test_ocr.py.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from playwright.async_api import Page

from rag_tools.kb import KnowledgeBase
from ragstream.app import create_app
from ragstream.config import AppConfig
from tests.browser.chat import ROOT, ChatPage, launch_browser
from tests.servers import serve

QUESTION = "What handling fee is charged per pallet outside delivery days?"


async def shown_page_card(page: Page, url: str) -> ChatPage:
    """Ask ``QUESTION`` on the chat page at ``url``, open its first citation and wait until the
    card's page picture has loaded."""
    chat = ChatPage(page, url, "page-card")
    await chat.open()
    await chat.ask(QUESTION)
    await chat.answers().last.locator("button.cite").first.click()
    card = page.locator("#sources .source.is-active")
    await card.wait_for()
    await card.locator("img.source-page-image").scroll_into_view_if_needed()
    await page.wait_for_function(
        "() => { const i = document.querySelector('#sources .source.is-active img.source-page-image');"
        " return i !== null && i.complete && i.naturalWidth > 0; }",
        timeout=120_000,
    )
    return chat


async def ingest_mixed_pdf(data: Path) -> None:
    """The mixed PDF ingested into ``data``'s knowledge base with the default embedder."""
    from tests.test_ocr import mixed_pdf

    docs = data / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    mixed_pdf(docs / "site-manual.pdf")
    async with KnowledgeBase.from_config(AppConfig(data_dir=data)) as kb:
        await kb.ingest_paths([docs])


async def take(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        await ingest_mixed_pdf(Path(tmp))
        async with serve(create_app(AppConfig(data_dir=Path(tmp)))) as url, launch_browser() as browser:
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            await shown_page_card(page, url)
            await page.wait_for_timeout(400)  # let the smooth scroll settle
            out.parent.mkdir(parents=True, exist_ok=True)
            await page.screenshot(path=str(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "page-card.png")
    asyncio.run(take(parser.parse_args().out))


if __name__ == "__main__":
    main()
