"""ragstream behind CopilotKit: the example in examples/copilotkit, for real.

A real ragstream on loopback, CopilotKit's Node runtime (the example's ``server.mjs``, or the plain
``HttpAgent`` + ``InMemoryAgentRunner`` setup of issue 18) pointed at it, and either CopilotKit's own
client agent (a ``node --test`` script) or the example's React app in Debian's Chromium. Both run
with and without a state key (ragstream's state under one key of CopilotKit's agent state).

Needs the example installed and built (``bash scripts/build-copilotkit-example.sh``, which the test
command runs) and Chromium for the browser test; without either the tests fail with that instruction.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, expect
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from rag_tools import build_chat_toolkit
from ragstream.agui.execution import TRACE_ID_KEY
from ragstream.app import create_app
from tests.browser.chat import CHROMIUM, launch_browser, thread_messages
from tests.browser.copilotkit import (
    CopilotKitPage,
    example_server,
    expected_citations,
    require_example,
    run_node_tests,
)
from tests.browser.rendered import check_source_card, rendered_junk
from tests.conftest import scenario_app
from tests.oidc_provider import AUDIENCE, IdentityProvider
from tests.otlp_receiver import OTLPReceiver
from tests.scenario import Notes, scenario_agent
from tests.servers import free_port, serve, served
from tests.test_tool_results import SEED_TOOLS
from tests.test_tracing import otel_env

pytestmark = pytest.mark.timeout(300)

STATE_KEYS = [pytest.param(None, id="flat-state"), pytest.param("ragstream", id="state-key")]


def ragstream_app(config: Any, *, scenario: bool, state_key: str | None) -> Any:
    """ragstream with the offline model (or the keyword scenario agent), its state under ``state_key``."""
    config.state_key = state_key
    toolkit = build_chat_toolkit(config)
    if not scenario:
        return create_app(config, toolkit=toolkit)
    toolkit.namespaces["notes"] = Notes
    return create_app(config, agent=scenario_agent(toolkit), toolkit=toolkit)


def rag_state(state: dict[str, Any], state_key: str | None) -> dict[str, Any]:
    return state[state_key] if state_key else state  # type: ignore[no-any-return]


def conversation(messages: list[dict[str, Any]]) -> list[str]:
    """What a page shows of saved messages: each question and each answer's text."""
    return [
        f"{m['role']}: {m['content'].strip()}"
        for m in messages
        if m["role"] in ("user", "assistant") and isinstance(m.get("content"), str) and m["content"].strip()
    ]


@pytest.mark.parametrize("state_key", STATE_KEYS)
async def test_runtime_survives_turns_and_a_reconnect(scenario_config: Any, state_key: str | None) -> None:
    """examples/copilotkit/test/runtime.test.mjs against the offline model, through the plain runtime
    and the example's: three turns and a reconnect; then an edit, a regenerate (from the question and
    from the tool's result), a switch back and a turn on, the runtime up and every folded state
    ragstream's after each step."""
    require_example()
    app = ragstream_app(scenario_config, scenario=False, state_key=state_key)
    async with serve(app) as ragstream:
        env = {"RAGSTREAM_URL": ragstream}
        if state_key:
            env["RAGSTREAM_STATE_KEY"] = state_key
        code, output = await run_node_tests("test/runtime.test.mjs", env, timeout=120)
    assert code == 0, f"node --test failed:\n{output}"
    assert "# fail 0" in output or "ℹ fail 0" in output, output


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    require_example()
    if not CHROMIUM.exists():
        pytest.fail(f"Chromium is missing at {CHROMIUM}: `apt-get install -y chromium`", pytrace=False)
    async with launch_browser() as launched:
        yield launched


async def assert_citations_match(
    page: CopilotKitPage, ragstream: str, state_key: str | None
) -> dict[str, Any]:
    """The page's source cards are the citations of the thread's saved state (the recently cited
    ones: runs emit a window of them), and the last answer's markers link cards among them."""
    view = await page.server_view(ragstream)
    state = rag_state(view["state"], state_key)
    assert state["citations"], "the thread has citations"
    await expect(page.page.locator("#sources .source")).to_have_count(len(state["citations"]))
    assert await page.shown_citations() == expected_citations(state)
    markers = [await a.get_attribute("data-cite") for a in await page.answers().last.locator("a.cite").all()]
    assert markers, "the answer links its citations"
    assert set(markers) <= set(state["citations"])
    return view


