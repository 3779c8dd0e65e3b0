"""Take docs/screenshot.png (the page answering a question with a citation opened) and
docs/versions.png (an edited question and a regenerated answer, each with its version picker).

    python -m tests.browser.readme_screenshot [--out docs/screenshot.png] [--versions docs/versions.png]

Ingests the sample corpus into a temporary directory, serves the product app (offline extractive
model) on loopback, asks one question in headless Chromium, opens the first citation and saves a
1280x800 PNG; then asks a second question, edits it, makes its answer again and saves the second.
Needs the built page and Debian's Chromium, like tests/test_browser.py.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from bench.rag_eval import build_corpus_kb
from ragstream.app import create_app
from ragstream.config import AppConfig
from tests.browser.chat import ROOT, ChatPage, launch_browser, require_built_page
from tests.servers import serve

QUESTION = "How long are backups kept?"
SECOND = ("How do I restore a backup?", "What temperature must the bakery's walk-in cooler hold?")


async def take(out: Path, versions: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        kb = await build_corpus_kb(Path(tmp) / "kb")
        kb.close()
        app = create_app(AppConfig(data_dir=Path(tmp)))
        async with serve(app) as url, launch_browser() as browser:
            page = await browser.new_page(viewport={"width": 1280, "height": 800})
            chat = ChatPage(page, url, "readme")
            await chat.open()
            await chat.ask(QUESTION)
            await chat.answers().last.locator("button.cite").first.click()
            await page.locator("#sources .source.is-active").wait_for()
            await page.wait_for_timeout(400)  # let the smooth scroll settle
            out.parent.mkdir(parents=True, exist_ok=True)
            await page.screenshot(path=str(out))

            asked, edited = SECOND
            await chat.ask(asked)
            question = page.locator("#log article.message-user").last
            await question.get_by_role("button", name="Edit this question").click()
            await page.locator("#log .edit-form textarea").fill(edited)
            await page.locator("#log .edit-form").get_by_role("button", name="Send").click()
            await page.locator("#log .branch-picker").first.wait_for()
            await chat.wait_idle()
            await (
                page.locator("#log article.message-assistant")
                .last.get_by_role("button", name="Regenerate this answer")
                .click()
            )
            await chat.wait_idle("document.querySelectorAll('#log .branch-picker').length === 2")
            await page.mouse.move(0, 0)  # no hover highlight
            versions.parent.mkdir(parents=True, exist_ok=True)
            await page.screenshot(path=str(versions))
            chat.assert_clean_console()
    print(f"wrote {out} and {versions}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshot.png")
    parser.add_argument("--versions", type=Path, default=ROOT / "docs" / "versions.png")
    args = parser.parse_args()
    try:
        require_built_page()
    except BaseException as exc:  # pytest.fail raises outside pytest too; say why and stop
        raise SystemExit(str(exc)) from None
    asyncio.run(take(args.out, args.versions))


if __name__ == "__main__":
    main()
