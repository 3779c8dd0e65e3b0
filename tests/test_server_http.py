"""Every route of the server over real HTTP on loopback: good requests, every class of bad one."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from tests.conftest import CORPUS_DOCUMENTS, scenario_app
from tests.protocol import check_stream, parse_sse, run_body
from tests.servers import serve, serving
from tests.test_documents_api import finished_job


@asynccontextmanager
async def server(config: Any, **overrides: Any) -> AsyncIterator[httpx.AsyncClient]:
    for key, value in overrides.items():
        setattr(config, key, value)
    async with serve(scenario_app(config)) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        yield client


async def run(
    client: httpx.AsyncClient, body: dict[str, Any], **kw: Any
) -> tuple[httpx.Response, list[dict[str, Any]]]:
    response = await client.post("/agui", json=body, **kw)
    assert response.status_code < 500, response.text
    events = [e for _, e in parse_sse(response.text)] if response.status_code == 200 else []
    return response, events


def assert_error(response: httpx.Response, status: int, fragment: str = "") -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert error["status"] == status
    assert fragment.lower() in error["message"].lower(), error
    assert "Traceback" not in response.text
    return error


async def test_run_streams_sse_with_ids_and_headers(scenario_config: Any) -> None:
    async with server(scenario_config) as client:
        response = await client.post("/agui", json=run_body("t", "r1"))
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-accel-buffering"] == "no"
        assert response.headers["cache-control"] == "no-store"
        assert "\r\n" not in response.text
        frames = parse_sse(response.text)
        assert [i for i, _ in frames] == list(range(1, len(frames) + 1))  # per-run sequence numbers
        # RUN_STARTED names the question it answers, for a client that did not send it (a follower)
        started = frames[0][1]
        assert started["input"]["messages"] == [{"id": "u-r1", "role": "user", "content": "nightly backups"}]
        assert (started["input"]["threadId"], started["input"]["runId"]) == ("t", "r1")
        state = check_stream([e for _, e in frames], {})
        view = (await client.get("/threads/t")).json()
        assert view["state"] == state
        assert view["title"] == "nightly backups"


async def test_keepalive_comments_while_a_run_is_quiet(scenario_config: Any) -> None:
    async with server(scenario_config, keepalive_seconds=0.05, run_timeout=0.5) as client:
        response = await client.post("/agui", json=run_body("t", "r1", "hang"))
        assert ": ping" in response.text
        events = [e for _, e in parse_sse(response.text)]
        check_stream(events, {})
        assert events[-1]["code"] == "timeout"


# pydantic-ai warns as it skips the content part of an unknown kind: what the test sends
@pytest.mark.filterwarnings("ignore:AG-UI content the installed:UserWarning")
async def test_bad_requests_are_4xx_with_a_message(scenario_config: Any) -> None:
    async with server(scenario_config, max_body_bytes=4096) as client:
        assert_error(
            await client.post("/agui", content=b"{}", headers={"content-type": "text/plain"}),
            415,
            "application/json",
        )
        assert_error(await client.post("/agui", content=b"{}"), 415)
        assert_error(
            await client.post("/agui", content=b"{nope", headers={"content-type": "application/json"}),
            422,
            "RunAgentInput",
        )
        error = assert_error(await client.post("/agui", json={"runId": "r"}), 422)
        assert ["threadId"] in [d["loc"] for d in error["details"]]
        assert_error(await client.post("/agui", json=run_body("t", "r", "x" * 5000)), 413, "4096")
        assert_error(
            await client.post("/agui", json=run_body("t", "r", state=[1, 2])),
            422,
            "state must be a JSON object",
        )
        error = assert_error(
            await client.post("/agui", json=run_body("t", "r", state={"document_filter": "guide"})),
            422,
            "state",
        )
        assert error["details"][0]["loc"] == ["state", "document_filter"]
        assert_error(await client.post("/agui", json=run_body("bad thread/id", "r")), 422, "threadId")
        # ragstream's own options: a misspelt or mistyped one is refused, not silently ignored
        for ours, loc in (
            ({"liveQuestions": "yes"}, ["forwardedProps", "ragstream", "liveQuestions"]),
            ({"liveQuestion": True}, ["forwardedProps", "ragstream", "liveQuestion"]),
            (5, ["forwardedProps", "ragstream"]),
        ):
            body = {**run_body("t", "r"), "forwardedProps": {"ragstream": ours, "theirs": {"any": 1}}}
            error = assert_error(await client.post("/agui", json=body), 422, "forwardedProps.ragstream")
            assert error["details"][0]["loc"] == loc, error
        assert (await client.get("/threads/t")).status_code == 404  # nothing was started
        assert_error(
            await client.post("/agui", json={**run_body("t", "r"), "messages": [{"role": "user"}]}), 422
        )
        user = {"role": "user", "content": "nightly backups"}
        for messages, fragment in (
            ([{**user, "id": "u1"}, {**user, "id": "u1"}], "messages[1].id repeats the id of messages[0]"),
            ([{**user, "id": ""}], "messages[0].id must not be empty"),
        ):
            error = assert_error(
                await client.post("/agui", json={**run_body("t", "r"), "messages": messages}), 422, fragment
            )
            assert error["details"][0]["loc"] == ["messages", int(fragment[9]), "id"]
        for content in ([], [{"type": "a-kind-from-the-future"}]):
            error = assert_error(
                await client.post(
                    "/agui",
                    json={**run_body("t", "r"), "messages": [{**user, "id": "u1", "content": content}]},
                ),
                422,
                "messages[0] has no content this server can read",
            )
            assert error["details"][0]["loc"] == ["messages", 0, "content"]
        # a message or part of a newer protocol would be dropped by the adapter: refused, named
        for messages, fragment, loc in (
            (
                [{"id": "x1", "role": "alien", "content": "hi"}, {**user, "id": "u1"}],
                "messages[0] has role 'alien', which this server does not know",
                ["messages", 0, "role"],
            ),
            (
                [{**user, "id": "u1", "content": [{"type": "text", "text": "hi"}, {"type": "hologram"}]}],
                "messages[0] has content this server cannot read (type 'hologram')",
                ["messages", 0, "content"],
            ),
        ):
            error = assert_error(
                await client.post("/agui", json={**run_body("t", "r"), "messages": messages}), 422, fragment
            )
            assert error["details"][0]["loc"] == loc
        system = {"id": "s1", "role": "system", "content": "Answer briefly."}
        reasoning = {"id": "g1", "role": "reasoning", "content": "Thinking it over."}
        for messages in ([system], [reasoning], [system, reasoning]):
            error = assert_error(
                await client.post("/agui", json={**run_body("t", "r"), "messages": messages}),
                422,
                "messages hold nothing to answer: a new thread needs a user message",
            )
            assert error["details"][0]["loc"] == ["messages"]
        resume = {"interruptId": "int-nope", "status": "resolved", "payload": {"approved": True}}
        error = assert_error(
            await client.post("/agui", json=run_body("t2", "r2", None, resume=[resume])),
            409,
            "resume[0] answers interrupt 'int-nope', which is not pending on this thread (pending: nothing)",
        )
        assert error["code"] == "interrupt_not_pending"
        for thread in ("t", "t2"):
            assert (await client.get(f"/threads/{thread}")).status_code == 404  # the rejects made nothing


async def test_a_frontend_tool_named_like_a_server_tool_is_422_and_changes_nothing(
    scenario_config: Any,
) -> None:
    """A client tool that takes a server tool's name (``search``) is refused before the stream: the
    run could only fail on it once started (pydantic-ai's name conflict), and the thread would get
    a 200 and a RUN_ERROR instead of a reason it can fix."""
    async with server(scenario_config) as client:
        await run(client, run_body("tools", "r1"))
        before = (await client.get("/threads/tools")).json()
        clash = {"name": "pick_color", "description": "a browser tool", "parameters": {}}
        search = {"name": "search", "description": "the browser's own search", "parameters": {}}
        error = assert_error(
            await client.post("/agui", json=run_body("tools", "r2", "pick", tools=[clash, search])),
            422,
            "tools[1].name 'search' is the name of a server tool",
        )
        assert error["details"][0]["loc"] == ["tools", 1, "name"]
        after = (await client.get("/threads/tools")).json()
        assert (after["messages"], after["state"], after["version"]) == (
            before["messages"],
            before["state"],
            before["version"],
        )
        response, events = await run(client, run_body("tools", "r2", "pick", tools=[clash]))
        assert response.status_code == 200 and events[-1]["type"] == "RUN_FINISHED", events[-1]
        assert events[-1]["outcome"]["pendingToolCallIds"], events[-1]


async def test_a_tool_result_for_a_call_not_waiting_on_one_is_409_and_changes_nothing(
    scenario_config: Any,
) -> None:
    """A tool message answers a frontend call the thread waits on. One for a call already answered
    (a stale tab, a result "edited" after the answer), for a call never made, or on a new thread was
    dropped by pydantic-ai while the run "succeeded": the client's result vanished, and a stale
    result even moved the thread back to the answered call, hiding the answer with no branch to
    pick it by. It is refused before the run, naming the call and what the thread waits on."""
    pick = {"name": "pick_color", "description": "a browser tool", "parameters": {}}
    async with server(scenario_config) as client:
        _, events = await run(client, run_body("pick", "r1", "pick", tools=[pick]))
        (call_id,) = events[-1]["outcome"]["pendingToolCallIds"]
        shown = (await client.get("/threads/pick")).json()["messages"]
        result = {"id": "t-red", "role": "tool", "toolCallId": call_id, "content": "red"}
        _, events = await run(client, run_body("pick", "r2", None, tools=[pick], messages=[*shown, result]))
        assert [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"] == ["You picked red."]
        before = (await client.get("/threads/pick")).json()
        stale = {**result, "id": "t-blue", "content": "blue"}
        bogus = {**result, "id": "t-bogus", "toolCallId": "call-never-made"}
        for thread, messages, named in (
            ("pick", [*shown, stale], call_id),
            ("pick", [*before["messages"], bogus], "call-never-made"),
            ("new-pick", [bogus], "call-never-made"),
        ):
            error = assert_error(
                await client.post(
                    "/agui", json=run_body(thread, "r3", None, tools=[pick], messages=messages)
                ),
                409,
                f"is a result for tool call {named!r}, which this thread is not waiting on (waiting on: nothing)",
            )
            assert error["code"] == "tool_call_not_pending"
            assert error["details"][0]["loc"] == ["messages", len(messages) - 1, "toolCallId"]
        after = (await client.get("/threads/pick")).json()
        assert (after["messages"], after["branches"], after["state"], after["version"]) == (
            before["messages"],
            before["branches"],
            before["state"],
            before["version"],
        )
        assert (await client.get("/threads/new-pick")).status_code == 404
        _, events = await run(client, run_body("pick", "r3", "nightly backups"))
        assert events[-1]["type"] == "RUN_FINISHED", events[-1]


async def test_state_item_keys_that_only_look_like_numbers_are_404(scenario_config: Any) -> None:
    """``①`` and ``²`` pass ``str.isdigit`` but not ``int``: a key like that was a 500."""
    async with server(scenario_config) as client:
        await run(client, run_body("keys", "r1"))
        assert (await client.get("/threads/keys/state/citations/1")).json()["value"]["index"] == 1
        for field in ("citations", "qa_history"):
            for key in ("①", "²", "１"):
                response = await client.get(f"/threads/keys/state/{field}/{key}")
                assert_error(response, 404, f"has no state item {field}[{key!r}]")


async def test_query_numbers_are_plain_decimal_digits(scenario_config: Any) -> None:
    """``?after=`` takes what ``Last-Event-ID`` takes: Python's ``int`` also reads ``1_0``, `` 5``,
    ``+1`` and ``١`` (an Arabic-Indic one), so ``?after=1_0`` replayed from event 10 where the
    same value as ``Last-Event-ID`` was a 422, and ``?limit=٥`` listed five threads."""
    async with server(scenario_config) as client:
        await run(client, run_body("nums", "r1"))
        events = "/threads/nums/runs/r1/events"
        assert_error(await client.get(events, headers={"Last-Event-ID": "1_0"}), 422, "Last-Event-ID")
        for path, name in (
            (f"{events}?after=", "after"),
            ("/threads?limit=", "limit"),
            ("/documents?page=", "page"),
            ("/documents/jobs?limit=", "limit"),
        ):
            for value in ("1_0", "%205", "%2B1", "%D9%A5", "1.0"):
                error = assert_error(await client.get(path + value), 422, f"{name} must be an integer")
                assert error["details"] == [{"loc": ["query", name]}]
        assert_error(await client.get(f"{events}?after=-1"), 422, "after must be between 0 and")
        assert len([e for _, e in parse_sse((await client.get(f"{events}?after=2")).text)]) > 1


async def test_a_compressed_body_is_415_saying_so(scenario_config: Any) -> None:
    """The server reads bodies as sent; a gzipped one was parsed as they are and answered "Invalid
    JSON" (or, for an upload, "no file"), which sends a client looking in the wrong place."""
    async with server(scenario_config) as client:
        compressed = gzip.compress(json.dumps(run_body("gz", "r1")).encode())
        for path, content_type in (
            ("/agui", "application/json"),
            ("/threads/gz/switch", "application/json"),
            ("/documents", "multipart/form-data; boundary=x"),
        ):
            headers = {"content-type": content_type, "content-encoding": "gzip"}
            response = await client.post(path, content=compressed, headers=headers)
            assert_error(
                response, 415, "Content-Encoding 'gzip' is not supported: send the body uncompressed"
            )
        headers = {"content-type": "application/json", "content-encoding": "identity"}
        response = await client.post("/agui", content=json.dumps(run_body("gz", "r1")), headers=headers)
        assert response.status_code == 200 and parse_sse(response.text)[-1][1]["type"] == "RUN_FINISHED"


async def test_a_first_question_sent_as_text_parts_titles_the_thread(scenario_config: Any) -> None:
    """AG-UI lets a client send a question as content parts; the thread list showed such a thread
    without a title (only a plain-string question named it)."""
    async with server(scenario_config) as client:
        parts = [{"type": "text", "text": "nightly   backups"}, {"type": "text", "text": "and retention"}]
        message = {"id": "u1", "role": "user", "content": parts}
        _, events = await run(client, {**run_body("parts", "r1"), "messages": [message]})
        assert events[-1]["type"] == "RUN_FINISHED", events[-1]
        assert (await client.get("/threads/parts")).json()["title"] == "nightly backups and retention"
        listed = (await client.get("/threads")).json()["threads"]
        assert [t["title"] for t in listed if t["threadId"] == "parts"] == ["nightly backups and retention"]


async def test_a_resume_of_an_interrupt_not_pending_is_409_and_changes_nothing(scenario_config: Any) -> None:
    """A second click on "approve" (or a resume naming an interrupt never asked) is refused before
    the run starts: the thread keeps its messages, and the client learns what is pending."""
    async with server(scenario_config) as client:
        _, events = await run(client, run_body("ask", "r1", "archive the roadmap"))
        pending = events[-1]["outcome"]["interrupts"]
        assert [i["id"].startswith("int-") for i in pending] == [True], events[-1]
        wrong = {"interruptId": "int-other", "status": "resolved", "payload": {"approved": True}}
        error = assert_error(
            await client.post("/agui", json=run_body("ask", "r2", None, resume=[wrong])), 409, "int-other"
        )
        assert f"(pending: {pending[0]['id']!r})" in error["message"], error
        right = {**wrong, "interruptId": pending[0]["id"]}
        _, events = await run(client, run_body("ask", "r3", None, resume=[right]))
        assert (
            events[-1]["type"] == "RUN_FINISHED" and events[-1].get("outcome", {}).get("type") != "interrupt"
        )
        before = (await client.get("/threads/ask")).json()
        assert before["state"]["archived"] == ["the roadmap"], before["state"]
        error = assert_error(
            await client.post("/agui", json=run_body("ask", "r4", None, resume=[right])),
            409,
            f"answers interrupt {pending[0]['id']!r}, which is not pending on this thread (pending: nothing)",
        )
        after = (await client.get("/threads/ask")).json()
        assert (after["messages"], after["state"], after["version"]) == (
            before["messages"],
            before["state"],
            before["version"],
        )


async def test_a_resume_must_answer_every_pending_interrupt_once(scenario_config: Any) -> None:
    """Two approvals pending: a resume answering one of them (pydantic-ai would fail the run once it
    started) or answering one twice (the last answer would silently win) is a 422 before any run;
    the thread and both interrupts stay as they were, and a resume answering both goes through."""
    async with server(scenario_config) as client:
        _, events = await run(client, run_body("both", "r1", "archive both alpha beta"))
        first, second = (i["id"] for i in events[-1]["outcome"]["interrupts"])
        before = (await client.get("/threads/both")).json()
        yes = {"status": "resolved", "payload": {"approved": True}}
        no = {"status": "resolved", "payload": {"approved": False}}
        error = assert_error(
            await client.post(
                "/agui", json=run_body("both", "r2", None, resume=[{**yes, "interruptId": first}])
            ),
            422,
            f"resume must answer every pending interrupt (approve, deny or cancel each); unanswered: {second!r}",
        )
        assert error["details"][0]["loc"] == ["resume"]
        twice = [{**yes, "interruptId": first}, {**no, "interruptId": first}, {**yes, "interruptId": second}]
        error = assert_error(
            await client.post("/agui", json=run_body("both", "r3", None, resume=twice)),
            422,
            f"resume[1] answers interrupt {first!r} again",
        )
        assert error["details"][0]["loc"] == ["resume", 1, "interruptId"]
        after = (await client.get("/threads/both")).json()
        assert (after["version"], after["interrupts"]) == (before["version"], before["interrupts"])
        both = [{**yes, "interruptId": first}, {**no, "interruptId": second}]
        _, events = await run(client, run_body("both", "r4", None, resume=both))
        assert events[-1]["type"] == "RUN_FINISHED", events[-1]
        assert (await client.get("/threads/both")).json()["state"]["archived"] == ["alpha"]


async def test_every_json_route_refuses_other_content_types(scenario_config: Any) -> None:
    async with server(scenario_config) as client:
        await run(client, run_body("ct", "r1"))
        message_id = (await client.get("/threads/ct")).json()["messages"][0]["id"]
        document_id = (await client.get("/documents")).json()["documents"][0]["document_id"]
        for method, path, body in (
            ("POST", "/agui", run_body("ct", "r2")),
            ("POST", "/threads/ct/switch", {"messageId": message_id}),
            ("POST", "/threads/ct/fork", {"messageId": message_id}),
            ("POST", "/threads/ct/runs/r1/answers", {"questionId": "q", "answer": "yes"}),
            ("PUT", "/threads/ct/approval-policy", {"needUserApproveTools": ["search"]}),
            ("PATCH", f"/documents/{document_id}", {"groups": []}),
        ):
            response = await client.request(
                method, path, content=json.dumps(body), headers={"content-type": "text/plain"}
            )
            assert_error(response, 415, "application/json")
        assert len((await client.get("/threads")).json()["threads"]) == 1  # the fork made nothing


async def test_busy_thread_and_reused_run_ids_are_409(scenario_config: Any) -> None:
    async with server(scenario_config) as client:
        slow = asyncio.create_task(client.post("/agui", json=run_body("busy", "r1", "slow")))
        for _ in range(200):
            if (await client.get("/threads/busy")).status_code == 200 or slow.done():
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        assert_error(await client.post("/agui", json=run_body("busy", "r2")), 409, "busy")
        # not saved until its first run ends, but the caller's own run holds it: busy, not missing
        assert_error(await client.delete("/threads/busy"), 409, "in progress")
        response = await slow
        check_stream([e for _, e in parse_sse(response.text)], {})
        assert_error(await client.post("/agui", json=run_body("busy", "r1")), 409, "already exists")
        _, events = await run(client, run_body("busy", "r3"))
        assert events[-1]["type"] == "RUN_FINISHED"


def _declaring(body: dict[str, Any], declared: bool) -> dict[str, Any]:
    """``body`` as a client of AG-UI 1.0 sends it, or as an older client does (no ``protocolVersion``)."""
    return body if declared else {k: v for k, v in body.items() if k != "protocolVersion"}


@pytest.mark.parametrize("declared", [True, False], ids=["agui-1.0", "no-protocol-version"])
async def test_stop_route_cancels_with_the_cancelled_outcome(scenario_config: Any, declared: bool) -> None:
    async with server(scenario_config) as client:
        await run(client, run_body("stop", "r0"))
        good = (await client.get("/threads/stop")).json()

        async def stop_soon() -> httpx.Response:
            for _ in range(200):
                view = (await client.get("/threads/stop")).json()
                if view["activeRunId"] == "r1":
                    # past its search (a state change) on a loaded machine too; 6 s of answer follow
                    await asyncio.sleep(1.0)
                    return await client.post("/threads/stop/runs/r1/stop")
                await asyncio.sleep(0.01)
            raise AssertionError("the run never started")

        stopper = asyncio.create_task(stop_soon())
        _, events = await run(
            client, _declaring(run_body("stop", "r1", "searching slowly backups"), declared)
        )
        stopped = await stopper
        assert stopped.status_code == 202
        assert stopped.json()["stopping"] is True and stopped.json()["ended"] is True
        assert any(e["type"] == "STATE_DELTA" for e in events)  # the run had changed the state
        assert check_stream(events, good["state"]) == good["state"]  # and the client's copy is put back
        assert events[-1]["type"] == "RUN_FINISHED"
        # an older client's schema has no cancelled outcome: it gets a bare RUN_FINISHED
        assert events[-1].get("outcome") == ({"type": "cancelled"} if declared else None)
        after = (await client.get("/threads/stop")).json()
        assert after["messages"] == good["messages"]
        assert after["state"] == good["state"]
        assert_error(await client.post("/threads/stop/runs/nope/stop"), 404)
        assert_error(await client.post("/threads/other/runs/r1/stop"), 404)


async def test_events_can_be_reread_after_an_id(scenario_config: Any) -> None:
    async with server(scenario_config) as client:
        response, _ = await run(client, run_body("replay", "r1"))
        frames = parse_sse(response.text)
        tail = parse_sse((await client.get("/threads/replay/runs/r1/events", params={"after": 3})).text)
        assert tail == frames[3:]
        header = parse_sse(
            (await client.get("/threads/replay/runs/r1/events", headers={"Last-Event-ID": "5"})).text
        )
        assert header == frames[5:]
        assert_error(await client.get("/threads/replay/runs/nope/events"), 404)
        assert_error(await client.get("/threads/replay/runs/r1/events", params={"after": "x"}), 422)
        assert_error(
            await client.get("/threads/replay/runs/r1/events", headers={"Last-Event-ID": "abc"}), 422
        )


async def test_empty_messages_restate_the_thread(scenario_config: Any) -> None:
    async with server(scenario_config) as client:
        _, first = await run(client, run_body("restate", "r1"))
        state = check_stream(first, {})
        _, events = await run(client, run_body("restate", "r2", None))
        assert "input" not in events[0]  # nothing asked
        assert [e["type"] for e in events] == [
            "RUN_STARTED",
            "MESSAGES_SNAPSHOT",
            "STATE_SNAPSHOT",
            "RUN_FINISHED",
        ]
        view = (await client.get("/threads/restate")).json()
        assert events[1]["messages"] == view["messages"]
        assert check_stream(events, {}) == state == view["state"]
        _, same = await run(client, {**run_body("restate", "r3", None), "state": state})
        # a client that is current still gets the run's baseline: every run carries its own
        assert [e["type"] for e in same] == [
            "RUN_STARTED",
            "MESSAGES_SNAPSHOT",
            "STATE_SNAPSHOT",
            "RUN_FINISHED",
        ]
        assert same[2]["snapshot"] == state


@pytest.mark.parametrize("declared", [True, False], ids=["agui-1.0", "no-protocol-version"])
async def test_run_timeout_is_a_run_error_and_saves_nothing(scenario_config: Any, declared: bool) -> None:
    async with server(scenario_config, run_timeout=0.5) as client:
        _, events = await run(
            client, _declaring(run_body("timeout", "r1", "searching slowly backups"), declared)
        )
        assert any(e["type"] == "STATE_DELTA" for e in events)  # the run had changed the state
        assert (
            check_stream(events, {}) == (await run(client, run_body("fresh", "r0", None)))[1][1]["snapshot"]
        )
        assert events[-1]["type"] == "RUN_ERROR"
        assert events[-1]["code"] == "timeout"
        assert "0.5" in events[-1]["message"]
        assert (await client.get("/threads/timeout")).status_code == 404  # nothing saved for a new thread


async def test_thread_routes(scenario_config: Any) -> None:
    async with server(scenario_config) as client:
        for thread in ("a", "b"):
            await run(client, run_body(thread, f"r-{thread}"))
        listed = (await client.get("/threads")).json()["threads"]
        assert [t["threadId"] for t in listed] == ["b", "a"]
        first = (await client.get("/threads", params={"limit": 1})).json()
        assert [t["threadId"] for t in first["threads"]] == ["b"]
        second = (await client.get("/threads", params={"limit": 1, "cursor": first["next"]})).json()
        assert [t["threadId"] for t in second["threads"]] == ["a"]
        last = (await client.get("/threads", params={"limit": 1, "cursor": second["next"]})).json()
        assert last == {"threads": [], "next": None}
        assert (await client.get("/threads")).json()["next"] is None  # all on one page
        assert_error(await client.get("/threads", params={"limit": 0}), 422)
        for cursor in ("garbage", "", "WzEsMl0", "eyJhIjoxfQ"):  # not base64 JSON; [1,2]; {"a":1}
            assert_error(await client.get("/threads", params={"cursor": cursor}), 422, "cursor")
        assert_error(await client.get("/threads/nope"), 404)
        assert (await client.delete("/threads/a")).status_code == 204
        assert_error(await client.get("/threads/a"), 404)
        assert_error(await client.delete("/threads/a"), 404)
        assert_error(await client.get("/threads/%00bad"), 422)
        assert_error(await client.get("/nowhere"), 404)
        assert_error(await client.put("/threads"), 405)


async def test_documents_routes(scenario_config: Any) -> None:
    async with server(scenario_config, max_upload_bytes=2048) as client:
        listing = (await client.get("/documents")).json()
        assert listing["total"] == CORPUS_DOCUMENTS
        assert (await client.get("/documents", params={"page_size": 5, "page": 3})).json()["documents"][0][
            "title"
        ]
        upload = {
            "file": (
                "zebra-facts.md",
                b"# Zebra facts\n\nZebras sleep standing up for about seven hours.",
                "text/markdown",
            )
        }
        response = await client.post("/documents", files=upload)
        assert response.status_code == 202, response.text
        job = await finished_job(client, response.json()["jobId"])
        assert job["files"][0]["status"] == "added"
        again = await client.post("/documents", files=upload)
        assert again.status_code == 202
        assert (await finished_job(client, again.json()["jobId"]))["files"][0]["status"] == "unchanged"
        assert (await client.get("/documents")).json()["total"] == CORPUS_DOCUMENTS + 1
        _, events = await run(client, run_body("zebra", "r1", "how long do zebras sleep"))
        assert "Zebra facts" in json.dumps(events)
        assert_error(
            await client.post("/documents", files={"file": ("x.exe", b"MZ", "application/octet-stream")}),
            422,
            "could be ingested",
        )
        assert_error(
            await client.post("/documents", files={"file": ("big.md", b"x" * 5000, "text/markdown")}), 413
        )
        assert_error(await client.post("/documents", json={"file": "x"}), 415)
        assert_error(
            await client.post("/documents", files={"other": ("a.md", b"a", "text/markdown")}), 422, "no file"
        )
        assert_error(await client.get("/documents", params={"page": -1}), 422)


async def test_health_and_capabilities(scenario_config: Any) -> None:
    async with server(scenario_config) as client:
        assert (await client.get("/health")).json()["status"] == "ok"
        readiness = (await client.get("/ready")).json()
        assert readiness["status"] == "ready"
        assert readiness["checks"] == {"knowledgeBase": "ok", "threadStore": "ok", "jobQueue": "ok"}
        assert readiness["documents"] == (await client.get("/documents")).json()["total"] > 0
        caps = (await client.get("/capabilities")).json()
        assert caps["transport"]["streaming"] is True
        assert caps["state"] == {"snapshots": True, "deltas": True, "memory": True, "persistentState": True}
        assert caps["humanInTheLoop"]["approvals"] is True
        assert {"search", "ask", "list_documents"} <= {t["name"] for t in caps["tools"]["items"]}


async def test_authentication(scenario_config: Any) -> None:
    tokens = {"alice": SecretStr("a-token")}
    async with server(scenario_config, tokens=tokens) as client:
        assert_error(await client.post("/agui", json=run_body("t", "r")), 401, "missing bearer token")
        error = await client.get("/threads", headers={"Authorization": "Bearer wrong"})
        assert_error(error, 401, "invalid")
        assert error.headers["www-authenticate"].startswith("Bearer")
        for path in ("/threads", "/threads/t", "/documents", "/threads/t/runs/r/events"):
            assert_error(await client.get(path), 401)
        assert_error(await client.post("/threads/t/runs/r/stop"), 401)
        assert_error(await client.post("/documents", files={"file": ("a.md", b"a", "text/markdown")}), 401)
        assert (await client.get("/threads", headers={"Authorization": "Bearer a-token"})).status_code == 200
        assert (await client.get("/health")).status_code == 200  # probes need no token


async def test_static_tokens_carry_the_principals_groups(tmp_path: Any) -> None:
    from starlette.requests import HTTPConnection

    from ragstream.auth import AuthBackend, StaticTokens
    from ragstream.config import AppConfig

    config = AppConfig(
        data_dir=tmp_path, tokens={"alice": {"token": "a", "groups": ["hr", "ops"]}, "bob": "b"}
    )
    config = AppConfig.from_worker_payload(config.to_worker_payload())  # what a worker process gets
    backend = AuthBackend([StaticTokens(config.tokens)])
    for token, name, groups in (("a", "alice", {"hr", "ops"}), ("b", "bob", set())):
        conn = HTTPConnection({"type": "http", "headers": [(b"authorization", f"Bearer {token}".encode())]})
        found = await backend.authenticate(conn)
        assert found is not None
        assert (found[1].identity, set(found[1].groups)) == (name, groups)


@pytest.mark.parametrize("origins", [[], ["http://app.example"]])
async def test_cors_is_off_unless_configured(scenario_config: Any, origins: list[str]) -> None:
    async with server(scenario_config, cors_origins=origins) as client:
        preflight = await client.options(
            "/agui", headers={"Origin": "http://app.example", "Access-Control-Request-Method": "POST"}
        )
        allowed = preflight.headers.get("access-control-allow-origin")
        assert allowed == ("http://app.example" if origins else None)


async def test_cors_lets_browsers_send_the_trace_context_and_configured_headers(scenario_config: Any) -> None:
    """A traced page forwards ``traceparent``; a sign-in hook may read its own header."""
    async with server(
        scenario_config, cors_origins=["http://app.example"], cors_headers=["X-Api-Key"]
    ) as client:
        for headers in ("traceparent,tracestate,content-type", "x-api-key,authorization"):
            preflight = await client.options(
                "/agui",
                headers={
                    "Origin": "http://app.example",
                    "Access-Control-Request-Method": "POST",
                    "Access-Control-Request-Headers": headers,
                },
            )
            assert preflight.status_code == 200, (headers, preflight.text)
        refused = await client.options(
            "/agui",
            headers={
                "Origin": "http://app.example",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "x-not-allowed",
            },
        )
        assert refused.status_code == 400


async def test_a_server_shutting_down_ends_its_runs_with_the_shutdown_error(scenario_config: Any) -> None:
    """A deploy stopping the server mid-run is no Stop a user pressed: the run's log (what a follower
    on another host and a reconnect read) ends with RUN_ERROR ``shutdown``, and nothing of the run is
    saved: the new thread keeps the user's question only, so a reload shows it and it can be asked
    again."""
    app = scenario_app(scenario_config)
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        body = run_body("deploy", "deploy-r", "slow answer please")
        async with client.stream("POST", "/agui", json=body) as stream:
            async for line in stream.aiter_lines():
                if "TEXT_MESSAGE_CONTENT" in line:
                    break
            runs = app.state.services.runs
            await runs.shutdown()  # what the server's lifespan does when it is told to stop
        logged = [json.loads(data) async for batch in runs.logs.read("deploy/deploy-r") for _, data in batch]
        assert logged[-1]["type"] == "RUN_ERROR" and logged[-1]["code"] == "shutdown", logged[-1]
        assert not any(event["type"] == "RUN_FINISHED" for event in logged)  # not the cancelled outcome
        kept = await client.get("/threads/deploy")
        assert kept.status_code == 200, kept.text  # the question, not the answer it was getting
        assert [(m["id"], m["role"], m["content"]) for m in kept.json()["messages"]] == [
            ("u-deploy-r", "user", "slow answer please")
        ]
        assert not kept.json()["state"].get("citations") and kept.json()["activeRunId"] is None
        again = body | {"runId": "deploy-again", "messages": kept.json()["messages"]}  # regenerate
        answered = await client.post("/agui", json=again)
        events = [event for _, event in parse_sse(answered.text)]
        assert events[-1]["type"] == "RUN_FINISHED", events[-1]
        assert any(event["type"] == "TEXT_MESSAGE_CONTENT" for event in events)
        messages = (await client.get("/threads/deploy")).json()["messages"]
        assert [m["role"] for m in messages][:2] == ["user", "assistant"] and len(messages) >= 2
        assert messages[0]["id"] == "u-deploy-r"  # the same question, answered this time


async def test_a_client_streaming_when_the_server_is_told_to_stop_reads_the_shutdown_error(
    scenario_config: Any,
) -> None:
    """SIGTERM mid-run (uvicorn's handler sets ``should_exit``): the page streaming the run reads
    RUN_ERROR ``shutdown`` as the stream's last event, not a connection cut in mid-answer, and the
    thread is left as it was before the run."""
    app = scenario_app(scenario_config)
    async with (
        serving(app, timeout_graceful_shutdown=10) as (url, server),
        httpx.AsyncClient(base_url=url, timeout=60) as client,
    ):
        done = await client.post("/agui", json=run_body("deploy2", "before", "backups"))
        assert done.status_code == 200 and '"RUN_FINISHED"' in done.text
        before = (await client.get("/threads/deploy2")).json()
        body = run_body("deploy2", "during", "slow answer please")
        body["messages"] = before["messages"] + body["messages"]
        lines: list[str] = []
        async with client.stream("POST", "/agui", json=body) as stream:
            async for line in stream.aiter_lines():
                lines.append(line)
                if "TEXT_MESSAGE_CONTENT" in line and not server.should_exit:
                    server.should_exit = True  # what uvicorn's SIGTERM handler does
        events = [event for _, event in parse_sse("\n".join(lines) + "\n\n")]
        assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "shutdown", events[-1]
        assert sum(1 for e in events if e["type"] == "TEXT_MESSAGE_CONTENT") < 300  # cut short
    # the server back up on the same data: the thread is what it was before the cut run
    async with serve(scenario_app(scenario_config)) as url, httpx.AsyncClient(base_url=url) as client:
        after = (await client.get("/threads/deploy2")).json()
    assert after["messages"] == before["messages"]
    assert after["state"] == before["state"]


async def test_a_run_sent_right_after_a_stop_is_answered_not_refused_as_busy(scenario_config: Any) -> None:
    """Stop, then ask again at once (a user pressing Stop and sending the next question): the stop
    answers once the run has ended, so the next run finds the thread free, not a 409."""
    async with server(scenario_config) as client:
        assert (await client.post("/agui", json=run_body("again", "r0", "backups"))).status_code == 200
        body = run_body("again", "r1", "slow answer please")
        body["messages"] = (await client.get("/threads/again")).json()["messages"] + body["messages"]
        first = asyncio.create_task(client.post("/agui", json=body))
        for _ in range(500):
            if (await client.get("/threads/again")).json()["activeRunId"] == "r1":
                break
            await asyncio.sleep(0.01)
        stopped = await client.post("/threads/again/runs/r1/stop")
        assert stopped.status_code == 202 and stopped.json() == {
            "threadId": "again",
            "runId": "r1",
            "stopping": True,
            "ended": True,
        }
        view = (await client.get("/threads/again")).json()
        body = run_body("again", "r2", "backups")
        body["messages"] = view["messages"] + body["messages"]
        next_run = await client.post("/agui", json=body)
        assert next_run.status_code == 200, next_run.text
        assert '"RUN_FINISHED"' in next_run.text
        assert '"RUN_FINISHED"' in (await first).text
