"""Run and drive the CopilotKit example (examples/copilotkit) for tests.

``example_server()`` starts the example's Node process (CopilotKit's runtime plus the built app)
pointed at a ragstream on loopback; ``CopilotKitPage`` wraps a tab of the app with the few actions
and waits the tests need, and records console problems, page errors and any request that leaves
loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from playwright.async_api import ConsoleMessage, Locator, Page, Request

from tests.browser.chat import ARTIFACTS, ROOT, WAIT_MS, squash

EXAMPLE = ROOT / "examples" / "copilotkit"
SCREENSHOTS = EXAMPLE / "screenshots"
_LISTENING = re.compile(rb"http://127\.0\.0\.1:(\d+)/")
_LOOPBACK = ("http://127.0.0.1:", "ws://127.0.0.1:", "data:", "blob:", "about:")
_ANSWERS = '[data-testid="copilot-assistant-message"] .answer-text'  # the example's answer text
_QUESTIONS = '[data-testid="copilot-user-message"]'
# each question (without its toolbar of versions) and each answer's text, in document order
_TRANSCRIPT = """([questions, answers]) => [...document.querySelectorAll(`${questions}, ${answers}`)].map((el) => {
  const question = el.matches(questions);
  const text = (question ? el.querySelector(".question-text") ?? el : el).innerText.trim();
  return `${question ? "user" : "assistant"}: ${text}`;
})"""
_SHOWN_MESSAGES = """() => [...document.querySelectorAll(
  '[data-testid="copilot-user-message"], [data-testid="copilot-assistant-message"]'
)].map((el) => ({
  id: el.dataset.messageId,
  role: el.dataset.testid === 'copilot-user-message' ? 'user' : 'assistant',
  text: el.querySelector('.question-text, .answer-text')?.innerText ?? '',
  tools: [...el.querySelectorAll('.tool[data-tool-call-id]')].map((t) => t.dataset.toolCallId),
}))"""
_LAST_ANSWER_ID = (
    "[...document.querySelectorAll('.answer-text')].at(-1)"
    "?.closest('[data-testid=\"copilot-assistant-message\"]')?.dataset.messageId"
)


def node() -> str:
    """The ``node`` executable; fails the test with what to install when there is none."""
    found = shutil.which("node")
    if found is None:
        pytest.fail("Node.js is missing: install Node 20 (the CopilotKit example runs on it)", pytrace=False)
    return found


def require_example() -> None:
    """Fail (not skip) when the example is not installed or its build is stale: the test command
    installs and builds it."""
    built = EXAMPLE / "dist" / "index.html"
    problem = None
    if not (EXAMPLE / "node_modules" / "@copilotkit" / "runtime").is_dir():
        problem = "not installed"
    elif not built.is_file():
        problem = "not built"
    else:
        sources = [EXAMPLE / "index.html", EXAMPLE / "vite.config.ts", *(EXAMPLE / "src").rglob("*")]
        if any(path.stat().st_mtime > built.stat().st_mtime for path in sources):
            problem = "built from older sources"
    if problem:
        pytest.fail(
            f"the CopilotKit example is {problem}: run `bash scripts/build-copilotkit-example.sh`",
            pytrace=False,
        )


@dataclass
class ExampleServer:
    """The example's running Node process."""

    url: str
    process: asyncio.subprocess.Process
    output: list[str] = field(default_factory=list)

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    def log(self) -> str:
        return "".join(self.output)


