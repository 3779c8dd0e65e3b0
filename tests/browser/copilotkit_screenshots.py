"""Take the CopilotKit example's screenshots (examples/copilotkit/screenshots/*.png).

    python -m tests.browser.copilotkit_screenshots [--out examples/copilotkit/screenshots]

Ingests the sample corpus into a temporary directory, serves ragstream (offline extractive model)
and the example's server on loopback, and in headless Chromium: asks two questions in one thread
and opens a citation (``conversation.png``), then restricts answers to one document and asks
again (``filter.png``), then edits the last question and makes its answer again
(``versions.png``: the version pickers of both). 1280x800 PNGs. Needs the example built and Debian's Chromium, like
tests/test_copilotkit.py.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from bench.rag_eval import build_corpus_kb
from ragstream.app import create_app
from ragstream.config import AppConfig
from tests.browser.chat import launch_browser
from tests.browser.copilotkit import SCREENSHOTS, CopilotKitPage, example_server, require_example
from tests.servers import serve

QUESTIONS = ["How long are nightly database backups retained?", "How do I restore a backup?"]
FILTERED = ("Deploying ragstream", "How are backups taken?")
EDITED = "How long are backups kept?"
_SCROLL_TO_END = """() => document.querySelectorAll('[data-testid="copilot-chat"] *').forEach((el) => {
  if (el.scrollHeight > el.clientHeight + 1) el.scrollTop = el.scrollHeight;
})"""


async def take(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        kb = await build_corpus_kb(Path(tmp) / "kb")
        kb.close()
        app = create_app(AppConfig(data_dir=Path(tmp)))
        async with serve(app) as ragstream, example_server(ragstream) as runtime, launch_browser() as browser:
            page = CopilotKitPage(
                await browser.new_page(viewport={"width": 1280, "height": 800}), runtime.url, "shots"
            )
            await page.open()
            for question in QUESTIONS:
                await page.ask(question)
            await page.answers().last.locator("a.cite").first.click()
            await page.page.locator("#sources .source.is-active").wait_for()
            await page.page.wait_for_timeout(400)  # let the smooth scroll settle
            out.mkdir(parents=True, exist_ok=True)
            await page.page.screenshot(path=str(out / "conversation.png"))

            document, question = FILTERED
            await page.document_checkbox(document).check()
            await page.ask(question)
            await page.page.locator("#filter").scroll_into_view_if_needed()
            await page.page.screenshot(path=str(out / "filter.png"))

            question = page.questions().last
            await question.hover()
            await question.get_by_test_id("copilot-edit-button").click()
            await page.page.get_by_label("Your edited question").fill(EDITED)
            before = await page.last_answer_id()
            await page.page.locator(".edit-form").get_by_role("button", name="Send").click()
            await page.wait_for_answer_after(before)
            before = await page.last_answer_id()
            await page.page.get_by_test_id("copilot-regenerate-button").last.click()
            await page.wait_for_answer_after(before)
            await page.page.get_by_test_id("answer-branch-navigation").wait_for()
            await page.page.mouse.move(0, 0)  # no hover highlight
            await page.page.evaluate(_SCROLL_TO_END)  # the last toolbar clear of the input box
            await page.page.wait_for_timeout(400)
            await page.page.screenshot(path=str(out / "versions.png"))
            page.assert_clean()
    print(f"wrote conversation.png, filter.png and versions.png in {out}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=SCREENSHOTS)
    args = parser.parse_args()
    try:
        require_example()
    except BaseException as exc:  # pytest.fail raises outside pytest too; say why and stop
        raise SystemExit(str(exc)) from None
    asyncio.run(take(args.out))


if __name__ == "__main__":
    main()