@pytest.mark.parametrize("state_key", STATE_KEYS)
async def test_a_thread_through_copilotkit_in_chromium(
    browser: Browser, scenario_config: Any, state_key: str | None
) -> None:
    """Four answered turns of one thread (two topics, a filter), a Stop mid-answer and a reload."""
    # a Stop that only dropped the connection would let the run finish and be saved
    scenario_config.disconnect_policy = "finish"
    # runs carry the two most recently cited cards; older ones are read when a marker asks
    scenario_config.citations_emitted = 2
    app = ragstream_app(scenario_config, scenario=True, state_key=state_key)
    async with serve(app) as ragstream, example_server(ragstream, state_key=state_key) as runtime:
        context = await browser.new_context(viewport={"width": 1280, "height": 800})
        page = CopilotKitPage(await context.new_page(), runtime.url, state_key or "flat")
        await page.open()
        thread = page.thread_id

        # 1: a question; the search tool shows its progress, the answer links its source card
        answer = await page.ask("nightly backups")
        assert answer.startswith("Found it in Kiteline Cloud Operations Handbook [")
        tool = page.page.locator(".tool").last
        await expect(tool.locator(".tool-name")).to_have_text("search")
        await expect(tool.locator(".tool-args")).to_have_text("“nightly backups”")
        await expect(tool.locator(".tool-progress")).to_contain_text("Found")
        await expect(tool.locator(".tool-status")).to_have_text("done")
        await assert_citations_match(page, ragstream, state_key)

        # 2: another topic in the same thread; its card joins the first
        answer = await page.ask("bakery food safety")
        assert answer.startswith("Found it in Harbor Street Bakery")
        view = await assert_citations_match(page, ragstream, state_key)
        titles = {c["title"] for c in rag_state(view["state"], state_key)["citations"].values()}
        assert {
            "Kiteline Cloud Operations Handbook",
            "Harbor Street Bakery: food safety procedures",
        } <= titles
        cite = page.answers().last.locator("a.cite").first
        index = await cite.get_attribute("data-cite")
        await cite.click()
        card = page.page.locator(f"#source-{index}")
        await expect(card).to_have_class("source is-active")
        await expect(card).to_be_in_viewport()
        await page.screenshot("citation-open")

        # 3: the document filter, written into the shared state from the page
        await page.document_checkbox("Deploying ragstream").check()
        summary = page.page.locator("#filter .filter-summary")
        await expect(summary).to_contain_text("Answers use only: Deploying ragstream.")
        await expect(summary).to_contain_text("Applies from your next question.")
        answer = await page.ask("backups")
        assert answer.startswith("Found it in Deploying ragstream [")
        await expect(summary).not_to_contain_text("Applies from your next question.")
        view = await assert_citations_match(page, ragstream, state_key)
        saved_state = rag_state(view["state"], state_key)
        assert saved_state["document_filter"] == ["Deploying ragstream"]
        last_search = max(saved_state["searches"].values(), key=lambda s: s["seq"])
        assert last_search["documents"] == ["Deploying ragstream"]
        await page.screenshot("filter-set")

        # the first answer's card left the shared state (two cards are emitted); its marker reads it
        assert len(saved_state["citations"]) == 2
        old_marker = page.answers().first.locator("a.cite").first
        old_index = await old_marker.get_attribute("data-cite")
        assert old_index not in saved_state["citations"]
        await old_marker.click()
        old_card = page.page.locator(f"#earlier-sources #source-{old_index}")
        await expect(old_card).to_have_class("source is-active")
        async with httpx.AsyncClient(base_url=ragstream) as client:
            item = (await client.get(f"/threads/{thread}/state/citations/{old_index}")).json()["value"]
        assert item["title"] == "Kiteline Cloud Operations Handbook"
        await expect(old_card.locator("h3")).to_have_text(f"[{old_index}] {item['title']}")
        assert await old_card.locator(".source-passage").text_content() == item["passage"]
        await expect(page.page.locator("#sources .source")).to_have_count(2)

        # 4: Stop in the middle of a streaming answer: the thread stays at its last good state
        saved = await page.server_view(ragstream)
        shown = await page.transcript()
        assert shown == conversation(saved["messages"])
        await page.type_question("slow answer please")
        streaming = page.answers().last
        await expect(streaming).to_contain_text("tok3")
        partial = await streaming.inner_text()
        await expect(streaming).not_to_have_text(partial)  # still streaming in
        await page.stop()
        await expect(page.page.locator("#notice")).to_have_text(
            "Stopped. This turn (“slow answer please”) was not saved."
        )
        # the question goes back into the box, to edit or send again
        await expect(page.page.get_by_test_id("copilot-chat-textarea")).to_have_value("slow answer please")
        await page.wait_idle()
        await expect(page.page.get_by_text("tok3")).to_have_count(0)
        await page.expect_transcript(shown)
        after_stop = await page.server_view(ragstream)
        assert after_stop["activeRunId"] is None
        assert after_stop["messages"] == saved["messages"]
        assert after_stop["state"] == saved["state"]
        await assert_citations_match(page, ragstream, state_key)
        assert runtime.alive, runtime.log()

        # 5: a reload continues the same thread: the conversation, the cards and the filter come back
        await page.reload()
        assert page.thread_id == thread
        await expect(page.questions()).to_have_count(3)
        await page.expect_transcript(shown)
        await assert_citations_match(page, ragstream, state_key)
        await expect(page.document_checkbox("Deploying ragstream")).to_be_checked()

        # 6: and goes on: the filter cleared, a third topic
        await page.page.locator("#filter button.link", has_text="Clear").click()
        await expect(summary).to_contain_text("Answers use all documents.")
        answer = await page.ask("observatory visitor hours")
        assert answer.startswith("Found it in Northwind Observatory")
        view = await assert_citations_match(page, ragstream, state_key)
        assert [m["content"] for m in view["messages"] if m["role"] == "user"] == [
            "nightly backups",
            "bakery food safety",
            "backups",
            "observatory visitor hours",
        ]
        assert rag_state(view["state"], state_key)["document_filter"] == []
        await page.expect_transcript(conversation(view["messages"]))
        assert page.thread_id == thread
        assert runtime.alive, runtime.log()
        page.assert_clean()
        await context.close()


async def test_source_cards_of_a_pdf_a_markdown_and_an_html_document(
    browser: Browser, scenario_config: Any
) -> None:
    """The offline model cites a PDF, a Markdown and an HTML document: each card shows what its
    format has and links the original through the example's server (a PDF at its page), whether
    it came with the state or was read for an older answer. Nothing reads undefined, null, NaN or
    [object Object]."""
    scenario_config.citations_emitted = 2  # the first answer's cards are then read on demand
    app = ragstream_app(scenario_config, scenario=False, state_key=None)
    async with (
        serve(app) as ragstream,
        example_server(ragstream) as runtime,
        httpx.AsyncClient(base_url=ragstream) as api,
        httpx.AsyncClient(base_url=runtime.url) as example,
    ):
        context = await browser.new_context(viewport={"width": 1280, "height": 800})
        page = CopilotKitPage(await context.new_page(), runtime.url, "card-kinds")
        await page.open()
        assert "35 days" in await page.ask("How long are backups kept?")
        assert await page.ask("What does the Harbor Street Bakery sell?")
        assert await page.ask("When do offline maps ship in Tessel Maps?")  # a slide deck
        assert await page.ask("What is the monthly price per user of the Business plan?")  # a sheet
        assert await page.ask("Which version of Python do I need to install ragstream?")  # a Markdown guide
        for marker in await page.answers().locator("a.cite").all():
            await marker.click()  # an older answer's card is read from ragstream
            await expect(
                page.page.locator(f"#source-{await marker.get_attribute('data-cite')}")
            ).to_be_visible()
        await page.screenshot("card-kinds")
        assert await rendered_junk(page.page) == []

        kinds = set()
        for card in await page.page.locator(".source").all():
            n = await card.get_attribute("data-index")
            item = await api.get(f"/threads/{page.thread_id}/state/citations/{n}")
            citation = item.json()["value"]
            link = card.locator(".source-open a")
            kinds.add(await check_source_card(card, link, citation, example, "/api/documents"))
            # the example's server passes ragstream's bytes on unchanged
            path = f"/documents/{citation['document_id']}?format=file"
            assert (await example.get(f"/api{path}")).content == (await api.get(path)).content
        assert kinds == {"pdf", "md", "html", "pptx", "xlsx"}

        await page.reload()  # the restored thread renders its cards as cleanly
        await expect(page.page.locator("#sources .source")).to_have_count(2)
        assert await rendered_junk(page.page) == []
        assert runtime.alive, runtime.log()
        page.assert_clean()
        await context.close()


