"""Drive the built chat page in Debian's headless Chromium with Playwright (async API).

``launch_browser()`` starts Chromium from ``/usr/bin/chromium`` (never a Playwright download);
``ChatPage`` wraps a page of the chat with the few actions and waits the tests need, and records
every console error or warning and uncaught page error so a test can assert there were none.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest
from playwright.async_api import Browser, ConsoleMessage, Locator, Page, async_playwright, expect

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "server" / "static"
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = Path(os.environ.get("RAGSTREAM_CHROMIUM", "/usr/bin/chromium"))
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WAIT_MS = 20_000  # the longest any single wait may take
expect.set_options(timeout=WAIT_MS)


def require_built_page() -> None:
    """Fail (not skip) when the page or the browser is missing: the test command provides both."""
    if not (STATIC / "index.html").is_file():
        pytest.fail(
            f"the chat page is not built ({STATIC / 'index.html'} is missing): "
            "run `bash scripts/build-frontend.sh` (cd frontend && npm ci && npm run build)",
            pytrace=False,
        )
    if not CHROMIUM.exists():
        pytest.fail(
            f"Chromium is missing at {CHROMIUM}: `apt-get install -y chromium` (Debian's package)",
            pytrace=False,
        )


@asynccontextmanager
async def launch_browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=LAUNCH_ARGS, headless=True, timeout=WAIT_MS
        )
        try:
            yield browser
        finally:
            await browser.close()


class ChatPage:
    """One tab of the chat page at ``base_url``."""

    def __init__(self, page: Page, base_url: str, name: str) -> None:
        self.page = page
        self.base_url = base_url
        self.name = name
        self.problems: list[str] = []
        self.requests: list[tuple[str, str, int]] = []
        page.set_default_timeout(WAIT_MS)
        page.on("console", self._on_console)
        page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        page.on("response", lambda r: self.requests.append((r.request.method, r.url, r.status)))

    def _on_console(self, message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            self.problems.append(f"console {message.type}: {message.text}")

    # ---- navigation and state ----

    async def open(self, fragment: str = "") -> None:
        await self.page.goto(f"{self.base_url}/{fragment}")
        await self.wait_ready()

    async def reload(self) -> None:
        await self.page.reload()
        await self.wait_ready()

    async def wait_ready(self) -> None:
        """The page rendered a thread and listed the documents."""
        await self.page.locator("#filter .doc-list input[type=checkbox]").first.wait_for()
        await self.page.locator("#log > *").first.wait_for()

    @property
    def thread_id(self) -> str | None:
        match = re.search(r"#thread=(.+)$", self.page.url)
        return unquote(match.group(1)) if match else None

    async def server_view(self) -> dict[str, Any]:
        """``GET /threads/{id}`` for the thread this page shows."""
        assert self.thread_id, f"no thread in the URL: {self.page.url}"
        async with httpx.AsyncClient(base_url=self.base_url, timeout=10) as client:
            response = await client.get(f"/threads/{self.thread_id}")
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]

    # ---- asking ----

    def answers(self) -> Locator:
        """The bodies of the assistant messages that carry text (not only tool calls): the answer
        without the buttons under it (versions, Regenerate)."""
        return self.page.locator(f"{_ANSWERS} > .message-body")

    async def type_question(self, text: str) -> None:
        await self.page.locator("#question").fill(text)
        await self.page.locator("#question").press("Enter")

    async def ask(self, text: str) -> str:
        """Ask, wait for the run to end with a new answer; returns the answer's text."""
        before = await self.answers().count()
        await self.type_question(text)
        return await self.wait_for_new_answer(before)

    async def wait_for_new_answer(self, before: int) -> str:
        """Wait until a run ended with more than ``before`` answers shown; returns the last one."""
        await self.wait_idle(f"document.querySelectorAll({json.dumps(_ANSWERS)}).length > {before}")
        return await self.answers().last.inner_text()

    async def wait_idle(self, condition: str = "true") -> None:
        """Wait until no run is active and ``condition`` (a JS expression) holds."""
        await self.page.wait_for_function(
            f"() => document.querySelector('#log').getAttribute('aria-busy') === 'false'"
            f" && document.querySelector('#stop').hidden && ({condition})",
            timeout=WAIT_MS,
        )

    async def cited_titles(self, answer_index: int = -1) -> list[str]:
        """The titles of an answer's ``[n]`` buttons, once every marker in its text is one (cards
        beyond the state's emit window are fetched from the server after the run)."""
        answer = self.answers().nth(answer_index) if answer_index >= 0 else self.answers().last
        text = "\n".join(await answer.locator(":scope > p").all_inner_texts())
        markers = sum(len(re.split(r"[,;]", group)) for group in _MARKER.findall(text))
        buttons = answer.locator("button.cite")
        await expect(buttons).to_have_count(markers, timeout=WAIT_MS)
        return [await b.get_attribute("title") or "" for b in await buttons.all()]

    # ---- what the page shows, as comparable data ----

    async def shown_messages(self) -> list[tuple[str, str, str, list[str]]]:
        """The conversation on screen: (message id, role, text, tool call ids) per message shown."""
        shown = await self.page.evaluate(_SHOWN_MESSAGES)
        return [(m["id"], m["role"], squash(m["text"]), m["tools"]) for m in shown]

    async def shown_cards(self) -> dict[str, dict[str, str]]:
        """The source cards on screen: number -> title and passage (its words, squashed)."""
        cards = await self.page.evaluate(_SHOWN_CARDS)
        return {n: {"title": c["title"], "passage": squash(c["passage"])} for n, c in cards.items()}

    # ---- filter ----

    def document_checkbox(self, title: str) -> Locator:
        return self.page.locator("#filter").get_by_role("checkbox", name=title, exact=True)

    async def add_filter_name(self, name: str) -> None:
        await self.page.locator("#filter-name").fill(name)
        await self.page.locator("#filter-name").press("Enter")
        await self.page.locator("#filter .chip", has_text=name).wait_for()

    # ---- evidence ----

    async def screenshot(self, step: str) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / f"browser-{self.name}-{step}.png"
        await self.page.screenshot(path=str(path))
        return path

    def assert_clean_console(self) -> None:
        assert self.problems == [], "the page logged problems:\n" + "\n".join(self.problems)


