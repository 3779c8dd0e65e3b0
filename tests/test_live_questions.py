"""A tool's ``ask`` answered live, through the real server (issue 29, part 2): the question reaches
the client mid-run as ``ragstream.question``, the answer comes back on
``POST /threads/{id}/runs/{run}/answers`` (from any worker, only from the thread's owner), and the
tool goes on where it paused; no answer in time fails the call, not the run. Clients that do not
answer live, and runs whose client left while a question waited, keep the interrupt-and-rerun path.

The tool is ``book_trip`` (tests/seed_tools), which logs each start of itself.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from rag_tools import AgentDeps, ToolContext
from rag_tools.tools import ask
from ragstream.agui.questions import RunQuestions
from ragstream.runs.questions import MemoryQuestionBus
from tests.protocol import check_stream, parse_sse, run_body
from tests.test_server_http import assert_error
from tests.test_tool_results import seed_chat, seed_server, seed_workers

LIVE = {"ragstream": {"liveQuestions": True}}
QUESTION = "ragstream.question"
QUESTION_END = "ragstream.question_end"

OnEvent = Callable[[dict[str, Any]], Awaitable[bool | None]]


async def follow(
    http: httpx.AsyncClient, body: dict[str, Any], on_event: OnEvent, headers: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """Stream one run; ``on_event`` sees each event as it arrives and returns True to leave the run."""
    events: list[dict[str, Any]] = []
    async with http.stream("POST", "/agui", json=body, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        buffer = ""
        async for chunk in response.aiter_text():
            buffer += chunk
            while "\n\n" in buffer:
                block, buffer = buffer.split("\n\n", 1)
                for _, event in parse_sse(block + "\n\n"):
                    events.append(event)
                    if await on_event(event):
                        return events
    return events


def custom(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e["value"] for e in events if e["type"] == "CUSTOM" and e["name"] == name]


def starts(log: Path) -> list[str]:
    lines = log.read_text().splitlines() if log.exists() else []
    return [json.loads(line)["book_trip"] for line in lines if "book_trip" in line]


def trip(thread: str, run: str, live: bool = True, **args: Any) -> dict[str, Any]:
    text = f"call book_trip {json.dumps({'city': 'Oslo', **args})}"
    return run_body(thread, run, text, **({"forwardedProps": LIVE} if live else {}))


async def test_a_live_answer_continues_the_same_tool_call(
    scenario_config: Any,
    tool_log: Path,
) -> None:
    async with seed_server(scenario_config) as (url, _), httpx.AsyncClient(base_url=url, timeout=30) as http:
        answers: list[httpx.Response] = []
        route = "/threads/trip/runs/r1/answers"

        async def answer(event: dict[str, Any]) -> None:
            if event["type"] == "CUSTOM" and event["name"] == QUESTION:
                qid = event["value"]["questionId"]
                answers.append(await http.post(route, json={"questionId": "nope", "answer": "x"}))
                answers.append(await http.post(route, json={"questionId": qid}))
                answers.append(await http.post(route, json={"questionId": qid, "answer": "May 3"}))
                answers.append(await http.post(route, json={"questionId": qid, "answer": "June 9"}))

        events = await follow(http, trip("trip", "r1"), answer)
        late = await http.post(route, json={"questionId": "any", "answer": "x"})
        view = (await http.get("/threads/trip")).json()
    check_stream(events, {})
    unknown, invalid, delivered, second = answers
    assert unknown.status_code == 404 and "asked no question 'nope'" in unknown.json()["error"]["message"]
    assert invalid.status_code == 422 and '"declined": true' in invalid.json()["error"]["message"]
    assert delivered.status_code == 202 and delivered.json()["delivered"] is True
    assert second.status_code == 409 and second.json()["error"]["code"] == "question_closed"
    assert late.status_code == 409 and late.json()["error"]["code"] == "run_ended"

    [asked] = custom(events, QUESTION)
    [ended] = custom(events, QUESTION_END)
    call_id = next(e["toolCallId"] for e in events if e["type"] == "TOOL_CALL_START")
    assert asked["question"] == "When do you travel to Oslo?" and asked["toolCallId"] == call_id
    assert asked["tool"] == "book_trip" and asked["timeoutSeconds"] == 120
    assert ended == {**{k: asked[k] for k in ("questionId", "toolCallId", "tool")}, "outcome": "answered"}
    types = [(e["type"], e.get("name")) for e in events]
    assert types.index(("CUSTOM", QUESTION)) < types.index(("TOOL_CALL_RESULT", None))
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert result["content"] == "Oslo booked for May 3"
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"]["type"] == "success"
    assert starts(tool_log) == [call_id]  # one start: the call went on from its ask
    assert view["interrupts"] == [] and view["messages"][-1]["content"] == "book_trip: Oslo booked for May 3"


async def test_no_answer_in_time_or_a_declined_question_fails_the_call_not_the_run(
    scenario_config: Any,
) -> None:
    async with seed_server(scenario_config) as (url, _), httpx.AsyncClient(base_url=url, timeout=30) as http:

        async def wait(event: dict[str, Any]) -> None:
            return None

        waited = await follow(http, trip("slow", "r1", timeout=0.3), wait)

        async def decline(event: dict[str, Any]) -> None:
            if event["type"] == "CUSTOM" and event["name"] == QUESTION:
                body = {
                    "questionId": event["value"]["questionId"],
                    "declined": True,
                    "reason": "not sure yet",
                }
                assert (await http.post("/threads/slow/runs/r2/answers", json=body)).status_code == 202

        declined = await follow(http, trip("slow", "r2"), decline)
        view = (await http.get("/threads/slow")).json()
    for events, outcome in ((waited, "timeout"), (declined, "declined")):
        check_stream(events, {})
        assert [v["outcome"] for v in custom(events, QUESTION_END)] == [outcome]
        assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"]["type"] == "success"
    assert [m["content"] for m in view["messages"] if m["role"] == "assistant" and m.get("content")] == [
        "Failed: The user did not answer 'When do you travel to Oslo?' within 0.3 s.",
        "Failed: The user declined to answer 'When do you travel to Oslo?': not sure yet",
    ]


async def test_without_live_answers_or_after_the_client_left_the_question_is_an_interrupt(
    scenario_config: Any,
    tool_log: Path,
) -> None:
    # no grace for a reconnect: the replay below would otherwise be one, and keep the question live
    scenario_config.disconnect_grace_seconds = 0
    async with seed_server(scenario_config) as (url, _), httpx.AsyncClient(base_url=url, timeout=30) as http:
        # a client that does not answer live (no forwardedProps): the run ends with the interrupt
        plain = await follow(http, trip("plain", "r1", live=False), _never)
        # a live client that leaves while the question waits: the run ends by itself, interrupted
        leaving = await follow(
            http,
            trip("left", "r1"),
            lambda e: _true_if(e["type"] == "CUSTOM" and e["name"] == QUESTION),
        )
        replay = await http.get("/threads/left/runs/r1/events", timeout=30)
        view = (await http.get("/threads/left")).json()
        [interrupt] = view["interrupts"]
        resume = {
            "interruptId": interrupt["id"],
            "status": "resolved",
            "payload": {"approved": True, "answer": "June 9"},
        }
        resumed = await follow(http, run_body("left", "r2", None, resume=[resume]), _never)
    assert plain[-1]["outcome"]["type"] == "interrupt" and custom(plain, QUESTION) == []
    [asked] = plain[-1]["outcome"]["interrupts"]
    assert asked["metadata"]["kind"] == "question" and asked["message"] == "When do you travel to Oslo?"

    assert custom(leaving, QUESTION) and leaving[-1]["type"] == "CUSTOM"  # we left mid-run
    rest = [e for _, e in parse_sse(replay.text)]
    assert [v["outcome"] for v in custom(rest, QUESTION_END)] == ["interrupt"]
    assert rest[-1]["type"] == "RUN_FINISHED" and rest[-1]["outcome"]["type"] == "interrupt"
    assert interrupt["message"] == "When do you travel to Oslo?"
    check_stream(resumed, {})
    assert next(e for e in resumed if e["type"] == "TOOL_CALL_RESULT")["content"] == "Oslo booked for June 9"
    # the interrupt path runs the tool again from the start: two starts per call, as before
    plain_call = plain[-1]["outcome"]["interrupts"][0]["toolCallId"]
    left_call = interrupt["toolCallId"]
    assert starts(tool_log) == [plain_call, left_call, left_call]


async def test_a_resume_that_does_not_fit_the_question_is_422_and_the_question_stays(
    scenario_config: Any,
    tool_log: Path,
) -> None:
    """Approving a tool's question without its answer (or with a payload of the wrong shape) is
    refused before the run: the tool is not run again from its start only to ask once more, and
    the interrupt stays pending for a resume that fits."""
    async with seed_server(scenario_config) as (url, _), httpx.AsyncClient(base_url=url, timeout=30) as http:
        plain = await follow(http, trip("misfit", "r1", live=False), _never)
        [interrupt] = plain[-1]["outcome"]["interrupts"]
        before = (await http.get("/threads/misfit")).json()
        for number, (payload, fragment) in enumerate(
            (
                ({"approved": True}, 'approving it needs the answer, a string in "answer"'),
                ({"approved": True, "answer": 5}, 'a string in "answer"'),
                ({"approved": "yes", "answer": "June 9"}, "does not match the `responseSchema`"),
                ("June 9", "does not match the `responseSchema`"),
            ),
            start=2,
        ):
            resume = {"interruptId": interrupt["id"], "status": "resolved", "payload": payload}
            error = assert_error(
                await http.post("/agui", json=run_body("misfit", f"r{number}", None, resume=[resume])),
                422,
                "resume[0].payload: ",
            )
            assert fragment in error["message"] and error["details"][0]["loc"] == ["resume", 0, "payload"]
        after = (await http.get("/threads/misfit")).json()
        assert (after["version"], after["interrupts"]) == (before["version"], before["interrupts"])
        answered = {"approved": True, "answer": "June 9"}
        resume = {"interruptId": interrupt["id"], "status": "resolved", "payload": answered}
        resumed = await follow(http, run_body("misfit", "r9", None, resume=[resume]), _never)
    check_stream(resumed, {})
    assert next(e for e in resumed if e["type"] == "TOOL_CALL_RESULT")["content"] == "Oslo booked for June 9"
    assert starts(tool_log) == [interrupt["toolCallId"]] * 2  # the first run and the one that fit


async def test_only_the_threads_owner_may_answer(scenario_config: Any) -> None:
    scenario_config.tokens = {"alice": SecretStr("token-a"), "bob": SecretStr("token-b")}
    alice, bob = ({"Authorization": f"Bearer token-{n}"} for n in "ab")
    async with seed_server(scenario_config) as (url, _), httpx.AsyncClient(base_url=url, timeout=30) as http:
        tried: list[httpx.Response] = []

        async def others_then_owner(event: dict[str, Any]) -> None:
            if event["type"] == "CUSTOM" and event["name"] == QUESTION:
                body = {"questionId": event["value"]["questionId"], "answer": "never"}
                route = "/threads/mine/runs/r1/answers"
                tried.append(await http.post(route, json=body, headers=bob))
                tried.append(await http.post(route, json=body))
                tried.append(await http.post(route, json={**body, "answer": "May 3"}, headers=alice))

        events = await follow(http, trip("mine", "r1"), others_then_owner, headers=alice)
    by_bob, anonymous, by_alice = tried
    assert by_bob.status_code == 404 and by_bob.json()["error"]["message"] == (
        "run 'r1' not found in thread 'mine'"
    )
    assert anonymous.status_code == 401
    assert by_alice.status_code == 202
    assert next(e for e in events if e["type"] == "TOOL_CALL_RESULT")["content"] == "Oslo booked for May 3"


@pytest.mark.timeout(360)
async def test_an_answer_posted_to_another_worker_reaches_the_run(
    scenario_config: Any, tool_log: Path, redis_url: str, redis_prefix: str
) -> None:
    a, b = seed_workers(scenario_config, redis_url, redis_prefix, tool_log)
    try:
        await asyncio.gather(a.ready(timeout=240), b.ready(timeout=240))  # slow on a loaded machine
        async with (
            httpx.AsyncClient(base_url=a.url, timeout=30) as on_a,
            httpx.AsyncClient(base_url=b.url, timeout=30) as on_b,
        ):
            posted: list[httpx.Response] = []

            async def answer_on_b(event: dict[str, Any]) -> None:
                if event["type"] == "CUSTOM" and event["name"] == QUESTION:
                    body = {"questionId": event["value"]["questionId"], "answer": "May 3"}
                    posted.append(await on_b.post("/threads/far/runs/r1/answers", json=body))
                    posted.append(await on_b.post("/threads/far/runs/r1/answers", json=body))

            events = await follow(on_a, trip("far", "r1"), answer_on_b)
    finally:
        a.stop()
        b.stop()
    check_stream(events, {})
    assert [r.status_code for r in posted] == [202, 409]
    assert next(e for e in events if e["type"] == "TOOL_CALL_RESULT")["content"] == "Oslo booked for May 3"
    assert len(starts(tool_log)) == 1


async def _never(event: dict[str, Any]) -> None:
    return None


async def _true_if(condition: bool) -> bool:
    return condition


@pytest.mark.timeout(180)
async def test_the_chat_page_answers_live_and_after_leaving_through_the_interrupt(
    scenario_config: Any, tool_log: Path
) -> None:
    from playwright.async_api import expect

    async with seed_chat(scenario_config, "live-questions") as (url, chat):
        page = chat.page
        # live: the card shows while the run goes on; the answer continues the same tool call
        await chat.type_question('call book_trip {"city": "Oslo"}')
        card = page.locator("#approvals .approval-question[data-question-id]")
        await expect(card.locator("h3")).to_have_text("When do you travel to Oslo?")
        await expect(card.locator(".question-wait")).to_have_text(
            "The tool waits for your answer (up to 2 min)."
        )
        await expect(page.locator("#stop")).to_be_visible()  # the run is still open
        await expect(page.locator("#composer-hint")).to_have_text("A tool is waiting for your answer above.")
        await chat.screenshot("live-question")
        before = await chat.answers().count()
        await card.locator("input.question-answer").fill("May 3")
        await card.get_by_role("button", name="Answer").click()
        assert await chat.wait_for_new_answer(before) == "book_trip: Oslo booked for May 3"
        await expect(page.locator("#approvals")).to_be_hidden()
        assert len(starts(tool_log)) == 1  # asked once, answered in place
        thread = chat.thread_id
        assert (await chat.server_view())["interrupts"] == []

        # the page leaves while a question waits: the run ends with it as an interrupt, which the
        # page shows when it comes back; the answer then runs the tool again
        await chat.type_question('call book_trip {"city": "Bergen"}')
        await expect(card.locator("h3")).to_have_text("When do you travel to Bergen?")
        await page.goto("about:blank")
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            for _ in range(300):
                view = (await http.get(f"/threads/{thread}")).json()
                if view["interrupts"] and view["activeRunId"] is None:
                    break
                await asyncio.sleep(0.05)
        await chat.open(f"#thread={thread}")
        asked = page.locator("#approvals .approval-question[data-interrupt-id]")
        await expect(asked.locator("h3")).to_have_text("When do you travel to Bergen?")
        before = await chat.answers().count()
        await asked.locator("input.question-answer").fill("June 9")
        await asked.get_by_role("button", name="Answer").click()
        assert await chat.wait_for_new_answer(before) == "book_trip: Bergen booked for June 9"
        bergen = starts(tool_log)[1:]
        assert len(bergen) == 2 and bergen[0] == bergen[1]  # the same call, started again
        await chat.screenshot("after-interrupt")
        chat.assert_clean_console()


async def test_a_tool_call_waiting_for_the_users_answer_says_so(scenario_config: Any, tool_log: Path) -> None:
    """The call of a tool that asked the user says it waits for the answer, live or as an interrupt
    (not "running…" while nothing runs, nor "waiting for your approval" when no approval was asked)."""
    from playwright.async_api import expect

    async with seed_chat(scenario_config, "question-status") as (url, chat):
        page = chat.page
        await chat.ask("nightly backups")
        thread = chat.thread_id
        await chat.type_question('call book_trip {"city": "Oslo"}')
        await expect(page.locator("#approvals .approval-question h3")).to_have_text(
            "When do you travel to Oslo?"
        )
        tool = page.locator("#log .tool").last
        await expect(tool.locator(".tool-name")).to_have_text("book_trip")
        await expect(tool.locator(".tool-status")).to_have_text("waiting for your answer")
        # the page leaves; the question comes back as an interrupt
        await page.goto("about:blank")
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            for _ in range(300):
                view = (await http.get(f"/threads/{thread}")).json()
                if view["interrupts"] and view["activeRunId"] is None:
                    break
                await asyncio.sleep(0.05)
        await chat.open(f"#thread={thread}")
        await expect(page.locator("#approvals .approval-question h3")).to_have_text(
            "When do you travel to Oslo?"
        )
        await expect(tool.locator(".tool-status")).to_have_text("waiting for your answer")
        before = await chat.answers().count()
        await page.locator("#approvals input.question-answer").fill("May 3")
        await page.locator("#approvals").get_by_role("button", name="Answer").click()
        assert await chat.wait_for_new_answer(before) == "book_trip: Oslo booked for May 3"
        await expect(
            page.locator("#log .tool", has_text="book_trip").last.locator(".tool-status")
        ).to_have_text("done")
        chat.assert_clean_console()


async def test_a_page_reloaded_while_a_question_waits_answers_it_live(
    scenario_config: Any, tool_log: Path
) -> None:
    """A reload within the grace for a reconnect picks the run up with its waiting question: the
    card is back, live, and its answer continues the same tool call."""
    from playwright.async_api import expect

    async with seed_chat(scenario_config, "live-question-reload") as (_url, chat):
        page = chat.page
        await chat.ask("nightly backups")  # saved: the thread's id is in the URL from here on
        await chat.type_question('call book_trip {"city": "Oslo"}')
        card = page.locator("#approvals .approval-question[data-question-id]")
        await expect(card.locator("h3")).to_have_text("When do you travel to Oslo?")
        await chat.reload()
        await expect(card.locator("h3")).to_have_text("When do you travel to Oslo?")
        await expect(page.locator("#stop")).to_be_visible()  # the run goes on, followed
        before = await chat.answers().count()
        await card.locator("input.question-answer").fill("May 3")
        await card.get_by_role("button", name="Answer").click()
        assert await chat.wait_for_new_answer(before) == "book_trip: Oslo booked for May 3"
        assert len(starts(tool_log)) == 1  # asked once, answered in place after the reload
        view = await chat.server_view()
        assert view["interrupts"] == [] and view["activeRunId"] is None
        assert view["messages"][-1]["content"] == "book_trip: Oslo booked for May 3"
        chat.assert_clean_console()


async def test_enter_that_ends_an_input_method_composition_does_not_send_the_answer(
    scenario_config: Any, tool_log: Path
) -> None:
    """Typing with an input method (Japanese, Chinese, ...), Enter confirms the composed text; only
    the next Enter sends the answer, as in the question box."""
    from playwright.async_api import expect

    async with seed_chat(scenario_config, "live-question-ime") as (_url, chat):
        page = chat.page
        await chat.type_question('call book_trip {"city": "Kyoto"}')
        card = page.locator("#approvals .approval-question[data-question-id]")
        field = card.locator("input.question-answer")
        await field.fill("五月三日")
        await field.dispatch_event("keydown", {"key": "Enter", "isComposing": True})
        await page.wait_for_timeout(300)
        await expect(field).to_have_value("五月三日")  # still there: not sent
        await expect(card.locator(".approval-answered")).to_have_count(0)
        before = await chat.answers().count()
        await field.press("Enter")
        assert await chat.wait_for_new_answer(before) == "book_trip: Kyoto booked for 五月三日"
        chat.assert_clean_console()


async def test_a_question_is_open_before_the_client_hears_of_it() -> None:
    """An answer sent the moment the question event arrives must find the question open, even when
    opening it takes a round trip (a Redis bus on another host): here the bus waits 0.2 s first."""

    class SlowToOpen(MemoryQuestionBus):
        async def open(self, key: str, question_id: str, ttl: float) -> asyncio.Future[dict[str, Any]]:
            await asyncio.sleep(0.2)
            return await super().open(key, question_id, ttl)

    bus = SlowToOpen()
    key = "thread/run"
    statuses: list[str] = []

    async def model(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        last = messages[-1].parts[-1]
        if isinstance(last, ToolReturnPart):
            yield str(last.content)
        else:
            yield {0: DeltaToolCall(name="when", json_args="{}")}

    agent = Agent(FunctionModel(stream_function=model), deps_type=AgentDeps)

    @agent.tool
    async def when(ctx: RunContext[AgentDeps]) -> str:
        return await ask(ctx, "When?")

    async def on_events(ctx: RunContext[AgentDeps], stream: Any) -> None:
        async for event in stream:
            value = getattr(getattr(event, "event", None), "value", None)
            if isinstance(value, dict) and "question" in value:
                statuses.append(await bus.answer(key, value["questionId"], {"answer": "at once"}))

    deps = AgentDeps(client=None, tool_context=ToolContext())
    deps.questions = RunQuestions(bus, key, timeout=5)
    result = await agent.run("go", deps=deps, event_stream_handler=on_events)
    assert statuses == ["delivered"]
    assert result.output == "at once"