@asynccontextmanager
async def example_server(
    ragstream_url: str, *, state_key: str | None = None, token: str | None = None
) -> AsyncIterator[ExampleServer]:
    """``node server.mjs`` on a free loopback port, its agent pointed at ``ragstream_url``."""
    env = {
        **os.environ,
        "HOST": "127.0.0.1",
        "PORT": "0",
        "RAGSTREAM_AGUI_URL": f"{ragstream_url}/agui",
        "COPILOTKIT_TELEMETRY_DISABLED": "true",
    }
    for name, value in (("RAGSTREAM_STATE_KEY", state_key), ("RAGSTREAM_TOKEN", token)):
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    process = await asyncio.create_subprocess_exec(
        node(),
        "server.mjs",
        cwd=EXAMPLE,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert process.stdout is not None
    lines: list[str] = []
    port: int | None = None
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(30):
            while port is None:
                line = await process.stdout.readline()
                if not line:
                    break
                lines.append(line.decode(errors="replace"))
                if match := _LISTENING.search(line):
                    port = int(match.group(1))
    if port is None:
        process.kill()
        await process.wait()
        pytest.fail("the example's server did not start:\n" + "".join(lines), pytrace=False)
    server = ExampleServer(f"http://127.0.0.1:{port}", process, lines)

    async def drain() -> None:
        assert process.stdout is not None
        while line := await process.stdout.readline():
            server.output.append(line.decode(errors="replace"))

    reader = asyncio.create_task(drain())
    try:
        yield server
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                process.kill()
                await process.wait()
        await reader


async def run_node_tests(test_file: str, env: dict[str, str], timeout: float) -> tuple[int, str]:
    """``node --test <test_file>`` in the example's folder; returns the exit code and the output."""
    process = await asyncio.create_subprocess_exec(
        node(),
        "--test",
        "--test-reporter=spec",
        f"--test-timeout={int(timeout * 1000)}",
        test_file,
        cwd=EXAMPLE,
        env={**os.environ, "COPILOTKIT_TELEMETRY_DISABLED": "true", **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), timeout + 30)
    except TimeoutError:
        process.kill()
        output, _ = await process.communicate()
        return -1, output.decode(errors="replace") + "\n(timed out)"
    return process.returncode or 0, output.decode(errors="replace")


class CopilotKitPage:
    """One tab of the example's app at ``base_url``."""

    def __init__(self, page: Page, base_url: str, name: str) -> None:
        self.page = page
        self.base_url = base_url
        self.name = name
        self.problems: list[str] = []
        self.off_loopback: list[str] = []
        page.set_default_timeout(WAIT_MS)
        page.on("console", self._on_console)
        page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        page.on("request", self._on_request)

    def _on_console(self, message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            self.problems.append(f"console {message.type}: {message.text}")

    def _on_request(self, request: Request) -> None:
        if not request.url.startswith(_LOOPBACK):
            self.off_loopback.append(request.url)

    # ---- navigation ----

    async def open(self, query: str = "") -> None:
        await self.page.goto(f"{self.base_url}/{query}")
        await self.wait_ready()

    async def reload(self) -> None:
        await self.page.reload()
        await self.wait_ready()

    async def wait_ready(self) -> None:
        """The chat is idle, the document list is loaded and the thread restored."""
        await self.page.locator("#filter .doc-list input[type=checkbox]").first.wait_for()
        await self.wait_idle()

    @property
    def thread_id(self) -> str:
        return parse_qs(urlparse(self.page.url).query)["thread"][0]

    async def server_view(self, ragstream_url: str) -> dict[str, Any]:
        """ragstream's ``GET /threads/{id}`` for this page's thread."""
        async with httpx.AsyncClient(base_url=ragstream_url, timeout=10) as client:
            response = await client.get(f"/threads/{self.thread_id}")
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]

    # ---- the conversation ----

    def chat(self) -> Locator:
        return self.page.get_by_test_id("copilot-chat")

    def answers(self) -> Locator:
        """The text of each answer (assistant messages that only call tools have none)."""
        return self.page.locator(_ANSWERS)

    def questions(self) -> Locator:
        return self.page.locator(_QUESTIONS)

    async def type_question(self, text: str) -> None:
        box = self.page.get_by_test_id("copilot-chat-textarea")
        await box.fill(text)
        await box.press("Enter")

    async def ask(self, text: str) -> str:
        """Ask, wait until the run ended with a new answer; returns the answer's text."""
        before = await self.answers().count()
        await self.type_question(text)
        await self.page.wait_for_function(
            "([sel, n]) => document.querySelectorAll(sel).length > n",
            arg=[_ANSWERS, before],
            timeout=WAIT_MS,
        )
        await self.wait_idle()
        await self.wait_answers_drawn()
        return await self.answers().last.inner_text()

    async def wait_answers_drawn(self) -> None:
        """Wait until every answer shows its text: CopilotChat's Markdown renderer (Streamdown, in
        streaming mode) mounts empty and fills in a transition, so a new answer's element can be
        on the page, the run over, and its text not yet drawn."""
        await self.page.wait_for_function(
            "(sel) => [...document.querySelectorAll(sel)].every((e) => e.innerText.trim())",
            arg=_ANSWERS,
            timeout=WAIT_MS,
        )

    async def wait_idle(self) -> None:
        await self.page.locator('[data-testid="copilot-chat"][data-copilot-running="false"]').wait_for()

    async def stop(self) -> None:
        await self.page.get_by_test_id("copilot-send-button").click()

    async def shown_messages(self) -> list[tuple[str, str, str, list[str]]]:
        """The conversation on screen: (message id, role, text, tool call ids) per message shown."""
        shown = await self.page.evaluate(_SHOWN_MESSAGES)
        return [(m["id"], m["role"], squash(m["text"]), m["tools"]) for m in shown]

    async def last_answer_id(self) -> str | None:
        """The message id of the last answer with text."""
        return await self.page.evaluate(f"() => {_LAST_ANSWER_ID}")  # type: ignore[no-any-return]

    async def wait_for_answer_after(self, before: str | None) -> None:
        """Wait until a run ended with another last answer than ``before`` (an id)."""
        await self.page.wait_for_function(
            f"([before]) => {_LAST_ANSWER_ID} !== before && "
            "document.querySelector('[data-testid=\"copilot-chat\"]')?.dataset.copilotRunning === 'false'",
            arg=[before],
            timeout=WAIT_MS,
        )
        await self.wait_answers_drawn()

    async def transcript(self) -> list[str]:
        """What the conversation shows: each question and each answer's text, in order, read in one
        go (the page may redraw its messages after a run, when it shows ragstream's)."""
        return await self.page.evaluate(_TRANSCRIPT, [_QUESTIONS, _ANSWERS])  # type: ignore[no-any-return]

    async def expect_transcript(self, expected: list[str]) -> None:
        """Wait until the conversation shows ``expected`` (after a run the page may still be
        putting ragstream's messages in place); assert it when it does not in ``WAIT_MS``."""
        deadline = asyncio.get_running_loop().time() + WAIT_MS / 1000
        while (shown := await self.transcript()) != expected and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)
        assert shown == expected

    # ---- sources and filter ----

    async def shown_citations(self) -> dict[str, dict[str, str]]:
        """The source cards: index -> title, where, passage."""
        cards: dict[str, dict[str, str]] = {}
        for card in await self.page.locator("#sources .source").all():
            index = await card.get_attribute("data-index")
            assert index is not None
            where = card.locator(".source-where")
            cards[index] = {
                "title": (await card.locator("h3").inner_text()).removeprefix(f"[{index}]").strip(),
                "uri": (await card.locator(".source-uri").inner_text()).strip(),
                "where": (await where.inner_text()).strip() if await where.count() else "",
                "passage": await card.locator(".source-passage").text_content() or "",
            }
        return cards

    def document_checkbox(self, title: str) -> Locator:
        return self.page.locator("#filter").get_by_role("checkbox", name=title, exact=True)

    # ---- evidence ----

    async def screenshot(self, step: str) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / f"copilotkit-{self.name}-{step}.png"
        await self.page.screenshot(path=str(path))
        return path

    def assert_clean(self) -> None:
        assert self.problems == [], "the page logged problems:\n" + "\n".join(self.problems)
        assert self.off_loopback == [], f"the page reached beyond loopback: {self.off_loopback}"


def expected_citations(state: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The cards a page should show for ragstream's state (``citations``), as ``shown_citations``."""
    cards: dict[str, dict[str, str]] = {}
    for index, citation in state.get("citations", {}).items():
        where = [part for part in (citation["locator"], " › ".join(citation["headings"])) if part]
        cards[index] = {
            "title": citation["title"],
            "uri": citation["uri"],
            "where": " · ".join(where),
            "passage": citation["passage"],
        }
    return cards
