"""The chat page (built from frontend/ into server/static) in real headless Chromium.

Each test runs a real server on loopback: the offline extractive model over the sample corpus for
questions, citations, the document filter and reloads; the keyword scenario agent (tests/scenario.py)
for approval interrupts, a slow answer to stop, run errors, a busy thread and bearer tokens. Every
test asserts that the page logged no console error or warning and threw no uncaught error (where an
HTTP error is the point, that the only ones logged are about it). Screenshots go to test-artifacts/.

Needs the built page (`bash scripts/build-frontend.sh`) and Debian's Chromium
(`apt-get install -y chromium`); without either the tests fail with that instruction.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.async_api import Browser, Locator, expect
from pydantic import SecretStr
from starlette.applications import Starlette

from ragstream.app import create_app
from ragstream.routes.static import static_routes
from tests.browser.chat import (
    ChatPage,
    as_shown,
    launch_browser,
    require_built_page,
    squash,
    thread_cards,
    thread_messages,
)
from tests.browser.rendered import check_source_card, rendered_junk
from tests.conftest import scenario_app
from tests.protocol import run_body
from tests.servers import serve

pytestmark = pytest.mark.timeout(180)

QUESTION = "How long are backups kept?"
# Questions the offline model answers citing a PDF, an HTML page and a Markdown document.
CITING_KINDS = (
    QUESTION,
    "What does the Harbor Street Bakery sell?",
    "Which version of Python do I need to install ragstream?",
)
#: Questions whose answers cite a slide deck and a spreadsheet (locators "slide 3", "Plans, rows 2-5").
CITING_OFFICE = (
    "When do offline maps ship in Tessel Maps?",
    "What is the monthly price per user of the Business plan?",
)


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    require_built_page()
    async with launch_browser() as launched:
        yield launched


@pytest.fixture
async def rag_server(scenario_config: Any) -> AsyncIterator[str]:
    """The product app: the offline extractive model answering from the sample corpus."""
    async with serve(create_app(scenario_config)) as url:
        yield url


@pytest.fixture
async def scenario_url(scenario_config: Any) -> AsyncIterator[str]:
    async with serve(scenario_app(scenario_config)) as url:
        yield url


async def open_chat(browser: Browser, url: str, name: str) -> ChatPage:
    return await open_chat_at(browser, url, name, "")


async def open_chat_at(browser: Browser, url: str, name: str, where: str) -> ChatPage:
    """A new tab (its own sessionStorage) on the page at ``url/where``."""
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    chat = ChatPage(await context.new_page(), url, name)
    await chat.open(where)
    return chat


async def test_answer_streams_in_with_citations_that_open_their_source(
    browser: Browser, rag_server: str
) -> None:
    chat = await open_chat(browser, rag_server, "answer")
    page = chat.page
    await expect(page.locator(".welcome")).to_be_visible()

    answer = await chat.ask(QUESTION)
    assert "35 days" in answer
    # the search tool call, with the progress it reported while it ran
    tool = page.locator("#log .tool").last
    await expect(tool.locator(".tool-name")).to_have_text("search")
    await expect(tool.locator(".tool-args")).to_contain_text(QUESTION)
    await expect(tool.locator(".tool-progress")).to_contain_text("Found")
    await expect(tool.locator(".tool-status")).to_have_text("done")
    assert chat.thread_id, "the thread id went into the URL once the server saved the thread"
    await expect(page.locator("#chat-title")).to_have_text(QUESTION)
    await expect(page.locator("#threads a[aria-current=page]")).to_have_text(QUESTION)

    # every citation marker is a button naming a source of the thread state
    state = (await chat.server_view())["state"]
    buttons = chat.answers().last.locator("button.cite")
    assert await buttons.count() >= 2
    markers = [await b.get_attribute("data-cite") for b in await buttons.all()]
    assert all(m in state["citations"] for m in markers)
    await expect(page.locator("#sources .source")).to_have_count(len(state["citations"]))
    # a sentence's full stop wraps with its markers, never onto a line of its own
    groups = await chat.answers().last.locator(".cites").all_inner_texts()
    assert any(re.fullmatch(r"(\[\d+\])+\.", text) for text in groups), groups

    # pressing one opens its card: the right title, where it is, and the passage
    target = markers[-1]
    assert target is not None
    citation = state["citations"][target]
    await buttons.nth(len(markers) - 1).click()
    card = page.locator(f"#source-{target}")
    await expect(card).to_have_class("source is-active")
    await expect(card).to_be_focused()
    await expect(card).to_be_in_viewport()
    await expect(card.locator("h3")).to_contain_text(citation["title"])
    shown = await card.locator(".source-passage > *").all_inner_texts()
    assert squash(" ".join(shown)) == as_shown(citation["passage"])
    if citation["page"] is not None:
        await expect(card.locator(".source-where")).to_contain_text(f"page {citation['page']}")
    await expect(page.locator("#sources .source.is-active")).to_have_count(1)
    await chat.screenshot("citation-open")

    # another marker moves the highlight
    await buttons.first.click()
    await expect(page.locator(f"#source-{markers[0]}")).to_have_class("source is-active")
    await expect(page.locator("#sources .source.is-active")).to_have_count(1)
    chat.assert_clean_console()


async def test_document_filter_restricts_the_next_answer(browser: Browser, rag_server: str) -> None:
    chat = await open_chat(browser, rag_server, "filter")
    page = chat.page

    unfiltered = await chat.ask(QUESTION)
    assert "35 days" in unfiltered  # the operations handbook's answer
    assert "Kiteline Cloud Operations Handbook" in await chat.cited_titles()

    await chat.add_filter_name("deployment")
    summary = page.locator("#filter .filter-summary")
    await expect(summary).to_contain_text("Answers use only: deployment")
    await expect(summary).to_contain_text("Applies from your next question")
    await chat.screenshot("filter-set")

    filtered = await chat.ask(QUESTION)
    assert "seven daily snapshots" in filtered  # the deployment guide's answer
    assert "35 days" not in filtered
    titles = await chat.cited_titles()
    assert titles
    assert set(titles) == {"Deploying ragstream"}
    await expect(summary).not_to_contain_text("Applies from your next question")
    # the earlier, unfiltered answer is unchanged
    assert "35 days" in await chat.answers().first.inner_text()

    view = await chat.server_view()
    assert view["state"]["document_filter"] == ["deployment"]
    last_search = max(view["state"]["searches"].values(), key=lambda s: s["seq"])
    assert last_search["documents"] == ["deployment"]
    assert {h["title"] for h in last_search["hits"]} == {"Deploying ragstream"}

    # a checkbox edits the same list; clearing it is sent with the next question
    await chat.document_checkbox("Deploying ragstream").check()
    await expect(summary).to_contain_text("deployment, Deploying ragstream")
    await page.locator("#filter button.link", has_text="Clear").click()
    await expect(summary).to_contain_text("Answers use all documents")
    assert "35 days" in await chat.ask(QUESTION)
    assert (await chat.server_view())["state"]["document_filter"] == []
    await chat.screenshot("filter-cleared")
    chat.assert_clean_console()


async def test_reload_restores_the_thread(browser: Browser, rag_server: str) -> None:
    chat = await open_chat(browser, rag_server, "reload")
    page = chat.page
    await chat.document_checkbox("Deploying ragstream").check()
    answer = await chat.ask(QUESTION)
    thread_id = chat.thread_id
    # what a reload must show again (live tool progress is not part of the saved thread)
    texts = page.locator("#log article.message-user, #log article.message-assistant:not(.message-tools)")
    tools = page.locator("#log .tool-head")
    messages_before = await texts.all_inner_texts()
    tools_before = await tools.all_inner_texts()
    assert len(messages_before) == 2
    assert len(tools_before) == 1
    sources_before = await page.locator("#sources .source h3").all_inner_texts()

    await chat.reload()
    assert chat.thread_id == thread_id
    await expect(texts).to_have_count(len(messages_before))
    assert await texts.all_inner_texts() == messages_before
    assert await tools.all_inner_texts() == tools_before
    assert await chat.answers().last.inner_text() == answer
    assert await page.locator("#sources .source h3").all_inner_texts() == sources_before
    await expect(chat.document_checkbox("Deploying ragstream")).to_be_checked()
    await expect(page.locator("#filter .filter-summary")).to_have_text(
        "Answers use only: Deploying ragstream. Clear"
    )
    await expect(page.locator("#threads a[aria-current=page]")).to_have_text(QUESTION)
    await chat.screenshot("restored")

    # the restored citations work, and the thread continues where it was
    await chat.answers().last.locator("button.cite").first.click()
    await expect(page.locator("#sources .source.is-active")).to_have_count(1)
    follow_up = await chat.ask("How do I restore a backup?")
    assert follow_up
    view = await chat.server_view()
    assert [m["content"] for m in view["messages"] if m["role"] == "user"] == [
        QUESTION,
        "How do I restore a backup?",
    ]
    assert view["state"]["document_filter"] == ["Deploying ragstream"]

    # a new chat starts empty; the old one is a link away
    await page.locator("#new-chat").click()
    await expect(page.locator(".welcome")).to_be_visible()
    await expect(page.locator("#sources .source")).to_have_count(0)
    await page.locator("#threads a", has_text=QUESTION).click()
    await expect(texts).to_have_count(4)
    assert chat.thread_id == thread_id

    # deleting takes a second press; the page then starts a new chat
    delete = page.locator("#threads li.current button.delete")
    await delete.click()
    await expect(delete).to_have_text("Delete?")
    await delete.click()
    await expect(page.locator(".welcome")).to_be_visible()
    await expect(page.locator("#threads li")).to_have_text(["No saved chats yet."])
    assert chat.thread_id is None
    await expect(page.locator("#question")).to_be_focused()  # not lost to the page with the button
    chat.assert_clean_console()


async def test_tabs_of_one_chat_follow_each_other_and_a_deleted_chat_is_not_made_again(
    browser: Browser, rag_server: str
) -> None:
    """Two tabs of one browser on one chat: a turn asked in one shows in the other, and a chat deleted
    in one is left by the other for a new chat, so its next question does not re-create the deleted
    chat (under its old id, without its citations)."""
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    first = ChatPage(await context.new_page(), rag_server, "tabs-first")
    await first.open()
    await first.ask(QUESTION)
    thread_id = first.thread_id
    assert thread_id
    second = ChatPage(await context.new_page(), rag_server, "tabs-second")
    await second.open(f"#thread={thread_id}")
    await expect(second.answers()).to_have_count(1)

    # a turn asked in the first tab shows in the second (it would otherwise branch the chat)
    await first.ask("How do I restore a backup?")
    await expect(second.answers()).to_have_count(2)
    assert await second.shown_messages() == await first.shown_messages()
    assert await second.shown_messages() == thread_messages(await first.server_view())
    assert await second.shown_cards() == thread_cards(await first.server_view())

    # a turn asked on another device: the first tab, shown again, reads the chat once and shows it
    history = (await first.server_view())["messages"]
    asked = {"id": "u-elsewhere", "role": "user", "content": CITING_KINDS[1]}
    async with httpx.AsyncClient(base_url=rag_server, timeout=30) as client:
        body = run_body(thread_id, "elsewhere-r1", None, messages=[*history, asked])
        assert (await client.post("/agui", json=body)).status_code == 200
    reads: list[str] = []
    first.page.on(
        "request",
        lambda r: reads.append(r.url) if urlsplit(r.url).path == f"/threads/{thread_id}" else None,
    )
    await first.page.evaluate("() => document.dispatchEvent(new Event('visibilitychange'))")
    await expect(first.answers()).to_have_count(3)
    assert await first.shown_messages() == thread_messages(await first.server_view())
    assert len(reads) == 1, reads

    # deleted in the second tab: the first leaves it, says so, and its next question is a new chat
    await second.page.bring_to_front()
    await second.page.locator("#threads li.current").hover()  # its delete button shows on hover
    delete = second.page.locator("#threads li.current button.delete")
    await delete.click()
    await delete.click()
    await expect(second.page.locator(".welcome")).to_be_visible()
    await first.page.bring_to_front()
    await expect(first.answers()).to_have_count(0)
    await expect(first.page.locator("#log .notice p")).to_have_text(
        "This chat was deleted in another tab; this is a new one."
    )
    assert first.thread_id is None
    await expect(first.page.locator("#threads li")).to_have_text(["No saved chats yet."])
    await first.ask(QUESTION)
    assert first.thread_id not in (None, thread_id)
    async with httpx.AsyncClient(base_url=rag_server, timeout=10) as client:
        assert (await client.get(f"/threads/{thread_id}")).status_code == 404
        listed = (await client.get("/threads")).json()["threads"]
    assert [t["threadId"] for t in listed] == [first.thread_id]
    await expect(second.page.locator("#threads a")).to_have_text([QUESTION])

    # deleted on another device: the tab finds out when it is shown again
    async with httpx.AsyncClient(base_url=rag_server, timeout=10) as client:
        assert (await client.delete(f"/threads/{first.thread_id}")).status_code == 204
    await first.page.evaluate("() => document.dispatchEvent(new Event('visibilitychange'))")
    await expect(first.page.locator("#log .notice p")).to_have_text(
        "This chat was deleted elsewhere; this is a new one."
    )
    assert first.thread_id is None
    await expect(first.page.locator("#threads li")).to_have_text(["No saved chats yet."])
    assert first.problems == [
        "console error: Failed to load resource: the server responded with a status of 404 (Not Found)"
    ]
    second.assert_clean_console()
    await context.close()


async def reload_and_stop(chat: ChatPage, streaming: Locator, question: str) -> None:
    """Reload while an answer streams, then stop the run the reloaded page picked up: its question,
    shown above the forming answer, is not saved, so the notice names it and the box offers it."""
    await chat.reload()
    await expect(streaming).to_contain_text("tok10")
    await expect(chat.page.locator("#log article.message-user").last).to_contain_text(question)
    await chat.page.locator("#stop").click()
    await expect(chat.page.locator("#log .notice p").first).to_have_text(
        f"The run under way when this page opened was stopped; its turn (“{question}”) was not saved."
    )
    await chat.wait_idle()
    await expect(chat.page.locator("#question")).to_have_value(question)


async def test_a_reload_mid_answer_follows_the_run_to_its_end(browser: Browser, scenario_config: Any) -> None:
    """A reload while an answer streams loses nothing: the reloaded page picks the run up (AG-UI's
    connect, over the run's event log), shows the answer forming, then the thread as saved, with
    the turn's question; a run it picked up can be stopped like its own."""
    async with serve(scenario_app(scenario_config)) as url:
        chat = await open_chat(browser, url, "reload-mid-run")
        page = chat.page
        await chat.ask("nightly backups")  # saved: the thread's id is in the URL from here on
        streaming = page.locator("#log article.message-assistant").last

        await chat.type_question("slow answer please")
        await expect(streaming).to_contain_text("tok3")
        await chat.reload()
        await expect(page.locator("#stop")).to_be_visible()
        await expect(page.locator("#log")).to_have_attribute("aria-busy", "true")
        await expect(streaming).to_contain_text("tok150")  # forming on the reloaded page
        # under the question it answers (the run's RUN_STARTED names it), while it still forms
        busy, asked = await page.evaluate(
            """() => [document.querySelector('#log').getAttribute('aria-busy'),
                      [...document.querySelectorAll('#log article.message-user')].map((a) => a.textContent)]"""
        )
        assert busy == "true" and len(asked) == 2 and "slow answer please" in asked[-1], (busy, asked)
        await chat.screenshot("following")
        await chat.wait_idle()
        view = await chat.server_view()
        assert view["activeRunId"] is None
        users = [m["content"] for m in view["messages"] if m["role"] == "user"]
        assert users == ["nightly backups", "slow answer please"]
        assert "tok299" in view["messages"][-1]["content"]
        assert await chat.shown_messages() == thread_messages(view)
        await expect(page.locator("#log .notice")).to_have_count(0)

        await chat.type_question("slow again")
        await expect(streaming).to_contain_text("tok3")
        await reload_and_stop(chat, streaming, "slow again")
        after = await chat.server_view()
        assert after["messages"] == view["messages"]
        assert after["activeRunId"] is None
        chat.assert_clean_console()


async def test_a_reload_during_a_new_chats_first_answer_follows_it(
    browser: Browser, scenario_config: Any
) -> None:
    """A new chat's id is in the URL from its first run on, so a reload during the first answer
    picks the run up as it would any other; stopped instead, the chat was never saved and the
    page says so, with the URL cleared and nothing listed."""
    async with serve(scenario_app(scenario_config)) as url:
        chat = await open_chat(browser, url, "reload-first-run")
        page = chat.page
        streaming = page.locator("#log article.message-assistant").last

        await chat.type_question("slow answer please")
        await expect(streaming).to_contain_text("tok3")
        first = chat.thread_id
        assert first is not None  # in the URL while the first run goes on
        await chat.reload()
        await expect(page.locator("#stop")).to_be_visible()
        await expect(streaming).to_contain_text("tok150")
        busy, asked = await page.evaluate(
            """() => [document.querySelector('#log').getAttribute('aria-busy'),
                      [...document.querySelectorAll('#log article.message-user')].map((a) => a.textContent)]"""
        )
        assert busy == "true" and len(asked) == 1 and "slow answer please" in asked[0], (busy, asked)
        await chat.wait_idle()
        assert chat.thread_id == first
        view = await chat.server_view()
        assert view["saved"] is True and view["activeRunId"] is None
        assert [m["content"] for m in view["messages"] if m["role"] == "user"] == ["slow answer please"]
        assert await chat.shown_messages() == thread_messages(view)
        await expect(page.locator("#threads a[aria-current=page]")).to_have_text("slow answer please")
        await expect(page.locator("#log .notice")).to_have_count(0)

        await page.locator("#new-chat").click()
        await expect(page.locator(".welcome")).to_be_visible()
        await chat.type_question("slow again")
        await expect(streaming).to_contain_text("tok3")
        second = chat.thread_id
        assert second is not None and second != first
        await reload_and_stop(chat, streaming, "slow again")
        assert chat.thread_id is None  # never saved: a new chat again
        await expect(page.locator("#threads li")).to_have_count(1)  # only the first chat
        async with httpx.AsyncClient(base_url=url) as client:
            assert (await client.get(f"/threads/{second}")).status_code == 404
        chat.assert_clean_console()


async def test_older_chats_are_a_button_away(browser: Browser, scenario_config: Any) -> None:
    """The sidebar lists a page of chats (100) and fetches older ones on request, through the
    listing's cursor, until none are left."""
    async with serve(scenario_app(scenario_config)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            for n in range(103):  # saved threads, oldest first (a run with no messages saves one)
                response = await http.post("/agui", json=run_body(f"old-{n:03d}", "r", None))
                assert response.status_code == 200
        chat = await open_chat(browser, url, "older-chats")
        page = chat.page
        links = page.locator("#threads li a")
        await expect(links).to_have_count(100)
        assert await links.first.get_attribute("href") == "#thread=old-102"  # the newest first
        more = page.get_by_role("button", name="Show older chats")
        await more.click()
        await expect(links).to_have_count(103)
        await expect(more).to_have_count(0)
        assert await links.last.get_attribute("href") == "#thread=old-000"
        chat.assert_clean_console()


async def test_on_a_phone_a_long_chat_list_leaves_the_conversation_in_the_first_screen(
    browser: Browser, scenario_url: str
) -> None:
    async with httpx.AsyncClient(base_url=scenario_url, timeout=30) as http:
        for n in range(40):  # saved threads (a run with no messages saves one)
            assert (await http.post("/agui", json=run_body(f"chat-{n:02d}", "r", None))).status_code == 200
    context = await browser.new_context(viewport={"width": 390, "height": 800})
    chat = ChatPage(await context.new_page(), scenario_url, "phone-chat-list")
    await chat.open()
    page = chat.page
    links = page.locator("#threads li a")
    await expect(links).to_have_count(40)
    await page.evaluate("() => window.scrollTo(0, 0)")
    # the list scrolls within itself: the conversation and the question box start on the first screen
    log_top = await page.locator("#log").evaluate("(e) => e.getBoundingClientRect().top")
    assert log_top < 800 * 0.6, log_top
    await links.last.scroll_into_view_if_needed()
    await expect(links.last).to_be_in_viewport(ratio=1)  # every chat is still reachable
    await links.last.click()
    await expect(page.locator("#threads a[aria-current=page]")).to_have_attribute("href", "#thread=chat-00")
    chat.assert_clean_console()
    await context.close()


async def test_on_a_desktop_only_the_conversation_scrolls(browser: Browser, scenario_url: str) -> None:
    """A long chat in a window of 1280 x 800: the page itself never scrolls; the conversation does,
    inside its column, so the question box and the chat list stay on the screen."""
    async with httpx.AsyncClient(base_url=scenario_url, timeout=30) as http:
        for n in range(30):
            assert (await http.post("/agui", json=run_body(f"desk-{n:02d}", "r", None))).status_code == 200
    chat = await open_chat(browser, scenario_url, "desktop-scroll")
    page = chat.page
    for question in ("nightly backups", "backup schedule", "nightly backups again", "backup schedule again"):
        await chat.ask(question)
    sizes = await page.evaluate(
        "() => [document.scrollingElement.scrollHeight, window.innerHeight,"
        " document.querySelector('#log').scrollHeight, document.querySelector('#log').clientHeight]"
    )
    page_height, window_height, log_content, log_box = sizes
    assert page_height <= window_height, sizes
    assert log_content > log_box, sizes  # the conversation is longer than its column, and scrolls
    await expect(page.locator("#question")).to_be_in_viewport(ratio=1)
    await expect(page.locator("#new-chat")).to_be_in_viewport(ratio=1)
    chat.assert_clean_console()
    await page.context.close()


@pytest.fixture
async def keyed_server(scenario_config: Any) -> AsyncIterator[str]:
    """The product app with its state under one key and a one-card emit window."""
    scenario_config.state_key = "ragstream"
    scenario_config.citations_emitted = 1
    async with serve(create_app(scenario_config)) as url:
        yield url


async def test_a_state_key_and_cards_beyond_the_emit_window(browser: Browser, keyed_server: str) -> None:
    chat = await open_chat(browser, keyed_server, "keyed")
    page = chat.page
    first = await chat.ask(QUESTION)
    assert "35 days" in first
    first_titles = await chat.cited_titles(0)
    await chat.add_filter_name("observatory")
    second = await chat.ask("When does the Northwind Observatory open to visitors?")
    assert second and "35 days" not in second

    view = await chat.server_view()
    assert list(view["state"]) == ["ragstream"]  # everything under the key
    state = view["state"]["ragstream"]
    assert state["document_filter"] == ["observatory"]  # the page wrote its filter under the key
    assert len(state["citations"]) == 1  # the window: only the latest card travels with runs

    # the first answer's markers still resolve: the page reads those cards from the thread
    buttons = chat.answers().first.locator("button.cite")
    assert await chat.cited_titles(0) == first_titles
    marker = await buttons.first.get_attribute("data-cite")
    assert marker not in state["citations"]
    await buttons.first.click()
    active = page.locator("#sources .source.is-active")
    await expect(active).to_have_count(1)
    await expect(active.locator("h3")).to_have_text(f"[{marker}] {first_titles[0]}")
    await chat.screenshot("keyed-old-card")
    chat.assert_clean_console()


async def test_source_cards_of_a_pdf_a_markdown_and_an_html_document(
    browser: Browser, scenario_config: Any
) -> None:
    """Each card shows what its format has (a page, a slide, a sheet's rows, headings) and links the original; a PDF's link
    opens at the page. Nothing on the page reads undefined, null, NaN or [object Object]."""
    scenario_config.citations_emitted = 2  # the first answer's cards are then read from the thread
    async with serve(create_app(scenario_config)) as url, httpx.AsyncClient(base_url=url) as api:
        chat = await open_chat(browser, url, "card-kinds")
        page = chat.page
        for question in (*CITING_KINDS, *CITING_OFFICE):
            assert await chat.ask(question)
            await chat.cited_titles()  # every marker is a button: cards beyond the window were read
        assert await chat.cited_titles(0)
        await chat.screenshot("card-kinds")
        assert await rendered_junk(page) == []
        shown = page.locator("#sources .source")
        kinds = set()
        for n in [await card.get_attribute("data-citation") for card in await shown.all()]:
            item = await api.get(f"/threads/{chat.thread_id}/state/citations/{n}")
            citation = item.json()["value"]
            card = page.locator(f"#source-{n}")
            link = card.locator("a.source-open")
            kinds.add(await check_source_card(card, link, citation, api, "/documents"))
        assert kinds == {"pdf", "md", "html", "pptx", "xlsx"}
        cards = await shown.all_inner_texts()
        await chat.reload()  # the restored thread renders the same cards, as cleanly
        await chat.cited_titles(0)
        await expect(shown).to_have_count(len(cards))
        assert await shown.all_inner_texts() == cards
        assert await rendered_junk(page) == []
        chat.assert_clean_console()


async def test_approval_interrupts_approve_edit_and_deny(browser: Browser, scenario_url: str) -> None:
    chat = await open_chat(browser, scenario_url, "approval")
    page = chat.page
    approval = page.locator("#approvals .approval")

    # approve as proposed
    await chat.type_question("archive first note")
    await expect(approval).to_have_count(1)
    await expect(approval.locator(".approval-message")).to_contain_text("archive_note")
    await expect(approval.locator(".approval-args")).to_contain_text('"note": "first note"')
    await expect(page.locator("#log .tool-status").last).to_have_text("waiting for your approval")
    await expect(page.locator("#send")).to_be_disabled()
    await chat.screenshot("approval-pending")
    before = await chat.answers().count()
    await approval.get_by_role("button", name="Approve", exact=True).click()
    await chat.wait_for_new_answer(before)
    await expect(chat.answers().last).to_have_text("Archived first note.")
    await expect(page.locator("#approvals")).to_be_hidden()
    assert (await chat.server_view())["state"]["archived"] == ["first note"]

    # edit the arguments: invalid JSON is refused in place, valid JSON is sent as editedArgs
    await chat.type_question("archive second note")
    await approval.get_by_role("button", name="Edit arguments").click()
    editor = approval.locator("textarea")
    await expect(editor).to_be_focused()
    assert '"note": "second note"' in await editor.input_value()
    await editor.fill("{not json")
    await approval.get_by_role("button", name="Approve with these arguments").click()
    await expect(approval.locator(".field-error")).to_contain_text("not valid JSON")
    await editor.fill('{"note": "edited note"}')
    before = await chat.answers().count()
    await approval.get_by_role("button", name="Approve with these arguments").click()
    await chat.wait_for_new_answer(before)
    await expect(chat.answers().last).to_have_text("Archived edited note.")
    await expect(page.locator("#log .tool-status").last).to_have_text("done, with your edited arguments")
    # the call shows the arguments it ran with; the model's proposal is its tooltip
    await expect(page.locator("#log .tool-args").last).to_have_text("“edited note”")
    await expect(page.locator("#log .tool-args").last).to_have_attribute("title", "Proposed: “second note”")
    view = await chat.server_view()
    assert view["state"]["archived"] == ["first note", "edited note"]
    edited_call = [c["id"] for m in view["messages"] for c in m.get("toolCalls") or []][-1]
    assert view["editedArgs"] == {edited_call: {"note": "edited note"}}

    # a pending approval survives a reload; deny it with a reason
    await chat.type_question("archive third note")
    await expect(approval).to_have_count(1)
    await chat.reload()
    await expect(approval).to_have_count(1)
    await expect(approval.locator(".approval-args")).to_contain_text('"note": "third note"')
    await expect(page.locator("#send")).to_be_disabled()
    await approval.get_by_role("button", name="Deny").click()
    await approval.locator("input.deny-reason").fill("keep it")
    before = await chat.answers().count()
    await approval.locator(".only-deny").get_by_role("button", name="Deny").click()
    await chat.wait_for_new_answer(before)
    await expect(chat.answers().last).to_contain_text("Not archived: keep it")
    statuses = page.locator("#log .tool-status")
    await expect(statuses).to_have_text(["done", "done, with your edited arguments", "denied"])
    view = await chat.server_view()
    assert view["state"]["archived"] == ["first note", "edited note"]  # the denied call never ran
    assert view["interrupts"] == []
    await expect(page.locator("#send")).to_be_enabled()
    await chat.screenshot("approval-done")
    # after a reload the saved thread says the same: which call ran with edited arguments, which was denied
    await chat.reload()
    await expect(statuses).to_have_text(["done", "done, with your edited arguments", "denied"])
    await expect(page.locator("#log .tool-args")).to_have_text(
        ["“first note”", "“edited note”", "“third note”"]
    )
    chat.assert_clean_console()


async def test_leaving_an_approvals_argument_editor_or_deny_reason_gives_the_focus_back(
    browser: Browser, scenario_url: str
) -> None:
    """Cancel (or Escape) in an approval card's argument editor or deny reason goes back to the
    card's choice with the focus on the button that opened it, not on the page's body."""
    chat = await open_chat(browser, scenario_url, "approval-focus")
    page = chat.page
    await chat.type_question("archive the old note")
    card = page.locator("#approvals .approval")
    choice = card.locator(".approval-actions.only-choose")
    edit = choice.get_by_role("button", name="Edit arguments")
    deny = choice.get_by_role("button", name="Deny")
    editor = card.get_by_role("textbox", name="Tool arguments (JSON)")
    reason = card.get_by_role("textbox", name="Reason for denying (optional)")

    await edit.click()
    await expect(editor).to_be_focused()
    await card.locator(".only-edit").get_by_role("button", name="Cancel").click()
    await expect(edit).to_be_focused()
    await page.keyboard.press("Enter")  # by keyboard: Enter opens the editor, Escape leaves it
    await expect(editor).to_be_focused()
    await page.keyboard.press("Escape")
    await expect(editor).to_be_hidden()
    await expect(edit).to_be_focused()

    await deny.click()
    await expect(reason).to_be_focused()
    await card.locator(".only-deny").get_by_role("button", name="Cancel").click()
    await expect(deny).to_be_focused()
    await page.keyboard.press("Enter")
    await expect(reason).to_be_focused()
    await page.keyboard.press("Escape")
    await expect(reason).to_be_hidden()
    await expect(deny).to_be_focused()

    await card.get_by_role("button", name="Approve").click()
    await chat.wait_idle("document.querySelector('#approvals').hidden")
    chat.assert_clean_console()


async def test_an_approval_answered_in_another_window_is_not_answered_again(
    browser: Browser, scenario_url: str
) -> None:
    """Two windows show one pending approval; one denies it. The other's "Approve" is refused by the
    server (the interrupt is no longer pending), and that window then shows the call as denied, the
    way it went, not as approved."""
    first = await open_chat(browser, scenario_url, "approval-first")
    await first.type_question("archive shared note")
    first_card = first.page.locator("#approvals .approval")
    await expect(first_card).to_have_count(1)
    second = await open_chat_at(browser, scenario_url, "approval-second", f"#thread={first.thread_id}")
    second_card = second.page.locator("#approvals .approval")
    await expect(second_card).to_have_count(1)

    await first_card.get_by_role("button", name="Deny").click()
    await first_card.locator("input.deny-reason").fill("not now")
    before = await first.answers().count()
    await first_card.locator(".only-deny").get_by_role("button", name="Deny").click()
    await first.wait_for_new_answer(before)

    await second_card.get_by_role("button", name="Approve", exact=True).click()
    await expect(second.page.locator("#log .notice p")).to_have_text(
        "That approval was already answered in another tab or window; this is how it went."
    )
    await expect(second.page.locator("#log .tool-status")).to_have_text(["denied"])
    await expect(second.answers().last).to_contain_text("Not archived: not now")
    await expect(second.page.locator("#approvals")).to_be_hidden()
    await expect(second.page.locator("#send")).to_be_enabled()
    await second.screenshot("answered-elsewhere")
    view = await second.server_view()
    assert view["state"]["archived"] == [] and view["interrupts"] == []
    assert await second.shown_messages() == await first.shown_messages() == thread_messages(view)
    first.assert_clean_console()
    assert second.problems, "expected the 409 to be logged"
    assert all("409" in p for p in second.problems), second.problems


async def test_other_chats_wait_for_the_answer_in_progress_and_say_so(
    browser: Browser, scenario_url: str
) -> None:
    """One answer at a time per page: while one streams, another chat or a new one says why it does
    not open (on hover, and once clicked), rather than doing nothing."""
    async with httpx.AsyncClient(base_url=scenario_url, timeout=30) as http:
        assert (
            await http.post("/agui", json=run_body("other-chat", "r", "nightly backups"))
        ).status_code == 200
    chat = await open_chat(browser, scenario_url, "busy-switch")
    page = chat.page
    await chat.type_question("slow answer please")
    await expect(page.locator("#log article.message-assistant").last).to_contain_text("tok3")
    other = page.locator('#threads a[href="#thread=other-chat"]')
    await expect(other).to_have_attribute("aria-disabled", "true")
    await expect(other).to_have_attribute("title", re.compile("Stop the answer in progress"))
    await expect(page.locator("#new-chat")).to_have_attribute(
        "title", re.compile("Stop the answer in progress")
    )
    await other.click(force=True)  # a person can click it (Playwright waits for aria-disabled to go)
    await expect(page.locator("#banner")).to_contain_text(
        "Stop the answer in progress before switching chats."
    )
    assert chat.thread_id != "other-chat"
    await page.locator("#stop").click()
    await chat.wait_idle()
    await expect(other).not_to_have_attribute("aria-disabled", "true")
    await expect(page.locator("#new-chat")).not_to_have_attribute("title", re.compile("Stop"))
    chat.assert_clean_console()
    await page.context.close()


async def test_stop_ends_the_run_as_cancelled_and_keeps_the_thread(
    browser: Browser, scenario_url: str
) -> None:
    chat = await open_chat(browser, scenario_url, "stop")
    page = chat.page
    first = await chat.ask("nightly backups")
    assert first.startswith("Found it in")
    saved = await chat.server_view()
    articles = page.locator("#log article")
    shown = await articles.all_inner_texts()

    await chat.type_question("slow answer please")
    streaming = page.locator("#log article.message-assistant").last
    await expect(streaming).to_contain_text("tok3")
    await expect(page.locator("#stop")).to_be_visible()
    await expect(page.locator("#log")).to_have_attribute("aria-busy", "true")
    partial = await streaming.inner_text()
    await expect(streaming).not_to_have_text(partial)  # it is still streaming in
    await chat.screenshot("streaming")
    await page.locator("#stop").click()

    notice = page.locator("#log .notice")
    await expect(notice.locator("p").first).to_have_text(
        "Stopped. This turn (“slow answer please”) was not saved."
    )
    await chat.wait_idle()
    stops = [r for r in chat.requests if r[0] == "POST" and r[1].endswith("/stop")]
    assert len(stops) == 1
    assert stops[0][2] == 202
    assert f"/threads/{chat.thread_id}/runs/" in stops[0][1]
    # what was streamed is kept aside, the thread shows its last saved state
    await notice.locator("summary").click()
    await expect(notice.locator(".notice-detail")).to_contain_text("tok3")
    await expect(articles).to_have_count(len(shown))
    assert await articles.all_inner_texts() == shown
    await expect(page.locator("#question")).to_have_value("slow answer please")
    view = await chat.server_view()
    assert view["activeRunId"] is None
    assert view["messages"] == saved["messages"]
    assert view["state"] == saved["state"]
    await chat.screenshot("stopped")

    # the thread goes on from there
    assert (await chat.ask("nightly backups again")).startswith("Found it in")
    users = [m["content"] for m in (await chat.server_view())["messages"] if m["role"] == "user"]
    assert users == ["nightly backups", "nightly backups again"]
    chat.assert_clean_console()


async def test_errors_are_shown_and_the_page_stays_usable(browser: Browser, scenario_url: str) -> None:
    chat = await open_chat(browser, scenario_url, "errors")
    page = chat.page
    await chat.ask("nightly backups")
    saved = await chat.server_view()

    # RUN_ERROR: the server's (sanitised) message in the conversation, the thread unchanged
    await chat.type_question("fail now")
    notice = page.locator("#log .notice-error").last
    await expect(notice).to_contain_text("internal error (reference")
    await expect(notice).to_contain_text("This turn (“fail now”) was not saved.")
    await chat.wait_idle()
    assert "hunter2" not in await page.content()
    await expect(page.locator("#question")).to_have_value("fail now")
    assert (await chat.server_view())["messages"] == saved["messages"]
    chat.assert_clean_console()  # a RUN_ERROR is an answer, not a page error

    # HTTP 409: a second tab asks while this one is answering
    other = await open_chat_at(browser, scenario_url, "errors-other", f"#thread={chat.thread_id}")
    await expect(other.answers()).to_have_count(1)
    await chat.type_question("slow answer please")
    await expect(page.locator("#log article.message-assistant").last).to_contain_text("tok2")
    await other.type_question("nightly backups")
    busy = other.page.locator("#log .notice-error")
    await expect(busy).to_contain_text("is busy with another run")
    await other.wait_idle()
    await expect(other.page.locator("#question")).to_have_value("nightly backups")
    await other.screenshot("busy")
    # the browser reports the refused request, and @ag-ui/client logs the rejected run
    assert other.problems, "expected the 409 to be logged"
    assert all("409" in p for p in other.problems), other.problems

    await page.locator("#stop").click()
    await chat.wait_idle("document.querySelector('#log .notice-info') !== null")
    assert (await other.ask("nightly backups")).startswith("Found it in")
    chat.assert_clean_console()


async def test_a_failed_tool_call_shows_as_failed_before_and_after_a_reload(
    browser: Browser, scenario_url: str
) -> None:
    chat = await open_chat(browser, scenario_url, "failed-tool")
    page = chat.page
    await chat.ask("call no_such_tool {}")
    view = await chat.server_view()
    failed = [m for m in view["messages"] if m["role"] == "tool" and m.get("error")]
    assert len(failed) == 1, view["messages"]
    call = failed[0]["toolCallId"]
    status = page.locator(f'#log .tool[data-tool-call-id="{call}"] .tool-status')
    await expect(status).to_have_text("did not complete")  # as the run ends, not only after a reload
    shown = await chat.shown_messages()
    assert shown == thread_messages(view)

    await chat.reload()
    await expect(status).to_have_text("did not complete")
    assert await chat.shown_messages() == shown
    chat.assert_clean_console()


async def test_a_search_that_finds_one_passage_says_so_in_the_singular(
    browser: Browser, scenario_url: str
) -> None:
    chat = await open_chat(browser, scenario_url, "one-passage")
    answer = await chat.ask('call search {"query": "nightly backups", "limit": 1}')
    assert answer.startswith("Found it in")
    await expect(chat.page.locator("#log .tool .tool-progress")).to_have_text("Found 1 passage")
    chat.assert_clean_console()


async def test_an_edit_that_fails_opens_again_with_the_text_typed(
    browser: Browser, scenario_url: str
) -> None:
    chat = await open_chat(browser, scenario_url, "failed-edit")
    page = chat.page
    await chat.ask("nightly backups")
    await chat.ask("log retention")
    saved = await chat.server_view()
    second = page.locator("#log article.message-user").nth(1)
    await second.get_by_role("button", name="Edit this question").click()
    editor = page.locator("#log .edit-form textarea")
    typed = "fail: a long question, carefully written, about how long the audit logs of eu-west are kept"
    await editor.fill(typed)
    await page.locator("#log .edit-form").get_by_role("button", name="Send").click()

    await expect(page.locator("#log .notice-error")).to_contain_text("was not saved.")
    await chat.wait_idle()
    assert (await chat.server_view())["messages"] == saved["messages"]
    # the question is in its editor again, whole, where it was; the question box stays empty
    await expect(editor).to_have_count(1)
    await expect(editor).to_have_value(typed)
    await expect(editor).to_be_focused()
    await expect(page.locator("#log article.message-user").nth(1)).to_have_class(
        re.compile("message-editing")
    )
    await expect(page.locator("#question")).to_have_value("")

    # and it can be sent from there
    await editor.fill("nightly backups, edited")
    await page.locator("#log .edit-form").get_by_role("button", name="Send").click()
    await expect(page.locator("#log .branch-picker .branch-count")).to_have_text("2/2")
    await chat.wait_idle()
    assert users(await chat.server_view()) == ["nightly backups", "nightly backups, edited"]
    chat.assert_clean_console()


async def test_escape_or_cancel_in_a_question_editor_gives_focus_back_to_its_edit_button(
    browser: Browser, scenario_url: str
) -> None:
    chat = await open_chat(browser, scenario_url, "edit-focus")
    page = chat.page
    await chat.ask("nightly backups")
    await chat.ask("log retention")
    second = page.locator("#log article.message-user").nth(1)
    edit = second.get_by_role("button", name="Edit this question")
    editor = page.locator("#log .edit-form textarea")
    # Escape, by keyboard only: the focus is back where the user started, not on the page's body
    await edit.focus()
    await page.keyboard.press("Enter")
    await expect(editor).to_be_focused()
    await page.keyboard.press("Escape")
    await expect(editor).to_have_count(0)
    await expect(edit).to_be_focused()
    # Cancel, pressed: the same
    await edit.click()
    await page.locator("#log .edit-form").get_by_role("button", name="Cancel").click()
    await expect(editor).to_have_count(0)
    await expect(edit).to_be_focused()
    await expect(page.locator("#log article.message-user")).to_have_text(
        [re.compile("^You\\s*nightly backups"), re.compile("^You\\s*log retention")]
    )
    chat.assert_clean_console()


async def test_a_version_picker_used_by_keyboard_keeps_the_focus(browser: Browser, scenario_url: str) -> None:
    """‹ and › rebuild the message they sit on; the focus stays on the picker (on the arrow pressed,
    or the other one once the first or last version is reached), not on the page's body."""
    chat = await open_chat(browser, scenario_url, "picker-focus")
    page = chat.page
    await chat.ask("nightly backups")
    await chat.ask("log retention")
    await (
        page.locator("#log article.message-user")
        .nth(1)
        .get_by_role("button", name="Edit this question")
        .click()
    )
    before = await chat.answers().count()
    await page.locator("#log .edit-form textarea").fill("log retention in eu-west")
    await page.keyboard.press("Enter")
    await chat.wait_for_new_answer(before - 1)
    picker = page.locator("#log .branch-picker[aria-label$='of this question']")
    await expect(picker.locator(".branch-count")).to_have_text("2/2")

    await picker.get_by_role("button", name="Previous version of this question").focus()
    await page.keyboard.press("Enter")
    await expect(picker.locator(".branch-count")).to_have_text("1/2")
    await expect(page.locator("#log article.message-user").nth(1)).to_contain_text("log retention")
    # the first version has no previous one: the focus is on ›, and Enter goes back
    await expect(picker.get_by_role("button", name="Next version of this question")).to_be_focused()
    await page.keyboard.press("Enter")
    await expect(picker.locator(".branch-count")).to_have_text("2/2")
    await expect(picker.get_by_role("button", name="Previous version of this question")).to_be_focused()
    chat.assert_clean_console()


async def test_a_long_unbroken_word_wraps_inside_its_message(browser: Browser, scenario_url: str) -> None:
    chat = await open_chat(browser, scenario_url, "long-word")
    page = chat.page
    link = "https://example.com/" + "backup_retention_" * 20 + "policy"
    await chat.ask(f"Where is {link} described?")
    for width in (1280, 390):
        await page.set_viewport_size({"width": width, "height": 800})
        await expect(page.locator("#log article.message-user .message-body")).to_contain_text(link)
        # every message's text stays inside its bubble (none runs out of it, cut off by the log)
        cut = await page.locator("#log .message-body").evaluate_all(
            "(bodies) => bodies.filter((b) => b.scrollWidth > b.clientWidth).map((b) => b.innerText)"
        )
        assert cut == [], (width, cut)
    chat.assert_clean_console()


async def test_a_fenced_code_block_in_an_answer_shows_as_one_block_of_code(
    browser: Browser, scenario_url: str
) -> None:
    chat = await open_chat(browser, scenario_url, "fenced")
    answer = chat.answers().last
    await chat.ask("fenced backup retention")
    # before: each line a paragraph of its own, the fence marks shown, the blank line splitting it
    await expect(answer.locator("pre code")).to_have_count(1)
    assert await answer.locator("pre code").inner_text() == ("python3 -m venv env\n\nsource env/bin/activate")
    paragraphs = await answer.locator("p").all_inner_texts()
    assert [squash(p) for p in paragraphs] == [
        "Make the environment and activate it [1]:",
        "Then pip install what you need [1].",
    ]
    assert "```" not in await answer.inner_text()
    await expect(answer.locator("p code")).to_have_text("pip install")
    await expect(answer.locator("button.cite")).to_have_count(2)
    chat.assert_clean_console()


async def test_an_approval_of_long_unbroken_arguments_fits_the_window(
    browser: Browser, scenario_url: str
) -> None:
    chat = await open_chat(browser, scenario_url, "long-approval")
    page = chat.page
    note = "quarterly_backup_retention_report_" * 6
    await chat.type_question(f"archive {note}")
    card = page.locator("#approvals .approval")
    await expect(card.locator(".approval-args")).to_contain_text(note)
    for width in (1280, 390):
        await page.set_viewport_size({"width": width, "height": 800})
        await expect(card.locator(".approval-message")).to_be_visible()
        # the card's text wraps inside it: the page does not scroll sideways, nothing runs out of the card
        overflow = await page.evaluate(
            """() => [document.documentElement.scrollWidth - document.documentElement.clientWidth,
            ...[...document.querySelectorAll('#approvals .approval, #approvals .approval *')]
              .filter((e) => e.clientWidth > 0 && e.scrollWidth > e.clientWidth)
              .map((e) => e.className)]"""
        )
        assert overflow == [0], (width, overflow)
    await card.get_by_role("button", name="Approve").click()
    await chat.wait_idle()
    chat.assert_clean_console()


# The visible buttons and links whose one-word label is broken over lines ("Ad" / "d").
_BROKEN_LABELS = """() => [...document.querySelectorAll('button, summary, a')]
  .filter((e) => e.offsetParent && e.innerText.trim() && !/\\s/.test(e.innerText.trim()))
  .filter((e) => {
    const range = document.createRange();
    range.selectNodeContents(e);
    const lines = new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top)));
    return lines.size > 1;
  })
  .map((e) => e.innerText.trim())"""


async def test_no_one_word_button_is_broken_over_two_lines(browser: Browser, scenario_url: str) -> None:
    """The side column lets long names wrap anywhere; a button beside an input there must not be
    squeezed until its own label breaks (the filter's "Add" read "Ad" / "d" at every width)."""
    chat = await open_chat(browser, scenario_url, "broken-labels")
    page = chat.page
    await chat.ask("nightly backups")
    for scheme in ("light", "dark"):
        await page.emulate_media(color_scheme=scheme)
        for width in (1280, 1000, 390):
            await page.set_viewport_size({"width": width, "height": 800})
            await expect(page.locator("#filter-name")).to_be_attached()
            assert await page.evaluate(_BROKEN_LABELS) == [], (scheme, width)
    await chat.screenshot("labels-dark-narrow")
    chat.assert_clean_console()


async def test_long_names_in_the_side_panels_wrap_and_their_buttons_stay_reachable(
    browser: Browser, scenario_url: str, tmp_path: Path
) -> None:
    upload = tmp_path / ("night_shift_rota_for_the_savanna_enclosure_keepers_" * 2 + "v2.md")
    upload.write_text("# Night shifts\n\nThe keeper on duty checks the savanna enclosure at 2 am.\n")
    chat = await open_chat(browser, scenario_url, "long-names")
    page = chat.page
    name = "night_shift_rota_for_the_savanna_enclosure_keepers_" * 2
    await chat.add_filter_name(name)
    await page.locator("#upload-files").set_input_files(str(upload))
    await page.locator("#upload button[type=submit]").click()
    await expect(page.locator("#jobs .job").first).to_have_attribute("data-state", "done")
    for width in (1280, 390):
        await page.set_viewport_size({"width": width, "height": 800})
        await expect(page.locator("#filter .chip")).to_contain_text(name)
        # nothing in the side column runs out of its box (where the column would cut it off)
        cut = await page.locator(".side *").evaluate_all(
            "(all) => all.filter((e) => e.clientWidth > 0 && e.scrollWidth > e.clientWidth"
            " && getComputedStyle(e).overflowX === 'visible').map((e) => e.className || e.tagName)"
        )
        assert cut == [], (width, cut)
    remove = page.get_by_role("button", name=f"Remove “{name}” from the filter")
    await remove.scroll_into_view_if_needed()
    await expect(remove).to_be_in_viewport(ratio=1)
    await remove.click()
    await expect(page.locator("#filter .chip")).to_have_count(0)
    await expect(page.locator("#filter .filter-summary")).to_contain_text("Answers use all documents.")
    chat.assert_clean_console()


async def test_a_link_to_a_deleted_chat_starts_a_new_chat_under_a_new_id(
    browser: Browser, scenario_url: str
) -> None:
    chat = await open_chat(browser, scenario_url, "deleted-link")
    await chat.ask("nightly backups")
    deleted = chat.thread_id
    async with httpx.AsyncClient(base_url=scenario_url, timeout=10) as client:
        assert (await client.delete(f"/threads/{deleted}")).status_code == 204

    later = await open_chat_at(browser, scenario_url, "deleted-link-later", f"#thread={deleted}")
    await expect(later.page.locator("#log .notice p")).to_have_text(
        "That chat does not exist (any more); this is a new one."
    )
    assert later.thread_id is None
    assert (await later.ask("nightly backups")).startswith("Found it in")
    assert later.thread_id not in (None, deleted)  # not the deleted chat made again
    async with httpx.AsyncClient(base_url=scenario_url, timeout=10) as client:
        assert (await client.get(f"/threads/{deleted}")).status_code == 404
        listed = (await client.get("/threads")).json()["threads"]
    assert [t["threadId"] for t in listed] == [later.thread_id]
    assert later.problems == [
        "console error: Failed to load resource: the server responded with a status of 404 (Not Found)"
    ]


async def test_a_saved_chat_without_a_title_has_one_name_in_the_list_and_the_header(
    browser: Browser, scenario_url: str
) -> None:
    # a run with no messages saves a chat that has no first question to be named after
    async with httpx.AsyncClient(base_url=scenario_url, timeout=10) as client:
        async with client.stream("POST", "/agui", json=run_body("t1", "r1", None)) as response:
            assert response.status_code == 200
            await response.aread()
        assert (await client.get("/threads/t1")).json()["title"] is None
    chat = await open_chat_at(browser, scenario_url, "untitled", "#thread=t1")
    page = chat.page
    await expect(page.locator("#threads a[aria-current=page]")).to_have_text("Untitled chat")
    await expect(page.locator("#chat-title")).to_have_text("Untitled chat")
    assert await page.title() == "Untitled chat · ragstream"
    # a chat not saved yet is still a new one
    await page.locator("#new-chat").click()
    await expect(page.locator("#chat-title")).to_have_text("New chat")
    chat.assert_clean_console()


async def test_a_source_opened_in_one_chat_is_not_shown_open_in_the_next(
    browser: Browser, scenario_url: str
) -> None:
    chat = await open_chat(browser, scenario_url, "active-source")
    page = chat.page
    await chat.ask("nightly backups")
    await chat.answers().last.locator("button.cite").first.click()
    await expect(page.locator("#sources .source.is-active")).to_have_count(1)

    await page.locator("#new-chat").click()
    await chat.ask("bakery opening hours")
    cards = page.locator("#sources .source")
    await expect(cards).not_to_have_count(0)
    await expect(page.locator("#sources .source.is-active")).to_have_count(0)  # nothing pressed here
    await expect(page.locator("#sources [aria-current]")).to_have_count(0)
    chat.assert_clean_console()


@pytest.fixture
async def token_url(scenario_config: Any) -> AsyncIterator[str]:
    scenario_config.tokens = {"alice": SecretStr("alice-token")}
    async with serve(scenario_app(scenario_config)) as url:
        yield url


async def test_bearer_token_from_the_url(browser: Browser, token_url: str) -> None:
    chat = await open_chat_at(browser, token_url, "token", "?token=alice-token")
    assert "token" not in chat.page.url  # moved to sessionStorage, out of the address bar
    assert (await chat.ask("nightly backups")).startswith("Found it in")
    await chat.reload()  # the tab keeps the token
    await expect(chat.page.locator("#threads a[aria-current=page]")).to_have_text("nightly backups")
    chat.assert_clean_console()

    # without a token the page says what is wrong instead of failing silently
    context = await browser.new_context()
    anonymous = ChatPage(await context.new_page(), token_url, "token-missing")
    await anonymous.page.goto(f"{token_url}/")
    await expect(anonymous.page.locator("#banner")).to_contain_text("missing bearer token")
    assert anonymous.problems
    assert all("401" in p for p in anonymous.problems), anonymous.problems
    await context.close()


async def test_the_server_explains_a_page_that_is_not_built(tmp_path: Path) -> None:
    """No Node on the machine: the server still starts and `/` says how to build the page."""
    app = Starlette(routes=static_routes(tmp_path))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://page") as client:
        missing = await client.get("/")
        assert missing.status_code == 200
        assert missing.headers["content-type"].startswith("text/html")
        assert "not built" in missing.text
        assert "cd frontend &amp;&amp; npm ci &amp;&amp; npm run build" in missing.text
        assert str(tmp_path) not in missing.text  # no server path, for anyone
        for path in ("/assets/app-1234.js", "/assets/"):
            assert (await client.get(path)).status_code == 404  # no assets yet: not found, not a 500

        (tmp_path / "assets").mkdir()
        (tmp_path / "index.html").write_text("<!doctype html><title>built</title>")
        (tmp_path / "assets" / "app-1234.js").write_text("console.log(1)")
        built = await client.get("/")
        assert built.status_code == 200
        assert "<title>built</title>" in built.text
        assert "default-src 'self'" in built.headers["content-security-policy"]
        asset = await client.get("/assets/app-1234.js")
        assert asset.status_code == 200
        assert "immutable" in asset.headers["cache-control"]
        assert (await client.get("/assets/nope.js")).status_code == 404


def _job(job_id: str, state: str) -> dict[str, Any]:
    """An upload job as ``GET /documents/jobs/{id}`` answers it, one file half-way or done."""
    done = state == "done"
    return {
        "id": job_id,
        "kind": "upload",
        "source": None,
        "state": state,
        "progress": {"filesTotal": 1, "filesDone": int(done), "chunksDone": 2, "chunksTotal": 4},
        "files": [
            {
                "name": f"{job_id}.md",
                "status": "added" if done else "pending",
                "documentId": None,
                "chunks": 4 if done else 0,
                "error": None,
            }
        ],
        "error": None,
        "attempts": 1,
        "createdAt": 1,
    }


async def test_a_job_card_stops_following_a_job_it_cannot_read_and_says_why(
    browser: Browser, scenario_url: str
) -> None:
    """A job read that cannot work when repeated (404: the job expired; 401: the token changed) ends
    the card's polling with the reason; a passing failure (503) is retried, ever less often."""
    reads: dict[str, int] = {}

    async def jobs(route: Any) -> None:
        path = urlsplit(route.request.url).path
        if path == "/documents/jobs":
            listed = [_job(name, "running") for name in ("gone", "locked", "flaky")]
            await route.fulfill(json={"jobs": listed, "next": None})
            return
        name = path.rsplit("/", 1)[-1]
        reads[name] = reads.get(name, 0) + 1
        if name == "gone":
            await route.fulfill(status=404, json={"error": {"code": "not_found", "message": "no job 'gone'"}})
        elif name == "locked":
            message = "the bearer token is not valid"
            await route.fulfill(status=401, json={"error": {"code": "unauthorized", "message": message}})
        elif reads[name] <= 3:
            message = "the server is restarting"
            await route.fulfill(status=503, json={"error": {"code": "redis_unavailable", "message": message}})
        else:
            await route.fulfill(json=_job(name, "done"))

    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    await context.route(re.compile(r"/documents/jobs(\?|/|$)"), jobs)
    chat = ChatPage(await context.new_page(), scenario_url, "job-lost")
    await chat.open()
    page = chat.page
    card = {name: page.locator(f"#jobs .job[data-job={name}]") for name in ("gone", "locked", "flaky")}
    await expect(card["flaky"].locator(".job-follow")).to_have_text(
        "Could not check on this job (the server is restarting); trying again."
    )
    await expect(card["flaky"].locator(".job-state")).to_contain_text("Ingesting")
    await expect(card["gone"].locator(".job-state")).to_have_text(
        "No longer followed · 0/1 files · 2/4 chunks"
    )
    await expect(card["gone"].locator(".job-follow")).to_have_text(
        "The server no longer has this job (it keeps jobs for a day), so its outcome is unknown."
    )
    await expect(card["locked"].locator(".job-follow")).to_have_text(
        "This job can no longer be followed: the bearer token is not valid. Reload the page with a valid token."
    )
    for name in ("gone", "locked"):
        await expect(card[name].locator(".job-cancel")).to_have_count(0)
        await expect(card[name].locator("progress")).to_have_count(0)
    # the transient failures were retried after 1, 2 and 4 seconds, and the card then followed the
    # job to its end; the others were read once and never again
    await expect(card["flaky"].locator(".job-state")).to_have_text("Ingested · 1/1 files · 2/4 chunks")
    await expect(card["flaky"].locator(".job-follow")).to_have_count(0)
    await page.wait_for_timeout(1500)
    assert reads == {"gone": 1, "locked": 1, "flaky": 4}
    await chat.screenshot("job-lost")
    assert await rendered_junk(page) == []
    assert sorted(chat.problems) == sorted(
        f"console error: Failed to load resource: the server responded with a status of {status}"
        for status in ("401 (Unauthorized)", "404 (Not Found)", *["503 (Service Unavailable)"] * 3)
    )


async def test_uploads_that_cannot_be_listed_say_so(browser: Browser, scenario_url: str) -> None:
    """The job cards come from the server on load; when that listing fails the panel says the
    uploads could not be listed, rather than showing none (which reads as "you uploaded nothing")."""

    async def jobs(route: Any) -> None:
        message = "the server is restarting"
        await route.fulfill(status=503, json={"error": {"code": "redis_unavailable", "message": message}})

    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    await context.route(re.compile(r"/documents/jobs(\?|/|$)"), jobs)
    chat = ChatPage(await context.new_page(), scenario_url, "jobs-unlisted")
    await chat.open()
    await expect(chat.page.locator("#jobs .job-error")).to_have_text(
        "Your recent uploads could not be listed (the server is restarting); reload the page to see them."
    )
    assert await rendered_junk(chat.page) == []
    assert chat.problems == [
        "console error: Failed to load resource: the server responded with a status of 503 (Service Unavailable)"
    ]


@pytest.fixture
async def editor_url(scenario_config: Any) -> AsyncIterator[str]:
    """The product app with tokens; alice is an editor, bob only reads."""
    scenario_config.tokens = {"alice": SecretStr("alice-token"), "bob": SecretStr("bob-token")}
    scenario_config.editors = ["alice"]
    async with serve(create_app(scenario_config)) as url:
        yield url


async def documents(url: str, token: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}) as api:
        return list((await api.get("/documents", params={"page_size": 500})).json()["documents"])


async def test_upload_shows_its_job_and_citations_open_the_pdf_at_the_page(
    browser: Browser, editor_url: str, tmp_path: Path
) -> None:
    from tests.test_documents_api import pdf_bytes

    pdf = tmp_path / "okapi.pdf"
    pdf.write_bytes(
        pdf_bytes(
            [
                "Okapis live in the Ituri rainforest of central Africa.",
                "The okapi tongue is long enough to clean its own eyelids and ears.",
            ]
        )
    )
    binary = tmp_path / "tool.exe"
    binary.write_bytes(b"MZ\x00\x00")
    chat = await open_chat_at(browser, editor_url, "upload", "?token=alice-token")
    page = chat.page
    listed = await page.locator("#filter .doc-list li").count()
    # the picker offers every format the server ingests (from GET /capabilities), office files too
    await expect(page.locator("#upload-files")).to_have_attribute("accept", re.compile(r"\.docx"))
    accept = (await page.locator("#upload-files").get_attribute("accept") or "").split(",")
    assert {".md", ".pdf", ".html", ".docx", ".pptx", ".xlsx", ".csv", ".epub"} <= set(accept), accept

    # Upload with nothing chosen says what to do, and uploads nothing
    await page.locator("#upload button[type=submit]").click()
    await expect(page.locator("#jobs .job-error")).to_have_text("Choose one or more files first.")
    await expect(page.locator("#upload-files")).to_be_focused()

    await page.locator("#upload-files").set_input_files([str(pdf), str(binary)])
    await page.locator("#upload button[type=submit]").click()
    await expect(page.locator("#jobs .job-error")).to_have_count(0)
    job = page.locator("#jobs .job").first
    await expect(job).to_have_attribute("data-state", "done", timeout=60_000)
    # one of the two files failed: the card says so, not "Ingested"
    await expect(job.locator(".job-state")).to_contain_text(
        re.compile(r"^Partly ingested · 2/2 files.* · 1 failed")
    )
    await expect(job.locator(".job-file").nth(0)).to_have_text(
        re.compile(r"okapi\.pdf: added \(\d+ chunks?\)")
    )
    await expect(job.locator(".job-file").nth(1)).to_contain_text(
        "tool.exe: not ingested — unsupported file type"
    )
    await expect(page.locator("#filter .doc-list li")).to_have_count(listed + 1)  # listed once ingested
    await chat.screenshot("upload-done")
    # the job's card comes back after a reload, and in another browser: the server lists the
    # caller's jobs (the page keeps no job ids of its own)
    await chat.reload()
    job = page.locator("#jobs .job").first
    await expect(job).to_have_attribute("data-state", "done")
    await expect(job.locator(".job-file").nth(0)).to_contain_text("okapi.pdf: added")
    assert await page.evaluate("Object.keys(localStorage).filter((k) => k.includes('upload'))") == []
    elsewhere = await open_chat_at(browser, editor_url, "upload-elsewhere", "?token=alice-token")
    await expect(elsewhere.page.locator("#jobs .job").first).to_have_attribute("data-state", "done")
    await expect(elsewhere.page.locator("#jobs .job .job-file").first).to_contain_text("okapi.pdf: added")
    elsewhere.assert_clean_console()

    # a job can be cancelled from its card: it ends cancelled, its file not ingested
    long = tmp_path / "ledger.md"
    long.write_text(
        "# Ledger\n\n"
        + "\n\n".join(
            f"## Entry {i}\n\n" + f"The ledger entry {i} records a shelf. " * 10 for i in range(400)
        )
    )
    await page.locator("#upload-files").set_input_files([str(long)])
    async with page.expect_response(
        lambda r: r.url.endswith("/documents") and r.request.method == "POST"
    ) as sent:
        await page.locator("#upload button[type=submit]").click()
    assert (await sent.value).status == 202
    # (the new card goes on top once the page has the server's answer; until then the top card is
    # the earlier job's, whose two files would make this a strict-mode error, not a wait)
    ledger = page.locator("#jobs .job").filter(has=page.locator(".job-file", has_text="ledger.md"))
    await expect(page.locator("#jobs .job").first).to_have_attribute(
        "data-job", (await (await sent.value).json())["jobId"]
    )
    await expect(ledger.locator(".job-file")).to_have_text("ledger.md: waiting")
    await ledger.locator(".job-cancel").click()
    await expect(ledger).to_have_attribute("data-state", "cancelled", timeout=60_000)
    await expect(ledger.locator(".job-state")).to_contain_text("Cancelled · nothing was written")
    await expect(ledger.locator(".job-file")).to_have_text("ledger.md: cancelled")
    await expect(ledger.locator(".job-cancel")).to_have_count(0)
    await chat.screenshot("upload-cancelled")
    assert "ledger.md" not in {d["uri"] for d in (await documents(editor_url, "alice-token"))}

    await chat.ask("How long is the okapi tongue?")
    async with httpx.AsyncClient(base_url=editor_url, headers={"Authorization": "Bearer alice-token"}) as api:
        state = (await api.get(f"/threads/{chat.thread_id}")).json()["state"]
    cited = [(n, c) for n, c in state["citations"].items() if c["uri"] == "okapi.pdf"]
    assert cited, state["citations"]
    number, citation = cited[0]
    # with upload jobs listed the sources keep their share of the column, and a card shows in it
    side, sources = await page.evaluate(
        "[document.querySelector('.side').clientHeight, document.querySelector('.panel-sources').clientHeight]"
    )
    assert sources >= 0.35 * side, (sources, side)
    await page.locator(f"#source-{number}").scroll_into_view_if_needed()
    await expect(page.locator(f"#source-{number}")).to_be_in_viewport()
    assert await page.evaluate("document.querySelector('.side').scrollTop") == 0
    link = page.locator(f"#source-{number} a.source-open")
    href = await link.get_attribute("href")
    assert href == f"/documents/{citation['document_id']}?format=file#page={citation['page']}"
    # with a token the link opens the fetched file (a link cannot carry the header), at the page
    async with page.context.expect_page() as opened:
        await link.click()
    tab = await opened.value
    await tab.wait_for_url(re.compile(rf"^blob:.*#page={citation['page']}$"))
    chat.assert_clean_console()

    # bob reads but may not upload: the page says why; alice's jobs are not his to see
    reader = await open_chat_at(browser, editor_url, "upload-reader", "?token=bob-token")
    await reader.wait_ready()
    await expect(reader.page.locator("#jobs .job")).to_have_count(0)
    await reader.page.locator("#upload-files").set_input_files([str(pdf)])
    await reader.page.locator("#upload button[type=submit]").click()
    await expect(reader.page.locator("#jobs .job-error")).to_contain_text("You may not add documents")
    assert all("403" in p for p in reader.problems), reader.problems

    # an upload of which nothing can be ingested says why, file by file
    data = tmp_path / "data.json"
    data.write_text('{"a": 1}')
    rejected = await open_chat_at(browser, editor_url, "upload-rejected", "?token=alice-token")
    await rejected.wait_ready()
    await rejected.page.locator("#upload-files").set_input_files([str(data)])
    await rejected.page.locator("#upload button[type=submit]").click()
    await expect(rejected.page.locator("#jobs .job-error")).to_have_text(
        "The upload failed: no file could be ingested (data.json: unsupported file type)"
    )
    assert all("422" in p for p in rejected.problems), rejected.problems


@pytest.fixture
async def wide_server(scenario_config: Any) -> AsyncIterator[str]:
    """The product app whose runs carry every card of the thread (so the panel shows exactly them)."""
    scenario_config.citations_emitted = 100
    async with serve(create_app(scenario_config)) as url:
        yield url


async def assert_screen_is_the_thread(chat: ChatPage) -> dict[str, Any]:
    """The messages on screen (ids, roles, texts, tool calls) and the source cards are those of
    ``GET /threads/{id}``, and every ``[n]`` on screen names one of its cards; returns the view."""
    view = await chat.server_view()
    assert await chat.shown_messages() == thread_messages(view)
    cards = thread_cards(view)
    assert cards, "the thread's answers cite sources"
    assert await chat.shown_cards() == cards
    markers = await chat.page.locator("#log button.cite").evaluate_all(
        "(bs) => bs.map((b) => b.dataset.cite)"
    )
    assert markers and set(markers) <= set(cards)
    return view


def users(view: dict[str, Any]) -> list[str]:
    return [m["content"] for m in view["messages"] if m["role"] == "user"]


async def test_edit_regenerate_and_switch_between_versions(browser: Browser, wide_server: str) -> None:
    """Three turns, the second question edited, its answer made again, both switched back, a reload:
    after every step the page shows the thread's active branch and that branch's citations."""
    chat = await open_chat(browser, wide_server, "branches")
    page = chat.page
    questions = [
        QUESTION,
        "How do I restore a backup?",
        "When does the Northwind Observatory open to visitors?",
    ]
    for question in questions:
        await chat.ask(question)
    original = await assert_screen_is_the_thread(chat)
    assert original["branches"] == {}
    await expect(page.locator("#log .branch-picker")).to_have_count(0)

    # edit the second question in place; the answer to the edit replaces the rest of the conversation
    second = page.locator("#log article.message-user").nth(1)
    second_id = await second.get_attribute("data-message-id")
    await second.get_by_role("button", name="Edit this question").click()
    editor = page.locator("#log .edit-form textarea")
    await expect(editor).to_be_focused()
    await expect(editor).to_have_value(questions[1])
    edited_question = "What temperature must the bakery's walk-in cooler hold?"
    await editor.fill(edited_question)
    await page.locator("#log .edit-form").get_by_role("button", name="Send").click()
    await chat.wait_idle(f"{_last_answer_js} !== {json.dumps(await _last_answer_id(chat))}")
    edited = await assert_screen_is_the_thread(chat)
    assert users(edited) == [questions[0], edited_question]
    edited_id = edited["messages"][_position(edited, "user", 1)]["id"]
    assert edited_id != second_id and edited["branches"][edited_id] == {
        "ids": [second_id, edited_id],
        "index": 1,
    }
    question_picker = page.locator(f'#log .branch-picker[data-branch-of="{edited_id}"]')
    await expect(question_picker.locator(".branch-count")).to_have_text("2/2")
    await expect(question_picker).to_have_attribute("aria-label", "Version 2 of 2 of this question")
    assert "Harbor Street Bakery" in " ".join(c["title"] for c in thread_cards(edited).values())
    await chat.screenshot("edited")

    # regenerate the answer to the edited question: a second version of it, shown under the answer
    first_answer = edited["messages"][_position(edited, "user", 1) + 1]["id"]
    before = await _last_answer_id(chat)
    await (
        page.locator("#log article.message-assistant")
        .last.get_by_role("button", name="Regenerate this answer")
        .click()
    )
    await chat.wait_idle(f"{_last_answer_js} !== {json.dumps(before)}")
    regenerated = await assert_screen_is_the_thread(chat)
    assert users(regenerated) == [questions[0], edited_question]
    second_answer = regenerated["messages"][_position(regenerated, "user", 1) + 1]["id"]
    assert regenerated["branches"][second_answer] == {"ids": [first_answer, second_answer], "index": 1}
    await expect(page.locator(f'#log .branch-picker[data-branch-of="{second_answer}"]')).to_have_count(1)
    answer_picker = page.locator("#log article.message-assistant .branch-picker")  # the only one
    await expect(answer_picker.locator(".branch-count")).to_have_text("2/2")
    await chat.screenshot("regenerated")

    # switch back: the first answer to the edit, then the original second question and its turns
    await answer_picker.get_by_role("button", name="Previous version of this answer").click()
    await page.locator(f'#log article[data-message-id="{first_answer}"]').wait_for()
    back = await assert_screen_is_the_thread(chat)
    assert back["branches"][first_answer]["index"] == 0
    await expect(answer_picker.locator(".branch-count")).to_have_text("1/2")

    await question_picker.get_by_role("button", name="Previous version of this question").click()
    await page.locator(f'#log article[data-message-id="{second_id}"]').wait_for()
    restored = await assert_screen_is_the_thread(chat)
    assert users(restored) == questions
    assert thread_messages(restored) == thread_messages(original)
    assert restored["state"]["citations"] == original["state"]["citations"]
    assert restored["branches"] == {second_id: {"ids": [second_id, edited_id], "index": 0}}
    await expect(
        page.locator(f'#log .branch-picker[data-branch-of="{second_id}"] .branch-count')
    ).to_have_text("1/2")
    await chat.screenshot("switched-back")

    # a reload shows the branch last chosen, with its picker
    await chat.reload()
    await expect(page.locator("#log article.message-user")).to_have_count(3)
    assert thread_messages(await assert_screen_is_the_thread(chat)) == thread_messages(original)
    await expect(
        page.locator(f'#log .branch-picker[data-branch-of="{second_id}"] .branch-count')
    ).to_have_text("1/2")

    # forward again: the edit comes back with the answer last shown below it (the first one)
    await page.get_by_role("button", name="Next version of this question").click()
    await page.locator(f'#log article[data-message-id="{edited_id}"]').wait_for()
    forward = await assert_screen_is_the_thread(chat)
    assert forward["messages"][_position(forward, "user", 1) + 1]["id"] == first_answer
    await expect(answer_picker.locator(".branch-count")).to_have_text("1/2")

    # and the conversation goes on from the branch shown
    follow_up = await chat.ask("How long are backups kept?")
    assert "35 days" in follow_up
    final = await assert_screen_is_the_thread(chat)
    assert users(final) == [questions[0], edited_question, "How long are backups kept?"]

    # the first question edited: it keeps its id (nothing before it would tell the server otherwise)
    first = page.locator("#log article.message-user").first
    first_id = await first.get_attribute("data-message-id")
    before = await _last_answer_id(chat)
    await first.get_by_role("button", name="Edit this question").click()
    await page.locator("#log .edit-form textarea").fill("How do I restore a backup?")
    await page.locator("#log .edit-form textarea").press("Enter")
    await chat.wait_idle(f"{_last_answer_js} !== {json.dumps(before)}")
    rewritten = await assert_screen_is_the_thread(chat)
    assert users(rewritten) == ["How do I restore a backup?"]
    assert rewritten["messages"][0]["id"] == first_id
    replaced = rewritten["branches"][first_id]["ids"][0]
    assert rewritten["branches"][first_id] == {"ids": [replaced, first_id], "index": 1}
    # the chat is named after the first question shown: the edit renames it, header and list
    await expect(page.locator("#chat-title")).to_have_text("How do I restore a backup?")
    await expect(page.locator("#threads a[aria-current=page]")).to_have_text("How do I restore a backup?")
    await page.get_by_role("button", name="Previous version of this question").click()
    await page.locator(f'#log article[data-message-id="{replaced}"]').wait_for()
    assert thread_messages(await assert_screen_is_the_thread(chat))[0][2] == QUESTION
    await expect(page.locator("#chat-title")).to_have_text(QUESTION)
    await expect(page.locator("#threads a[aria-current=page]")).to_have_text(QUESTION)
    chat.assert_clean_console()


_last_answer_js = (
    "[...document.querySelectorAll('#log article.message-assistant:not(.message-tools)')].at(-1)"
    "?.dataset.messageId"
)


async def _last_answer_id(chat: ChatPage) -> str | None:
    return await chat.page.evaluate(f"() => {_last_answer_js}")  # type: ignore[no-any-return]


def _position(view: dict[str, Any], role: str, nth: int) -> int:
    """Where the ``nth`` message of ``role`` is in the view's messages."""
    return [i for i, m in enumerate(view["messages"]) if m["role"] == role][nth]