def sse_events(body: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:")]


async def test_the_runtime_sends_ragstreams_token(scenario_config: Any) -> None:
    """With RAGSTREAM_TOKEN the runtime's runs and the thread route reach a ragstream that wants one."""
    require_example()
    scenario_config.tokens = {"alice": SecretStr("alice-token")}
    app = ragstream_app(scenario_config, scenario=True, state_key=None)
    run = {"runId": "run-1", "state": {}, "tools": [], "context": [], "forwardedProps": {}}
    question = {"id": "m1", "role": "user", "content": "nightly backups"}
    async with serve(app) as ragstream:
        async with (
            example_server(ragstream, token="alice-token") as runtime,
            httpx.AsyncClient(base_url=runtime.url, timeout=30) as client,
        ):
            thread = f"token-{uuid.uuid4().hex}"
            response = await client.post(
                "/api/copilotkit/agent/default/run", json={**run, "threadId": thread, "messages": [question]}
            )
            assert response.status_code == 200
            types = [e["type"] for e in sse_events(response.text)]
            assert types[0] == "RUN_STARTED"
            assert types[-1] == "RUN_FINISHED", types
            view = await client.get(f"/api/threads/{thread}")
            assert view.status_code == 200
            assert [m["content"] for m in view.json()["messages"] if m["role"] == "user"] == [
                "nightly backups"
            ]
            async with httpx.AsyncClient(base_url=ragstream) as direct:
                owned = await direct.get(
                    f"/threads/{thread}", headers={"Authorization": "Bearer alice-token"}
                )
            assert owned.status_code == 200  # the thread belongs to the token's principal

        # without the token ragstream refuses, and the runtime says so and stays up
        async with (
            example_server(ragstream) as runtime,
            httpx.AsyncClient(base_url=runtime.url, timeout=30) as client,
        ):
            thread = f"token-{uuid.uuid4().hex}"
            response = await client.post(
                "/api/copilotkit/agent/default/run", json={**run, "threadId": thread, "messages": [question]}
            )
            events = sse_events(response.text)
            assert events[-1]["type"] == "RUN_ERROR", events
            assert "401" in events[-1]["message"]
            assert (await client.get(f"/api/threads/{thread}")).status_code == 401
            assert (await client.get("/api/copilotkit/info")).status_code == 200
            assert runtime.alive, runtime.log()


async def test_a_page_without_a_sign_in_says_so(browser: Browser, scenario_config: Any) -> None:
    """A ragstream that wants a token the page does not have (no RAGSTREAM_TOKEN, no sign-in): the
    documents, an existing thread and a question each say why in ragstream's words (401), not as
    raw JSON, and no turn stays on the page."""
    scenario_config.tokens = {"alice": SecretStr("alice-token")}
    app = ragstream_app(scenario_config, scenario=True, state_key=None)
    async with serve(app) as ragstream, example_server(ragstream) as runtime:
        thread = f"signed-{uuid.uuid4().hex}"
        async with httpx.AsyncClient(base_url=ragstream, timeout=30) as direct:
            run = {
                "threadId": thread,
                "runId": "r1",
                "state": {},
                "tools": [],
                "context": [],
                "forwardedProps": {},
            }
            question = {"id": "m1", "role": "user", "content": "nightly backups"}
            saved = await direct.post(
                "/agui", json={**run, "messages": [question]}, headers={"Authorization": "Bearer alice-token"}
            )
            assert saved.status_code == 200
        context = await browser.new_context(viewport={"width": 1280, "height": 800})
        page = CopilotKitPage(await context.new_page(), runtime.url, "unsigned")
        await page.page.goto(f"{runtime.url}/?thread={thread}")
        await expect(page.page.locator("#filter")).to_contain_text(
            "Could not list the documents: missing bearer token (401)"
        )
        notice = page.page.locator("#notice")
        await expect(notice).to_have_text(
            "This conversation could not be loaded: ragstream refused to show the thread "
            "(401 unauthorized): missing bearer token."
        )
        await page.wait_idle()
        await page.type_question("bakery food safety")
        await expect(notice).to_have_text(
            "ragstream refused the run (401 unauthorized): missing bearer token. "
            "This turn (“bakery food safety”) was not saved."
        )
        await page.wait_idle()
        await expect(page.questions()).to_have_count(0)
        assert not [
            text for text in await page.page.locator("#filter, #notice").all_inner_texts() if "{" in text
        ]
        assert await rendered_junk(page.page) == []
        assert all("401" in p for p in page.problems), page.problems
        assert runtime.alive, runtime.log()
        await context.close()


async def test_the_runtime_forwards_the_signed_in_users_token(scenario_config: Any) -> None:
    """Without RAGSTREAM_TOKEN the runtime passes the page's own Authorization (here an OpenID Connect
    access token from a real provider on loopback) to ragstream: on runs, reconnects and the reads the
    page makes, so each signed-in user sees their own threads."""
    require_example()
    provider = IdentityProvider()
    run = {"runId": "run-1", "state": {}, "tools": [], "context": [], "forwardedProps": {}}
    question = {"id": "m1", "role": "user", "content": "nightly backups"}
    async with serve(provider.app()) as issuer:
        provider.issuer = issuer
        scenario_config.oidc_audience = AUDIENCE
        scenario_config.oidc_issuer = issuer
        app = ragstream_app(scenario_config, scenario=True, state_key=None)
        async with (
            serve(app) as ragstream,
            example_server(ragstream) as runtime,
            httpx.AsyncClient(base_url=runtime.url, timeout=30) as client,
        ):
            alice = {"Authorization": f"Bearer {provider.token('alice')}"}
            bob = {"Authorization": f"Bearer {provider.token('bob', key=provider.key('ES256'))}"}
            thread = f"oidc-{uuid.uuid4().hex}"
            body = {**run, "threadId": thread, "messages": [question]}
            response = await client.post("/api/copilotkit/agent/default/run", json=body, headers=alice)
            types = [e["type"] for e in sse_events(response.text)]
            assert (types[0], types[-1]) == ("RUN_STARTED", "RUN_FINISHED"), types
            # ragstream saved the thread for the token's subject
            async with httpx.AsyncClient(base_url=ragstream) as direct:
                assert (await direct.get(f"/threads/{thread}", headers=alice)).status_code == 200
                assert (await direct.get(f"/threads/{thread}", headers=bob)).status_code == 404
            # the page's reads carry the same sign-in
            view = await client.get(f"/api/threads/{thread}", headers=alice)
            assert view.status_code == 200
            assert [m["content"] for m in view.json()["messages"] if m["role"] == "user"] == [
                "nightly backups"
            ]
            assert (await client.get(f"/api/threads/{thread}", headers=bob)).status_code == 404
            assert (await client.get("/api/documents", headers=alice)).status_code == 200
            # a regenerate makes a second answer; the page's switch back to the first carries her sign-in
            first_answer = view.json()["messages"][1]["id"]
            again = {**run, "runId": "run-again", "threadId": thread, "messages": [question]}
            response = await client.post("/api/copilotkit/agent/default/run", json=again, headers=alice)
            assert sse_events(response.text)[-1]["type"] == "RUN_FINISHED", response.text
            regenerated = (await client.get(f"/api/threads/{thread}", headers=alice)).json()
            assert regenerated["messages"][1]["id"] != first_answer
            switch = {"messageId": first_answer}
            switched = await client.post(f"/api/threads/{thread}/switch", json=switch, headers=alice)
            assert switched.status_code == 200, switched.text
            assert switched.json()["messages"][1]["id"] == first_answer
            assert switched.json()["branches"][first_answer]["index"] == 0
            refused_switch = await client.post(f"/api/threads/{thread}/switch", json=switch, headers=bob)
            assert refused_switch.status_code == 404, refused_switch.text
            # a reconnect (a reloaded page) replays the thread for its owner only
            connect = {**run, "runId": "connect-1", "threadId": thread, "messages": []}
            restored = await client.post("/api/copilotkit/agent/default/connect", json=connect, headers=alice)
            snapshots = [e for e in sse_events(restored.text) if e["type"] == "MESSAGES_SNAPSHOT"]
            assert snapshots and snapshots[-1]["messages"][0]["content"] == "nightly backups", restored.text
            stranger = await client.post("/api/copilotkit/agent/default/connect", json=connect, headers=bob)
            assert not [e for e in sse_events(stranger.text) if e["type"] == "MESSAGES_SNAPSHOT"]
            # another user's turn on the thread, or no sign-in at all: ragstream refuses, the runtime stays up
            other = {**run, "runId": "run-2", "threadId": thread, "messages": [question]}
            refused = sse_events(
                (await client.post("/api/copilotkit/agent/default/run", json=other, headers=bob)).text
            )
            assert refused[-1]["type"] == "RUN_ERROR" and "404" in refused[-1]["message"], refused
            anonymous = {
                **run,
                "runId": "run-3",
                "threadId": f"oidc-{uuid.uuid4().hex}",
                "messages": [question],
            }
            unsigned = sse_events(
                (await client.post("/api/copilotkit/agent/default/run", json=anonymous)).text
            )
            assert unsigned[-1]["type"] == "RUN_ERROR" and "401" in unsigned[-1]["message"], unsigned
            assert (await client.get(f"/api/threads/{thread}")).status_code == 401
            assert runtime.alive, runtime.log()


async def test_the_runtime_passes_on_the_callers_trace(tmp_path: Path) -> None:
    """docs/operating.md, "Traces": a client, or CopilotKit's runtime in front of ragstream, that sends a W3C
    ``traceparent`` gets its run recorded under its own trace. The runtime forwards only
    ``authorization`` and ``x-*`` headers; the example's passes the trace context on itself."""
    require_example()
    trace_id = secrets.token_hex(16)
    run = {"runId": "run-1", "state": {}, "tools": [], "context": [], "forwardedProps": {}}
    question = {"id": "m1", "role": "user", "content": "nightly backups"}
    with OTLPReceiver() as receiver:
        async with (
            served(otel_env(receiver), tmp_path / "data") as ragstream,
            example_server(ragstream) as runtime,
            httpx.AsyncClient(base_url=runtime.url, timeout=60) as client,
        ):
            traced = {"traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"}
            body = {**run, "threadId": f"trace-{uuid.uuid4().hex}", "messages": [question]}
            response = await client.post("/api/copilotkit/agent/default/run", json=body, headers=traced)
            events = sse_events(response.text)
            assert (events[0]["type"], events[-1]["type"]) == ("RUN_STARTED", "RUN_FINISHED"), events
            assert events[0]["metadata"][TRACE_ID_KEY] == trace_id
            receiver.wait_for(
                lambda got: any(s.name == "ragstream.run" and s.trace_id == trace_id for s in got)
            )
            # a run without a trace context starts its own trace
            body = {**run, "threadId": f"trace-{uuid.uuid4().hex}", "messages": [question]}
            untraced = sse_events((await client.post("/api/copilotkit/agent/default/run", json=body)).text)
            assert untraced[0]["metadata"][TRACE_ID_KEY] not in ("", trace_id)
            assert runtime.alive, runtime.log()


def _header_recording_ragstream(seen: dict[str, list[dict[str, str]]]) -> Starlette:
    """A stand-in for ragstream that records the headers of each request the runtime sends it (by
    route: ``run``, ``thread``, ``stop``, ``switch``, ``documents``): a run streams until its stop
    route is called; a thread is empty."""
    stopped = asyncio.Event()

    def record(route: str, request: Request) -> None:
        seen.setdefault(route, []).append(dict(request.headers))

    async def run(request: Request) -> StreamingResponse:
        record("run", request)
        body = await request.json()
        ids = {"threadId": body["threadId"], "runId": body["runId"]}

        async def events() -> AsyncIterator[str]:
            yield f"data: {json.dumps({'type': 'RUN_STARTED', **ids})}\n\n"
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopped.wait(), 20)
            yield f"data: {json.dumps({'type': 'RUN_FINISHED', **ids})}\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def thread(request: Request) -> JSONResponse:
        record("thread", request)
        view = {"threadId": request.path_params["thread"], "messages": [], "state": {}, "interrupts": []}
        return JSONResponse(view)

    async def stop(request: Request) -> JSONResponse:
        record("stop", request)
        stopped.set()
        return JSONResponse({"stopping": True}, status_code=202)

    async def switch(request: Request) -> JSONResponse:
        record("switch", request)
        return JSONResponse({"threadId": request.path_params["thread"], "messages": [], "state": {}})

    async def documents(request: Request) -> JSONResponse:
        record("documents", request)
        return JSONResponse({"documents": []})

    return Starlette(
        routes=[
            Route("/agui", run, methods=["POST"]),
            Route("/threads/{thread}", thread),
            Route("/threads/{thread}/runs/{run}/stop", stop, methods=["POST"]),
            Route("/threads/{thread}/switch", switch, methods=["POST"]),
            Route("/documents", documents),
        ]
    )


