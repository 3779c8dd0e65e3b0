"""Take docs/vacuum-full.png: the chat page answering from a real manual nobody here wrote (issue 45).

    python -m bench.manual_screenshot [--manual postgres] [--question "..."] [--out docs/vacuum-full.png]

Opens the manual's cached knowledge base (``bench/manuals.py`` ingests it on first use), serves the
product app on it (offline extractive model, no API key) on loopback, asks the question in headless
Chromium, opens the answer's first citation and saves the page (1280x900). Prints the answer and
the cited cards as the page shows them, so the picture can be checked against text. Needs the built
page (``scripts/build-frontend.sh``) and Debian's Chromium.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from bench.manuals import MANUALS, cached_kb
from rag_tools.embeddings import DEFAULT_EMBEDDER
from ragstream.app import create_app
from ragstream.config import AppConfig
from tests.browser.chat import ROOT, ChatPage, launch_browser, require_built_page
from tests.servers import serve

QUESTION = "What does VACUUM FULL do that plain VACUUM does not?"


async def take(manual: str, question: str, out: Path) -> None:
    require_built_page()
    kb, _ = await cached_kb(MANUALS[manual], DEFAULT_EMBEDDER, progress=True)
    uri = kb.uri
    kb.close()
    with tempfile.TemporaryDirectory() as data:
        app = create_app(AppConfig(data_dir=Path(data), kb_uri=uri))
        async with serve(app) as url, launch_browser() as browser:
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            chat = ChatPage(page, url, "manual")
            await chat.open()
            answer = await chat.ask(question)
            await chat.answers().last.locator("button.cite").first.click()
            await page.locator("#sources .source.is-active").wait_for()
            await page.wait_for_timeout(400)  # let the smooth scroll settle
            out.parent.mkdir(parents=True, exist_ok=True)
            await page.screenshot(path=str(out))
            print(f"Q: {question}\nA: {answer}\n")
            for key, card in (await chat.shown_cards()).items():
                print(f"[{key}] {card}")
            chat.assert_clean_console()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manual", choices=list(MANUALS), default="postgres")
    parser.add_argument("--question", default=QUESTION)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "vacuum-full.png")
    args = parser.parse_args()
    asyncio.run(take(args.manual, args.question, args.out))


if __name__ == "__main__":
    main()
