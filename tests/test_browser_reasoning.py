"""A thinking model's reasoning on the chat page: collapsed under the answer, kept with the thread.

The server answers through ``openai-chat:`` against the loopback Chat Completions server
(``tests/wire_models.py``), whose scripted model thinks (``reasoning_content``) before it searches
and before it answers. The picture in docs/reasoning.png is the first test's
``test-artifacts/browser-reasoning-block.png``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, expect

from ragstream.app import create_app
from tests.browser.chat import ChatPage, launch_browser, require_built_page
from tests.servers import serve
from tests.test_models_wire import thinking_script
from tests.wire_models import WireModel

pytestmark = pytest.mark.timeout(180)

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    require_built_page()
    async with launch_browser() as launched:
        yield launched


async def test_reasoning_is_shown_collapsed_under_the_answer_and_after_a_reload(
    browser: Browser, scenario_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    wire = WireModel(thinking_script)
    async with serve(wire.app) as model_url:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{model_url}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        scenario_config.model = "openai-chat:wire"
        async with serve(create_app(scenario_config)) as url:
            context = await browser.new_context(viewport={"width": 1100, "height": 720})
            chat = ChatPage(await context.new_page(), url, "reasoning")
            ARTIFACTS.mkdir(exist_ok=True)
            await chat.open()
            answer = await chat.ask("How long are nightly backups kept?")
            assert "35 days" in answer

            answer_article = chat.page.locator("#log article.message-assistant:not(.message-tools)").last
            block = answer_article.locator("details.reasoning")
            await expect(block).to_have_count(1)
            await expect(block).not_to_have_attribute("open", "")  # collapsed
            await expect(block.locator("summary")).to_have_text("Thinking")
            await expect(block.locator(".reasoning-text").first).not_to_be_visible()
            # under the answer: after its text
            order = await answer_article.locator(".message-body > *").evaluate_all(
                "(nodes) => nodes.map((n) => n.tagName.toLowerCase())"
            )
            assert order[-1] == "details" and "p" in order[:-1], order

            await block.locator("summary").click()
            await expect(block.locator(".reasoning-text")).to_have_text(
                ["The question is about backups: search.", "Passage 1 gives the retention."]
            )
            # docs/reasoning.png is this picture (taken here, copied there by hand)
            await answer_article.screenshot(path=str(ARTIFACTS / "browser-reasoning-block.png"))
            await chat.screenshot("open")

            await chat.reload()  # the thread keeps it: shown again, collapsed
            block = chat.page.locator("#log article.message-assistant:not(.message-tools)").last.locator(
                "details.reasoning"
            )
            await expect(block).to_have_count(1)
            await expect(block).not_to_have_attribute("open", "")
            await expect(block.locator(".reasoning-text")).to_have_count(2)
            chat.assert_clean_console()
            await context.close()


async def test_reasoning_in_the_copilotkit_example_is_collapsed_under_the_answer(
    browser: Browser, scenario_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same model behind CopilotKit's runtime and the example's React page: the reasoning is
    drawn closed under the answer (not where CopilotChat puts it, before the tool call), and again
    when the page is opened on the saved thread."""
    from tests.browser.copilotkit import CopilotKitPage, example_server, require_example

    require_example()
    wire = WireModel(thinking_script)
    async with serve(wire.app) as model_url:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{model_url}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        scenario_config.model = "openai-chat:wire"
        async with serve(create_app(scenario_config)) as ragstream, example_server(ragstream) as runtime:
            context = await browser.new_context(viewport={"width": 1280, "height": 800})
            page = CopilotKitPage(await context.new_page(), runtime.url, "reasoning")
            await page.open()
            answer = await page.ask("How long are nightly backups kept?")
            assert "35 days" in answer

            message = page.page.locator('[data-testid="copilot-assistant-message"]').filter(
                has=page.page.locator(".answer-text")
            )
            block = message.last.locator("details.reasoning")
            await expect(block).to_have_count(1)
            await expect(block).not_to_have_attribute("open", "")
            await expect(block.locator("summary")).to_have_text("Thinking")
            # CopilotChat's own reasoning rows are not drawn once the answer is there
            await expect(
                page.page.locator("[data-copilotkit] button[aria-expanded]", has_text="Thought for")
            ).to_have_count(0)
            await block.locator("summary").click()
            await expect(block.locator(".reasoning-text")).to_have_text(
                ["The question is about backups: search.", "Passage 1 gives the retention."]
            )
            await page.screenshot("open")

            await page.reload()
            await page.wait_answers_drawn()
            block = message.last.locator("details.reasoning")
            await expect(block).to_have_count(1)
            await expect(block).not_to_have_attribute("open", "")
            await expect(block.locator(".reasoning-text")).to_have_count(2)
            page.assert_clean()
            await context.close()
            assert runtime.alive, runtime.log()