async def test_the_runtime_passes_the_callers_trace_on_to_every_ragstream_request() -> None:
    """Not only a run: the reconnect's read of the thread, a Stop and the page's own reads through
    the example's server carry the trace context of the request that caused them, so ragstream
    records each under the caller's trace (docs/operating.md, "Traces")."""
    require_example()
    seen: dict[str, list[dict[str, str]]] = {}
    thread = f"trace-{uuid.uuid4().hex}"
    run = {"threadId": thread, "state": {}, "tools": [], "context": [], "forwardedProps": {}}
    question = {"id": "m1", "role": "user", "content": "nightly backups"}

    def traced() -> dict[str, str]:
        return {"traceparent": f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01", "tracestate": "a=1"}

    async with (
        serve(_header_recording_ragstream(seen)) as ragstream,
        example_server(ragstream) as runtime,
        httpx.AsyncClient(base_url=runtime.url, timeout=60) as client,
    ):
        # a run, stopped by another request with a trace of its own
        asked, stopping = traced(), traced()
        running = asyncio.create_task(
            client.post(
                "/api/copilotkit/agent/default/run",
                json={**run, "runId": "run-1", "messages": [question]},
                headers=asked,
            )
        )
        async with asyncio.timeout(20):
            while "run" not in seen:
                await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # the runner has the run as running
        stop = await client.post(f"/api/copilotkit/agent/default/stop/{thread}", headers=stopping)
        assert stop.status_code < 300, stop.text
        events = sse_events((await running).text)
        assert events[-1]["type"] == "RUN_FINISHED", events
        # a reconnect, and the page's own reads of ragstream through the example's server
        reconnected = traced()
        connect = {**run, "runId": "connect-1", "messages": []}
        await client.post("/api/copilotkit/agent/default/connect", json=connect, headers=reconnected)
        read, switched, listed = traced(), traced(), traced()
        assert (await client.get(f"/api/threads/{thread}", headers=read)).status_code == 200
        switch = await client.post(
            f"/api/threads/{thread}/switch", json={"messageId": "m1"}, headers=switched
        )
        assert switch.status_code == 200
        assert (await client.get("/api/documents", headers=listed)).status_code == 200
        assert runtime.alive, runtime.log()

    def context(route: str, n: int = 0) -> dict[str, str | None]:
        headers = seen[route][n]
        return {name: headers.get(name) for name in ("traceparent", "tracestate")}

    assert context("run") == asked
    assert context("stop") == stopping
    assert context("thread") == reconnected
    assert context("thread", 1) == read
    assert context("switch") == switched
    assert context("documents") == listed


@asynccontextmanager
async def scenario_page(
    browser: Browser, scenario_config: Any, name: str, *, width: int = 1280
) -> AsyncIterator[tuple[CopilotKitPage, str, Any]]:
    """ragstream on the scenario agent, the example's runtime before it, and a page of the example
    opened in a new browser context of ``width`` x 800: ``(page, ragstream's URL, runtime)``."""
    app = ragstream_app(scenario_config, scenario=True, state_key=None)
    async with serve(app) as ragstream, example_server(ragstream) as runtime:
        context = await browser.new_context(viewport={"width": width, "height": 800})
        try:
            page = CopilotKitPage(await context.new_page(), runtime.url, name)
            await page.open()
            yield page, ragstream, runtime
        finally:
            await context.close()


async def test_a_failed_turn_leaves_the_thread_as_it_was(browser: Browser, scenario_config: Any) -> None:
    """RUN_ERROR: the page says so in the server's (sanitised) words and drops the unsaved turn."""
    async with scenario_page(browser, scenario_config, "error") as (page, ragstream, runtime):
        await page.ask("nightly backups")
        saved = await page.server_view(ragstream)
        shown = await page.transcript()

        await page.type_question("fail now")
        notice = page.page.locator("#notice")
        await expect(notice).to_contain_text("internal error (reference")
        await expect(notice).to_contain_text("This turn (“fail now”) was not saved.")
        await page.wait_idle()
        await expect(page.questions()).to_have_count(1)
        await page.expect_transcript(shown)
        assert "hunter2" not in await page.page.content()
        after = await page.server_view(ragstream)
        assert (after["messages"], after["state"]) == (saved["messages"], saved["state"])
        await assert_citations_match(page, ragstream, None)

        # CopilotKit reports the run error on the console; that is all it reports
        assert page.problems, "expected CopilotKit to log the RUN_ERROR"
        assert all("internal error" in p for p in page.problems), page.problems
        page.problems.clear()

        # a long question is quoted by its opening, and given back whole
        box = page.page.get_by_test_id("copilot-chat-textarea")
        await expect(box).to_have_value("fail now")
        long_question = "fail now" + " and say why in many words" * 20
        await page.type_question(long_question)
        await expect(notice).to_contain_text(
            "This turn (“fail now and say why in many words and say why in many word…”) was not"
        )
        await page.wait_idle()
        await expect(box).to_have_value(long_question)
        assert all("internal error" in p for p in page.problems), page.problems
        page.problems.clear()
        await box.fill("")

        assert (await page.ask("bakery food safety")).startswith("Found it in Harbor Street Bakery")
        assert runtime.alive, runtime.log()
        page.assert_clean()


async def test_new_chat_while_an_answer_streams(browser: Browser, scenario_config: Any) -> None:
    """Pressing "New chat" in the middle of an answer shows an empty chat under a new id (not the
    last thread's messages); the answer goes on on the server and is saved in its own thread."""
    async with scenario_page(browser, scenario_config, "new-chat-mid-answer") as (page, ragstream, runtime):
        first = page.thread_id
        await page.ask("nightly backups")
        await page.type_question("slow answer please")
        await expect(page.answers().last).to_contain_text("tok3")
        await page.page.locator("#new-chat").click()
        await expect(page.page.locator("#thread-id")).not_to_have_text(first)
        assert page.thread_id != first
        await page.wait_idle()
        await expect(page.questions()).to_have_count(0)
        await expect(page.answers()).to_have_count(0)
        await expect(page.page.get_by_text("tok3")).to_have_count(0)

        async with httpx.AsyncClient(base_url=ragstream, timeout=30) as http:
            for _ in range(100):  # the slow answer ends on the server, in the first thread
                view = (await http.get(f"/threads/{first}")).json()
                if view["activeRunId"] is None:
                    break
                await asyncio.sleep(0.2)
        assert [m["content"] for m in view["messages"] if m["role"] == "user"] == [
            "nightly backups",
            "slow answer please",
        ]
        assert (await page.ask("bakery food safety")).startswith("Found it in Harbor Street Bakery")
        await expect(page.questions()).to_have_count(1)
        assert runtime.alive, runtime.log()
        page.assert_clean()


async def test_a_refused_run_is_explained_in_ragstreams_words(browser: Browser, scenario_config: Any) -> None:
    """A run ragstream refuses (409: the thread is busy with a run from elsewhere): the page says
    why in ragstream's words (not the raw JSON of its error), drops the unsaved turn, and asks again
    once the other run is stopped."""
    async with scenario_page(browser, scenario_config, "busy") as (page, ragstream, runtime):
        await page.ask("nightly backups")
        shown = await page.transcript()
        thread = page.thread_id

        # another client's run holds the thread (a second tab, another device)
        other = {
            "threadId": thread,
            "runId": f"elsewhere-{uuid.uuid4().hex}",
            "state": {},
            "messages": [{"id": f"q-{uuid.uuid4().hex}", "role": "user", "content": "hang on"}],
            "tools": [],
            "context": [],
            "forwardedProps": {},
        }
        async with (
            httpx.AsyncClient(base_url=ragstream, timeout=30) as direct,
            direct.stream("POST", "/agui", json=other) as holding,
        ):
            assert holding.status_code == 200
            await page.type_question("bakery food safety")
            notice = page.page.locator("#notice")
            await expect(notice).to_have_text(
                f"ragstream refused the run (409 thread_busy): thread {thread!r} is busy with another "
                "run; wait for it to finish or stop it. This turn (“bakery food safety”) was not saved."
            )
            await page.wait_idle()
            await expect(page.questions()).to_have_count(1)
            await page.expect_transcript(shown)
            stop = await direct.post(f"/threads/{thread}/runs/{other['runId']}/stop")
            assert stop.status_code == 202, stop.text
        page.problems.clear()  # CopilotKit logs the RUN_ERROR on the console
        assert (await page.ask("bakery food safety")).startswith("Found it in Harbor Street Bakery")
        assert user_texts(await page.server_view(ragstream)) == ["nightly backups", "bakery food safety"]
        assert runtime.alive, runtime.log()
        page.assert_clean()


async def test_ragstream_down_and_back_while_the_page_is_open(browser: Browser, scenario_config: Any) -> None:
    """ragstream stops while the page is open: a question then says ragstream is not reachable and
    leaves the page (which cannot read the thread back, so it shows what ragstream had), and a
    reload says the conversation could not be loaded; once ragstream is back on its port the next
    answer brings the whole thread back, without the failed question."""
    port = free_port()
    ragstream = f"http://127.0.0.1:{port}"
    first = serve(ragstream_app(scenario_config, scenario=True, state_key=None), port=port)
    await first.__aenter__()
    async with example_server(ragstream) as runtime:
        try:
            context = await browser.new_context(viewport={"width": 1280, "height": 800})
            page = CopilotKitPage(await context.new_page(), runtime.url, "restart")
            await page.open()
            await page.ask("nightly backups")
            shown = await page.transcript()
            cards = await page.shown_citations()
        finally:
            await first.__aexit__(None, None, None)  # ragstream stops; the runtime and the page stay

        await page.type_question("bakery food safety")
        notice = page.page.locator("#notice")
        await expect(notice).to_have_text(
            f"ragstream is not reachable at {ragstream} (ECONNREFUSED). "
            "This turn (“bakery food safety”) was not saved."
        )
        await page.wait_idle()
        await expect(page.questions()).to_have_count(1)
        await page.expect_transcript(shown)
        assert await page.shown_citations() == cards
        # CopilotKit logs the RUN_ERROR, Chromium the page's failed read of the thread (502)
        assert page.problems and all("not reachable" in p or "502" in p for p in page.problems), page.problems
        page.problems.clear()

        # a reload while ragstream is down says the conversation could not be loaded
        await page.page.reload()
        await expect(notice).to_have_text(
            f"This conversation could not be loaded: ragstream is not reachable at {ragstream} (ECONNREFUSED)."
        )
        await page.wait_idle()
        await expect(page.questions()).to_have_count(0)
        page.problems.clear()  # the reads the page makes fail (502), CopilotKit logs the RUN_ERROR

        async with serve(ragstream_app(scenario_config, scenario=True, state_key=None), port=port):
            assert (await page.ask("observatory visitor hours")).startswith(
                "Found it in Northwind Observatory"
            )
            view = await page.server_view(ragstream)
            assert user_texts(view) == ["nightly backups", "observatory visitor hours"]
            await page.expect_transcript(conversation(view["messages"]))
            await page.reload()
            await page.expect_transcript(conversation(view["messages"]))
            assert runtime.alive, runtime.log()
            page.assert_clean()
        await context.close()


async def test_on_a_phone_the_chat_comes_first_and_nothing_overlaps(
    browser: Browser, scenario_config: Any
) -> None:
    """At a phone's width the chat has the full width, above the documents and sources: the two
    columns of a wide window squeezed the chat to a sliver, its input over the document list."""
    async with scenario_page(browser, scenario_config, "phone", width=390) as (page, _, _):
        assert (await page.ask("nightly backups")).startswith("Found it in")
        box = page.page.get_by_test_id("copilot-chat-textarea")
        await expect(box).to_be_in_viewport()
        layout = await page.page.evaluate(
            """() => {
              const rect = (e) => e.getBoundingClientRect().toJSON();
              return {
                sideways: document.documentElement.scrollWidth - document.documentElement.clientWidth,
                chat: rect(document.querySelector('.chat-pane')),
                input: rect(document.querySelector('[data-testid=copilot-chat-textarea]')),
                side: rect(document.querySelector('.side')),
              };
            }"""
        )
        assert layout["sideways"] == 0, layout
        assert layout["chat"]["width"] >= 380, layout
        assert layout["input"]["width"] >= 200, layout
        assert layout["side"]["top"] >= layout["chat"]["bottom"], layout  # below the chat, not over it
        # the answer is readable and the side panel is there when scrolled to
        await expect(page.answers().last).to_be_in_viewport()
        await page.screenshot("chat")
        await page.page.locator(".side").scroll_into_view_if_needed()
        await expect(page.page.locator("#filter .doc-list input[type=checkbox]").first).to_be_in_viewport()
        await page.screenshot("side")
        page.assert_clean()


async def test_every_button_of_the_page_has_a_name(browser: Browser, scenario_config: Any) -> None:
    """A screen reader names every button and progress bar: CopilotChat's send and add buttons are
    icons with no label of their own ("button, dimmed" is all a screen reader said of them)."""
    async with scenario_page(browser, scenario_config, "names") as (page, _, _):
        await page.ask("nightly backups")
        await page.page.get_by_test_id("copilot-chat-textarea").fill("log retention")
        snapshot = await page.page.locator("body").aria_snapshot()
        unnamed = [
            line
            for line in snapshot.splitlines()
            if re.match(r"^\s*- (button|progressbar)(\s*\[[^\]]*\])*:?$", line)
        ]
        assert unnamed == [], snapshot
        # the search tool's bar of passages read
        assert '- progressbar "Progress of search"' in snapshot, snapshot
        await expect(page.page.get_by_role("button", name="Send")).to_be_enabled()
        page.assert_clean()


async def test_a_tool_call_that_waits_for_the_user_says_so(browser: Browser, scenario_config: Any) -> None:
    """While its approval or question card shows, a tool call's card says it waits for the user, not
    that it runs; also after a reload. Approved, it runs and is done."""
    scenario_config.tool_dirs = [SEED_TOOLS]
    async with serve(scenario_app(scenario_config)) as ragstream, example_server(ragstream) as runtime:
        context = await browser.new_context(viewport={"width": 1280, "height": 800})
        page = CopilotKitPage(await context.new_page(), runtime.url, "tool-waiting")
        await page.open()
        card = page.page.locator(".interrupt")
        tool = page.page.locator(".tool").last

        await page.type_question("archive the old note")
        await expect(card.locator(".interrupt-title")).to_have_text("Approval needed")
        # announced to a screen reader as it appears: the run now waits for the user
        await expect(card.get_by_role("alert")).to_have_text("Approval needed")
        await expect(tool.locator(".tool-name")).to_have_text("archive_note")
        await expect(tool.locator(".tool-status")).to_have_text("waiting for your approval")
        await page.wait_idle()
        await page.reload()
        await expect(card.locator(".interrupt-title")).to_have_text("Approval needed")
        await expect(tool.locator(".tool-status")).to_have_text("waiting for your approval")
        await card.get_by_role("button", name="Approve").click()
        await expect(page.answers().last).to_have_text("Archived the old note.")
        await page.wait_idle()
        await expect(
            page.page.locator(".tool", has_text="archive_note").locator(".tool-status")
        ).to_have_text("done")

        await page.type_question('call pick_year {"topic": "the report"}')
        await expect(card.locator(".interrupt-title")).to_have_text("The assistant asks you")
        await expect(tool.locator(".tool-name")).to_have_text("pick_year")
        await expect(tool.locator(".tool-status")).to_have_text("waiting for your answer")
        await card.get_by_label("Your answer").fill("2024")
        await card.get_by_role("button", name="Answer").click()
        await expect(page.answers().last).to_have_text("pick_year: the report in 2024")
        await page.wait_idle()
        await expect(page.page.locator(".tool", has_text="pick_year").locator(".tool-status")).to_have_text(
            "done"
        )
        assert await rendered_junk(page.page) == []
        page.assert_clean()
        await context.close()


async def test_a_denied_tool_call_says_so(browser: Browser, scenario_config: Any) -> None:
    """A call the user denied did not run: its card says "denied", not "done", as the chat page
    does; live, and as ragstream saved it."""
    scenario_config.tool_dirs = [SEED_TOOLS]
    async with serve(scenario_app(scenario_config)) as ragstream, example_server(ragstream) as runtime:
        context = await browser.new_context(viewport={"width": 1280, "height": 800})
        page = CopilotKitPage(await context.new_page(), runtime.url, "tool-denied")
        await page.open()
        tool = page.page.locator(".tool").last
        await page.type_question("archive another note")
        await page.page.locator(".interrupt").get_by_role("button", name="Deny").click()
        await expect(page.answers().last).to_have_text("Not archived: The user denied it.")
        await page.wait_idle()
        await expect(tool.locator(".tool-args")).to_have_text("note: another note")
        await expect(tool.locator(".tool-status")).to_have_text("denied")
        await page.reload()
        await expect(tool.locator(".tool-status")).to_have_text("denied")
        page.assert_clean()
        await context.close()


async def test_approvals_and_a_tools_question_in_chromium(browser: Browser, scenario_config: Any) -> None:
    """A tool that needs the user's approval, and one that asks the user (ragstream's interrupts):
    the chat shows a card, also after a reload; Approve, Deny and an answer resume the run, and the
    page then shows the thread as ragstream saved it and goes on."""
    scenario_config.tool_dirs = [SEED_TOOLS]
    async with serve(scenario_app(scenario_config)) as ragstream, example_server(ragstream) as runtime:
        context = await browser.new_context(viewport={"width": 1280, "height": 800})
        page = CopilotKitPage(await context.new_page(), runtime.url, "interrupts")
        await page.open()
        await page.ask("nightly backups")
        card = page.page.locator(".interrupt")

        # approval, shown again after a reload, then approved
        await page.type_question("archive the old note")
        await expect(card.locator(".interrupt-title")).to_have_text("Approval needed")
        # announced to a screen reader as it appears: the run now waits for the user
        await expect(card.get_by_role("alert")).to_have_text("Approval needed")
        await expect(card.locator(".interrupt-message")).to_have_text(
            'Approve archive_note({"note":"the old note"})?'
        )
        await page.wait_idle()
        assert (await page.server_view(ragstream))["interrupts"], "ragstream waits for the approval"
        await page.reload()
        await expect(card.locator(".interrupt-message")).to_have_text(
            'Approve archive_note({"note":"the old note"})?'
        )
        # a question typed instead of a reply is not sent, and the page says why
        await page.type_question("bakery food safety")
        await expect(page.page.locator("#notice")).to_have_text(
            "Reply to the card in the chat first. “bakery food safety” was not sent."
        )
        await expect(page.questions()).to_have_count(2)
        assert all("pending interrupt" in p for p in page.problems), page.problems
        page.problems.clear()  # CopilotKit logs the run it refused on the console
        await card.get_by_role("button", name="Approve").click()
        await expect(page.answers().last).to_have_text("Archived the old note.")
        await page.wait_idle()
        await expect(card).to_have_count(0)
        view = await page.server_view(ragstream)
        assert view["interrupts"] == [] and view["state"]["archived"] == ["the old note"]
        async with httpx.AsyncClient(base_url=runtime.url) as client:
            folded = (await client.get(f"/api/copilotkit/threads/{page.thread_id}/state")).json()
        assert folded["state"] == view["state"], "the runtime's runner folded ragstream's state"
        await page.expect_transcript(conversation(view["messages"]))

        # denied in the page it was asked in
        await page.type_question("archive another note")
        await card.get_by_role("button", name="Deny").click()
        await expect(page.answers().last).to_have_text("Not archived: The user denied it.")
        await page.wait_idle()
        view = await page.server_view(ragstream)
        assert view["state"]["archived"] == ["the old note"]

        # a tool's question, answered in the card
        await page.type_question('call pick_year {"topic": "the report"}')
        await expect(card.locator(".interrupt-title")).to_have_text("The assistant asks you")
        await expect(card.locator(".interrupt-message")).to_have_text("Which year for the report?")
        await card.get_by_label("Your answer").fill("2024")
        await card.get_by_role("button", name="Answer").click()
        await expect(page.answers().last).to_have_text("pick_year: the report in 2024")
        await page.wait_idle()
        await expect(card).to_have_count(0)

        assert (await page.ask("bakery food safety")).startswith("Found it in Harbor Street Bakery")
        view = await page.server_view(ragstream)
        assert view["interrupts"] == []
        await page.expect_transcript(conversation(view["messages"]))
        await page.wait_answers_drawn()
        assert await page.shown_messages() == thread_messages(view)

        # an edit of the last question branches there, the approved calls' results kept
        results = [m["id"] for m in view["messages"] if m["role"] == "tool"]
        question = page.questions().last
        await question.hover()
        # pressed as an event: the transcript above it still settles after the approvals (the
        # button read "not stable" for 20 s in CI); the other edit tests press it with the mouse
        await question.get_by_test_id("copilot-edit-button").dispatch_event("click")
        await page.page.get_by_label("Your edited question").fill("observatory visitor hours")
        before = await page.last_answer_id()
        await page.page.get_by_label("Your edited question").press("Enter")
        await page.wait_for_answer_after(before)
        view = await page.server_view(ragstream)
        assert [m["id"] for m in view["messages"] if m["role"] == "tool"][:-1] == results[:-1]
        assert list(view["branches"]) == [view["messages"][-4]["id"]], view["branches"]
        assert view["messages"][-4]["content"] == "observatory visitor hours"
        assert await page.shown_messages() == thread_messages(view)
        await page.reload()
        await page.expect_transcript(conversation(view["messages"]))
        await expect(card).to_have_count(0)
        assert await rendered_junk(page.page) == []
        assert runtime.alive, runtime.log()
        page.assert_clean()
        await context.close()


async def test_a_reload_mid_answer_follows_the_run(browser: Browser, scenario_config: Any) -> None:
    """A reload while an answer streams: CopilotChat reconnects to the thread, the example's runtime
    shows ragstream's saved thread and joins the run still going, the answer goes on forming and ends
    as ragstream saved it. A stopped and a failed turn before it stay gone (CopilotKit's in-memory
    runner still remembers them), and a Stop after the reload drops only the turn it stops."""
    async with scenario_page(browser, scenario_config, "reload") as (page, ragstream, runtime):
        thread = page.thread_id
        await page.ask("nightly backups")
        # two turns ragstream does not keep: one stopped, one failed
        await page.type_question("slow answer please")
        await expect(page.answers().last).to_contain_text("tok3")
        await page.stop()
        await expect(page.page.locator("#notice")).to_contain_text("was not saved")
        await page.wait_idle()
        await page.type_question("fail now")
        await expect(page.page.locator("#notice")).to_contain_text("This turn (“fail now”) was not saved.")
        await page.wait_idle()
        page.problems.clear()  # CopilotKit logs the RUN_ERROR on the console
        await page.type_question("slow answer please")
        await expect(page.answers().last).to_contain_text("tok3")

        await page.page.reload()  # not page.reload(): that waits for an idle chat
        assert page.thread_id == thread
        running = page.page.locator('[data-testid="copilot-chat"][data-copilot-running="true"]')
        await expect(running).to_have_count(1)  # following the run, not showing a finished thread
        await expect(page.answers().last).to_contain_text("tok150")
        assert "tok299" not in await page.answers().last.inner_text()  # forming on the reloaded page
        assert [q for q in await page.transcript() if q.startswith("user: ")] == [
            "user: nightly backups",
            "user: slow answer please",
        ]  # not the stopped or the failed turn
        await page.wait_idle()
        view = await page.server_view(ragstream)
        assert view["activeRunId"] is None
        assert user_texts(view) == ["nightly backups", "slow answer please"]
        assert "tok299" in view["messages"][-1]["content"]
        await page.expect_transcript(conversation(view["messages"]))
        # the first answer's source card is back, as the thread's state has it
        state = rag_state(view["state"], None)
        assert state["citations"] and await page.shown_citations() == expected_citations(state)

        # a Stop after a reload into a run: only the stopped turn leaves the page
        await page.type_question("slow answer please")
        await expect(page.answers().last).to_contain_text("tok3")
        await page.page.reload()
        await expect(running).to_have_count(1)
        await expect(page.answers().last).to_contain_text("tok10")
        await page.stop()
        await expect(page.page.locator("#notice")).to_contain_text("was not saved")
        await page.wait_idle()
        await page.expect_transcript(conversation((await page.server_view(ragstream))["messages"]))
        assert user_texts(await page.server_view(ragstream)) == ["nightly backups", "slow answer please"]
        assert runtime.alive, runtime.log()
        page.assert_clean()


async def assert_page_is_the_thread(
    page: CopilotKitPage, ragstream: str, state_key: str | None
) -> dict[str, Any]:
    """The messages on screen (ids, roles, texts, tool calls) are ``GET /threads/{id}``'s, and the
    source cards are its state's citations (every card: runs here carry them all)."""
    view = await page.server_view(ragstream)
    await page.wait_answers_drawn()
    assert await page.shown_messages() == thread_messages(view)
    state = rag_state(view["state"], state_key)
    await expect(page.page.locator("#sources .source")).to_have_count(len(state["citations"]))
    assert await page.shown_citations() == expected_citations(state)
    markers = await page.page.locator("a.cite").evaluate_all("(links) => links.map((a) => a.dataset.cite)")
    assert markers and set(markers) <= set(state["citations"])
    return view


def user_texts(view: dict[str, Any]) -> list[str]:
    return [m["content"] for m in view["messages"] if m["role"] == "user"]


def after_question(view: dict[str, Any], nth: int) -> str:
    """The id of the message after the ``nth`` question: the first of its answer."""
    questions = [i for i, m in enumerate(view["messages"]) if m["role"] == "user"]
    return view["messages"][questions[nth] + 1]["id"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("state_key", STATE_KEYS)
async def test_edit_regenerate_and_switch_versions_in_chromium(
    browser: Browser, scenario_config: Any, state_key: str | None
) -> None:
    """CopilotChat's Edit, Regenerate and version pickers on ragstream's conversation tree: three
    turns, the second question edited, its answer made again, both switched back, a reload; after
    every step the page shows the thread's active branch and that branch's citations."""
    scenario_config.citations_emitted = 100  # runs carry every card: the panel is the state's cards
    app = ragstream_app(scenario_config, scenario=True, state_key=state_key)
    questions = ["nightly backups", "observatory visitor hours", "bakery food safety"]
    async with serve(app) as ragstream, example_server(ragstream, state_key=state_key) as runtime:
        context = await browser.new_context(viewport={"width": 1280, "height": 900})
        page = CopilotKitPage(await context.new_page(), runtime.url, f"versions-{state_key or 'flat'}")
        await page.open()
        for question in questions:
            await page.ask(question)
        original = await assert_page_is_the_thread(page, ragstream, state_key)
        assert original["branches"] == {}
        await expect(page.page.get_by_test_id("copilot-branch-navigation")).to_have_count(0)

        # Edit on the second question opens it in place; Send asks the edit instead
        second = page.questions().nth(1)
        second_id = await second.get_attribute("data-message-id")
        await second.hover()
        await second.get_by_test_id("copilot-edit-button").click()
        editor = page.page.get_by_label("Your edited question")
        await expect(editor).to_have_value(questions[1])
        await editor.fill("Deploying ragstream backups")
        before = await page.last_answer_id()
        await page.page.locator(".edit-form").get_by_role("button", name="Send").click()
        await page.wait_for_answer_after(before)
        edited = await assert_page_is_the_thread(page, ragstream, state_key)
        assert user_texts(edited) == [questions[0], "Deploying ragstream backups"]
        edited_id = [m["id"] for m in edited["messages"] if m["role"] == "user"][1]
        assert edited["branches"] == {edited_id: {"ids": [second_id, edited_id], "index": 1}}
        titles = {c["title"] for c in rag_state(edited["state"], state_key)["citations"].values()}
        assert "Deploying ragstream" in titles and "Northwind Observatory: visitor handbook" not in titles
        question_versions = page.page.locator(
            f'[data-message-id="{edited_id}"] [data-testid="copilot-branch-navigation"]'
        )
        await expect(question_versions).to_be_visible()  # shown without hovering: it has versions
        await expect(question_versions).to_contain_text("2/2")
        await page.screenshot("edited")

        # Regenerate on the answer: a second version of it, with a picker on its toolbar
        first_answer = after_question(edited, 1)
        before = await page.last_answer_id()
        await page.page.get_by_test_id("copilot-regenerate-button").last.click()
        await page.wait_for_answer_after(before)
        regenerated = await assert_page_is_the_thread(page, ragstream, state_key)
        second_answer = after_question(regenerated, 1)
        assert second_answer != first_answer
        assert regenerated["branches"][second_answer] == {"ids": [first_answer, second_answer], "index": 1}
        answer_versions = page.page.get_by_test_id("answer-branch-navigation")
        await expect(answer_versions).to_have_count(1)
        await expect(answer_versions).to_have_attribute("data-branch-of", second_answer)
        await expect(answer_versions).to_contain_text("2/2")
        await page.screenshot("regenerated")

        # switch back: the first answer to the edit, then the original question and its turns
        await answer_versions.get_by_role("button", name="Previous version of this answer").click()
        await page.page.locator(f'[data-message-id="{first_answer}"]').wait_for()
        await expect(answer_versions).to_contain_text("1/2")
        back = await assert_page_is_the_thread(page, ragstream, state_key)
        assert back["branches"][first_answer] == {"ids": [first_answer, second_answer], "index": 0}

        await question_versions.locator("button").first.click()
        await page.page.locator(f'[data-message-id="{second_id}"]').wait_for()
        restored = await assert_page_is_the_thread(page, ragstream, state_key)
        assert thread_messages(restored) == thread_messages(original)
        assert restored["state"] == original["state"]
        assert restored["branches"] == {second_id: {"ids": [second_id, edited_id], "index": 0}}
        await expect(
            page.page.locator(f'[data-message-id="{second_id}"] [data-testid="copilot-branch-navigation"]')
        ).to_contain_text("1/2")
        await page.screenshot("switched-back")

        # a reload shows the branch last chosen, with its versions
        await page.reload()
        await expect(page.questions()).to_have_count(3)
        reloaded = await assert_page_is_the_thread(page, ragstream, state_key)
        assert thread_messages(reloaded) == thread_messages(original)
        versions = page.page.locator(
            f'[data-message-id="{second_id}"] [data-testid="copilot-branch-navigation"]'
        )
        await expect(versions).to_contain_text("1/2")

        # forward again: the edit with the answer last shown below it, and the thread goes on there
        await versions.locator("button").last.click()
        await page.page.locator(f'[data-message-id="{edited_id}"]').wait_for()
        forward = await assert_page_is_the_thread(page, ragstream, state_key)
        assert after_question(forward, 1) == first_answer
        answer = await page.ask("observatory visitor hours")
        assert answer.startswith("Found it in Northwind Observatory")
        final = await assert_page_is_the_thread(page, ragstream, state_key)
        assert user_texts(final) == [questions[0], "Deploying ragstream backups", "observatory visitor hours"]

        # the first question edited keeps its id (nothing before it would tell ragstream otherwise)
        first = page.questions().first
        first_id = await first.get_attribute("data-message-id")
        await first.hover()
        await first.get_by_test_id("copilot-edit-button").click()
        await page.page.get_by_label("Your edited question").fill("bakery food safety")
        before = await page.last_answer_id()
        await page.page.get_by_label("Your edited question").press("Enter")
        await page.wait_for_answer_after(before)
        rewritten = await assert_page_is_the_thread(page, ragstream, state_key)
        assert user_texts(rewritten) == ["bakery food safety"]
        assert rewritten["messages"][0]["id"] == first_id
        assert rewritten["branches"][first_id]["ids"][1] == first_id
        assert runtime.alive, runtime.log()
        page.assert_clean()
        await context.close()


async def test_the_document_filter_finds_documents_as_you_type(
    browser: Browser, scenario_config: Any
) -> None:
    """The filter's list is ragstream's ``GET /documents?q=``: a knowledge base of thousands is
    searched rather than listed; the list says how many match, and a found document can be chosen."""
    async with scenario_page(browser, scenario_config, "filter-search") as (page, ragstream, _):
        async with httpx.AsyncClient(base_url=ragstream) as api:
            total = (await api.get("/documents")).json()["total"]
        count = page.page.locator("#filter .doc-count")
        await expect(count).to_have_text(f"{total} documents")
        await page.page.locator("#filter-search").fill("bakery")
        await expect(count).to_have_text("1 document")
        await expect(page.page.locator("#filter .doc-list li")).to_have_text(
            ["Harbor Street Bakery: food safety procedures"]
        )
        await page.document_checkbox("Harbor Street Bakery: food safety procedures").check()
        await expect(page.page.locator("#filter .filter-summary")).to_contain_text(
            "Answers use only: Harbor Street Bakery: food safety procedures."
        )
        await page.page.locator("#filter-search").fill("no such document anywhere")
        await expect(count).to_have_text("0 documents")
        await page.page.locator("#filter-search").fill("")
        await expect(count).to_have_text(f"{total} documents")
        page.assert_clean()
