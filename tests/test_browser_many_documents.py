"""The chat page over a knowledge base of 10,000 documents, in real headless Chromium.

The document picker lists a page of them and searches the rest on the server as you type
(``GET /documents?q=``), so the panel stays a few dozen rows whatever the knowledge base holds; a
document found by search goes into the filter and the next answer comes from it alone.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, expect

from rag_tools.kb import KnowledgeBase
from ragstream.app import create_app
from ragstream.config import AppConfig
from tests.browser.chat import ChatPage, launch_browser, require_built_page
from tests.servers import serve

pytestmark = pytest.mark.timeout(900)

DOCUMENTS = 10_000
#: One document among the many that a question is about; the others only share its words' shape.
NEEDLE = ("zebra-crossing-survey-07731.txt", "The zebra crossing survey counted 412 cyclists on Tuesday.")


@pytest.fixture(scope="module")
def many_documents_kb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A knowledge base of ``DOCUMENTS`` one-line reports (built once for the module)."""
    import asyncio

    root = tmp_path_factory.mktemp("many")
    folder = root / "reports"
    folder.mkdir()
    for n in range(DOCUMENTS - 1):
        (folder / f"site-report-{n:05d}.txt").write_text(
            f"Site {n % 97} reported {n % 13} visits in week {n % 52}."
        )
    (folder / NEEDLE[0]).write_text(NEEDLE[1])

    async def build() -> None:
        async with KnowledgeBase(root / "data" / "kb") as kb:
            report = await kb.ingest_paths([folder])
            assert not [o for o in report.outcomes if o.status == "error"]
            assert await kb.count_documents() == DOCUMENTS

    asyncio.run(build())
    return root / "data"


@pytest.fixture
async def many_url(many_documents_kb: Path, tmp_path: Path) -> AsyncIterator[str]:
    data = tmp_path / "data"
    shutil.copytree(many_documents_kb, data)
    async with serve(create_app(AppConfig(data_dir=data, keepalive_seconds=5))) as url:
        yield url


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    require_built_page()
    async with launch_browser() as launched:
        yield launched


async def test_the_picker_searches_ten_thousand_documents_as_you_type(
    browser: Browser, many_url: Any
) -> None:
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    chat = ChatPage(await context.new_page(), many_url, "many-documents")
    await chat.open()
    page = chat.page
    rows = page.locator("#filter .doc-list li")
    # one page of the 10,000, and where the rest are
    await expect(rows).to_have_count(50)
    await expect(page.locator("#filter .doc-more")).to_contain_text("50 of 10,000")
    await page.locator("#filter .doc-more button", has_text="Show more").click()
    await expect(rows).to_have_count(100)
    await expect(page.locator("#filter .doc-more")).to_contain_text("100 of 10,000")

    # typing searches the server: the one document far down the alphabet is found by a part of its name
    search = page.locator("#filter-search")
    await search.press_sequentially("ZEBRA cross", delay=40)
    await expect(rows).to_have_count(1)
    await expect(rows).to_have_text("zebra crossing survey 07731")
    await expect(page.locator("#filter .doc-more")).to_have_count(0)
    await expect(search).to_be_focused()  # the list updating does not take the keyboard away
    # and by its file name (the search box asks for title or file name alike)
    await search.fill("site-report-0999")
    await expect(rows).to_have_count(9)  # 09990-09998
    await search.fill("no such report")
    await expect(page.locator("#filter")).to_contain_text(
        "No document’s title or file name has “no such report”."
    )

    # a document found this way goes into the filter and stays there when the search moves on
    await search.fill("zebra")
    await chat.document_checkbox("zebra crossing survey 07731").check()
    summary = page.locator("#filter .filter-summary")
    await expect(summary).to_contain_text("Answers use only: zebra crossing survey 07731")
    await search.fill("site report 0000")
    await expect(rows).to_have_count(10)
    await expect(page.locator("#filter .chip")).to_have_text("zebra crossing survey 07731×")
    answer = await chat.ask("How many cyclists did the survey count?")
    assert "412 cyclists" in answer
    assert set(await chat.cited_titles()) == {"zebra crossing survey 07731"}
    await chat.screenshot("picker-10000-documents")
    chat.assert_clean_console()