_ANSWERS = "#log article.message-assistant:not(.message-tools)"
_MARKER = re.compile(r"\[(\d+(?:\s*[,;]\s*\d+)*)\]")  # an answer's [n] (CITATION in conversation.ts)
_SHOWN_MESSAGES = """() => [...document.querySelectorAll('#log article[data-message-id]')].map((a) => ({
  id: a.dataset.messageId,
  role: a.classList.contains('message-user') ? 'user' : 'assistant',
  text: [...a.querySelectorAll(':scope > .message-body > p')].map((p) => p.innerText).join(' '),
  tools: [...a.querySelectorAll('.tool[data-tool-call-id]')].map((t) => t.dataset.toolCallId),
}))"""
_SHOWN_CARDS = """() => Object.fromEntries([...document.querySelectorAll('#sources .source')].map((card) => [
  card.dataset.citation,
  {
    title: card.querySelector('h3').textContent.replace(/^\\[\\d+\\]\\s*/, ''),
    passage: [...card.querySelector('.source-passage').children].map((block) => block.innerText).join(' '),
  },
]))"""


def squash(text: str) -> str:
    """Text with its runs of white space made one space (paragraphs and line breaks as on screen)."""
    return " ".join(text.split())


# What the page shows of inline Markdown (frontend/src/markdown.ts, the same three rules): code,
# bold and emphasis lose their marks; a table's pipes and a list item's marker are not text.
_INLINE = re.compile(
    r"(`+)([^`]|[^`].*?[^`])\1(?!`)|\*\*(?=\S)(.+?\S)\*\*|(?<![\w*])\*(?=[^\s*])([^*]*?[^\s*])\*(?![\w*])"
)


def as_shown(markdown: str) -> str:
    """``markdown`` as its words read on the page once rendered, squashed (``squash``)."""

    def unmark(match: re.Match[str]) -> str:
        if match.group(1) is not None:
            return match.group(2).strip() or match.group(2)
        return as_inline(match.group(3) if match.group(3) is not None else match.group(4))

    def as_inline(text: str) -> str:
        return _INLINE.sub(unmark, text)

    lines = []
    for line in markdown.split("\n"):
        if re.fullmatch(r"\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*", line) or re.fullmatch(
            r"\s*(```|~~~).*", line
        ):
            continue
        if re.fullmatch(r"\s*\|.*\|\s*", line):
            line = " ".join(
                c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))
            )
        line = re.sub(r"^(\s*)(?:[-*+]|\d+[.)])\s+", "• ", line)
        lines.append(as_inline(line))
    return squash(" ".join(lines))


def thread_messages(view: dict[str, Any]) -> list[tuple[str, str, str, list[str]]]:
    """The messages of ``GET /threads/{id}`` as ``ChatPage.shown_messages`` reads them off the page."""
    return [
        (m["id"], m["role"], as_shown(m.get("content") or ""), [c["id"] for c in m.get("toolCalls") or []])
        for m in view["messages"]
        if m["role"] in ("user", "assistant")
    ]


def thread_cards(view: dict[str, Any], state_key: str | None = None) -> dict[str, dict[str, str]]:
    """The citation cards of ``GET /threads/{id}``'s state as ``ChatPage.shown_cards`` reads them."""
    state = view["state"][state_key] if state_key else view["state"]
    return {
        n: {"title": c["title"], "passage": as_shown(c["passage"])}
        for n, c in state.get("citations", {}).items()
    }
