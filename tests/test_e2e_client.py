"""End to end with the real @ag-ui/client against the server on loopback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agui_client import drive
from tests.conftest import scenario_app
from tests.protocol import check_stream
from tests.scenario import SECRET
from tests.servers import serve

PICK_COLOR = {
    "name": "pick_color",
    "description": "Ask the user to pick a colour",
    "parameters": {
        "type": "object",
        "properties": {"options": {"type": "array", "items": {"type": "string"}}},
    },
}


def assert_clean(run: dict[str, Any], state_before: Any) -> Any:
    """No client warnings or failures, a well-formed stream; returns the state the stream implies."""
    assert run["warnings"] == [], run["warnings"]
    assert run["errors"] == [], run["errors"]
    assert run["rejected"] is None, run["rejected"]
    assert run["failed"] is None, run["failed"]
    assert run["runError"] is None, run["runError"]
    state = check_stream(run["events"], state_before)
    assert state == run["state"], "the client's state differs from what the stream says"
    return state


async def server_state(url: str, thread_id: str, token: str | None = None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(base_url=url, headers=headers) as client:
        response = await client.get(f"/threads/{thread_id}")
    assert response.status_code == 200, response.text
    return response.json()


async def test_multi_turn_conversation_keeps_client_and_server_state_equal(
    scenario_server: str, tmp_path: Path
) -> None:
    questions = [
        "How long are nightly backups kept?",
        "What is the Halley telescope?",
        "How long are nightly backups kept?",
    ]
    steps: list[dict[str, Any]] = []
    for question in questions:
        steps += [{"op": "user", "text": question}, {"op": "run"}]
    report = await drive(tmp_path, scenario_server, "multi", steps)
    runs = [s for s in report["steps"] if s["op"] == "run"]
    state: Any = {}
    for run in runs:
        state = assert_clean(run, state)
        assert run["finished"]["outcome"] == "success"
        assert run["messages"][-1]["role"] == "assistant"
        assert "Found it in" in run["messages"][-1]["content"]
    view = await server_state(scenario_server, "multi")
    assert runs[-1]["state"] == view["state"]
    # the state carries the latest search (the emit window); the thread keeps all three
    assert list(view["state"]["searches"]) == ["s3"]
    async with httpx.AsyncClient(base_url=scenario_server) as client:
        searches = (await client.get("/threads/multi/state/searches")).json()["value"]
        first = (await client.get("/threads/multi/state/searches/s1")).json()["value"]
    assert list(searches) == ["s1", "s2", "s3"]
    assert first["query"] == questions[0]
    # the same passage keeps its number: the third answer cites what the first cited
    first, third = runs[0]["messages"][-1]["content"], runs[2]["messages"][-1]["content"]
    assert first.split("[")[1] == third.split("[")[1]
    assert [m["role"] for m in view["messages"]].count("user") == 3


async def test_interrupt_approved_and_denied(scenario_server: str, tmp_path: Path) -> None:
    report = await drive(
        tmp_path,
        scenario_server,
        "approvals",
        [
            {"op": "user", "text": "archive first note"},
            {"op": "run"},
            {"op": "approve", "approved": True},
            {"op": "user", "text": "archive second note"},
            {"op": "run"},
            {"op": "approve", "approved": False, "reason": "keep it"},
        ],
    )
    interrupted, approved, interrupted2, denied = [
        s for s in report["steps"] if s["op"] in ("run", "approve")
    ]
    state = assert_clean(interrupted, {})
    assert interrupted["finished"]["outcome"] == "interrupt"
    interrupt = interrupted["finished"]["interrupts"][0]
    assert interrupt["reason"] == "tool_call"
    assert "archive_note" in interrupt["message"]
    state = assert_clean(approved, state)
    assert approved["finished"]["outcome"] == "success"
    assert state["archived"] == ["first note"]
    state = assert_clean(interrupted2, state)
    state = assert_clean(denied, state)
    assert state["archived"] == ["first note"]  # denied: the tool never ran
    assert "Not archived: keep it" in denied["messages"][-1]["content"]
    view = await server_state(scenario_server, "approvals")
    assert view["state"] == state
    assert view["interrupts"] == []


async def test_pending_interrupt_is_listed_for_a_reloaded_page(scenario_server: str, tmp_path: Path) -> None:
    report = await drive(
        tmp_path, scenario_server, "pending", [{"op": "user", "text": "archive a note"}, {"op": "run"}]
    )
    run = report["steps"][-1]
    view = await server_state(scenario_server, "pending")
    assert [i["id"] for i in view["interrupts"]] == [i["id"] for i in run["finished"]["interrupts"]]


async def test_frontend_tool_round_trip(scenario_server: str, tmp_path: Path) -> None:
    report = await drive(
        tmp_path,
        scenario_server,
        "frontend",
        [
            {"op": "user", "text": "pick a colour"},
            {"op": "run", "tools": [PICK_COLOR]},
            {"op": "toolResults", "content": "blue"},
            {"op": "run", "tools": [PICK_COLOR]},
        ],
    )
    first, second = [s for s in report["steps"] if s["op"] == "run"]
    state = assert_clean(first, {})
    assert first["finished"]["outcome"] == "success"
    assert len(first["finished"]["pendingToolCallIds"]) == 1
    assert_clean(second, state)
    assert second["messages"][-1]["content"] == "You picked blue."


async def test_reload_hydrates_a_fresh_client_that_continues(scenario_server: str, tmp_path: Path) -> None:
    report = await drive(
        tmp_path,
        scenario_server,
        "reload",
        [
            {"op": "user", "text": "How long are nightly backups kept?"},
            {"op": "run"},
            {"op": "hydrate"},
            {"op": "user", "text": "What are the bakery opening hours?"},
            {"op": "run"},
        ],
    )
    before, hydrate, after = report["steps"][1], report["steps"][2], report["steps"][4]
    assert hydrate["status"] == 200
    assert hydrate["view"]["state"] == before["state"]
    assert [m["content"] for m in hydrate["view"]["messages"] if m["role"] == "user"] == [
        "How long are nightly backups kept?"
    ]
    assert hydrate["view"]["messages"][-1]["content"] == before["messages"][-1]["content"]
    state = assert_clean(after, hydrate["view"]["state"])
    # every run carries its own baseline; the hydrated copy was current, so it is that copy
    assert after["events"][1] == {**after["events"][1], "type": "STATE_SNAPSHOT"}
    assert after["events"][1]["snapshot"] == hydrate["view"]["state"]
    assert state == (await server_state(scenario_server, "reload"))["state"]


async def test_client_proposal_on_server_fields_is_corrected_by_a_snapshot(
    scenario_server: str, tmp_path: Path
) -> None:
    first = await drive(
        tmp_path, scenario_server, "proposal", [{"op": "user", "text": "nightly backups"}, {"op": "run"}]
    )
    honest = first["steps"][-1]["state"]
    forged = {**honest, "citations": {"1": {"forged": True}}, "document_filter": ["handbook"]}
    steps = [
        {"op": "hydrate"},
        {"op": "setState", "state": forged},
        {"op": "user", "text": "backup retention"},
        {"op": "run"},
    ]
    report = await drive(tmp_path, scenario_server, "proposal", steps)
    run = report["steps"][-1]
    assert run["types"][1] == "STATE_SNAPSHOT"  # right after RUN_STARTED
    state = assert_clean(run, forged)
    assert state["document_filter"] == ["handbook"]  # the client-owned field was taken
    assert state["citations"]["1"] == honest["citations"]["1"]  # the server-owned one was not
    assert state == (await server_state(scenario_server, "proposal"))["state"]


async def test_abort_mid_stream_leaves_the_last_good_state(scenario_server: str, tmp_path: Path) -> None:
    first = await drive(
        tmp_path, scenario_server, "abort", [{"op": "user", "text": "nightly backups"}, {"op": "run"}]
    )
    good = await server_state(scenario_server, "abort")
    report = await drive(
        tmp_path,
        scenario_server,
        "abort",
        [{"op": "hydrate"}, {"op": "user", "text": "slow answer"}, {"op": "run", "abortAfterMs": 100}],
    )
    run = report["steps"][-1]
    assert run["runError"] == {
        "message": "This operation was aborted",
        "code": "abort",
    }  # the client's own signal
    assert run["warnings"] == []
    assert run["errors"] == []
    assert "tok1" in run["messages"][-1]["content"]  # it was cut mid-answer
    for _ in range(100):  # the server notices the closed socket and stops the run
        view = await server_state(scenario_server, "abort")
        if view["activeRunId"] is None:
            break
        import asyncio

        await asyncio.sleep(0.05)
    assert view["activeRunId"] is None
    assert view["messages"] == good["messages"]
    assert view["state"] == good["state"] == first["steps"][-1]["state"]


async def test_two_concurrent_runs_on_one_thread_one_gets_409(scenario_server: str, tmp_path: Path) -> None:
    report = await drive(
        tmp_path, scenario_server, "busy", [{"op": "concurrent", "count": 2, "text": "slow please"}]
    )
    runs = report["steps"][0]["runs"]
    rejected = [r for r in runs if r["rejected"]]
    finished = [r for r in runs if not r["rejected"]]
    assert len(rejected) == 1
    assert len(finished) == 1
    assert "HTTP 409" in rejected[0]["rejected"]
    assert "busy" in rejected[0]["rejected"]
    assert_clean(finished[0], {})


async def test_model_error_is_sanitised_and_thread_unchanged(scenario_server: str, tmp_path: Path) -> None:
    await drive(
        tmp_path, scenario_server, "errors", [{"op": "user", "text": "nightly backups"}, {"op": "run"}]
    )
    good = await server_state(scenario_server, "errors")
    report = await drive(
        tmp_path,
        scenario_server,
        "errors",
        [{"op": "hydrate"}, {"op": "user", "text": "fail now"}, {"op": "run"}],
    )
    run = report["steps"][-1]
    assert run["runError"]["code"] == "internal_error"
    assert SECRET not in run["runError"]["message"]
    assert "hunter2" not in str(run["events"])
    assert run["types"][0] == "RUN_STARTED"
    assert run["types"][-1] == "RUN_ERROR"
    after = await server_state(scenario_server, "errors")
    assert after["messages"] == good["messages"]
    assert after["state"] == good["state"]


@pytest.fixture
async def token_server(scenario_config: Any) -> Any:
    from pydantic import SecretStr

    scenario_config.tokens = {"alice": SecretStr("alice-token"), "bob": SecretStr("bob-token")}
    async with serve(scenario_app(scenario_config)) as url:
        yield url


async def test_principals_cannot_see_each_others_threads(token_server: str, tmp_path: Path) -> None:
    alice = await drive(
        tmp_path,
        token_server,
        "alice-thread",
        [{"op": "user", "text": "nightly backups"}, {"op": "run"}],
        token="alice-token",
    )
    assert_clean(alice["steps"][-1], {})
    bob = await drive(
        tmp_path,
        token_server,
        "alice-thread",
        [{"op": "user", "text": "hijack"}, {"op": "run"}],
        token="bob-token",
    )
    assert "HTTP 404" in bob["steps"][-1]["rejected"]
    async with httpx.AsyncClient(base_url=token_server) as client:
        as_bob = {"Authorization": "Bearer bob-token"}
        assert (await client.get("/threads/alice-thread", headers=as_bob)).status_code == 404
        assert (await client.get("/threads", headers=as_bob)).json() == {"threads": [], "next": None}
        assert (await client.delete("/threads/alice-thread", headers=as_bob)).status_code == 404
        listed = (await client.get("/threads", headers={"Authorization": "Bearer alice-token"})).json()[
            "threads"
        ]
        assert [t["threadId"] for t in listed] == ["alice-thread"]
        nobody = await drive(tmp_path, token_server, "x", [{"op": "user", "text": "hi"}, {"op": "run"}])
        assert "HTTP 401" in nobody["steps"][-1]["rejected"]


async def test_edit_regenerate_and_switch_back_with_the_real_client(
    scenario_server: str, tmp_path: Path
) -> None:
    """@ag-ui/client edits a question, regenerates answers (also after a tool result), switches back;
    after every step its messages (ids included) and state are the thread's."""
    questions = [
        "How long are nightly backups kept?",
        "What is the Halley telescope?",
        "Who approves deploys?",
    ]
    steps: list[dict[str, Any]] = []
    for question in questions:
        steps += [{"op": "user", "text": question}, {"op": "run"}]
    steps += [
        {"op": "edit", "nth": 1, "text": "Where are backups stored?"},
        {"op": "run"},
        {"op": "truncate", "after": "user"},
        {"op": "run"},
        {"op": "truncate", "after": "tool"},
        {"op": "run"},
        {"op": "hydrate"},
    ]
    report = await drive(tmp_path, scenario_server, "branches", steps)
    state: Any = {}
    views = []
    for step in report["steps"]:
        if step["op"] == "run":
            state = assert_clean(step, state)
            assert step["finished"]["outcome"] == "success"
    view = await server_state(scenario_server, "branches")
    views.append(view)
    last = [s for s in report["steps"] if s["op"] == "run"][-1]
    assert [(m["id"], m["role"]) for m in view["messages"]] == [
        (m["id"], m["role"]) for m in last["messages"]
    ]
    assert view["state"] == last["state"]
    hydrated = report["steps"][-1]["view"]
    assert [m["id"] for m in hydrated["messages"]] == [m["id"] for m in last["messages"]]
    users = [m["content"] for m in view["messages"] if m["role"] == "user"]
    assert users == [questions[0], "Where are backups stored?"]
    edit = next(s for s in report["steps"] if s["op"] == "edit")
    assert view["branches"][edit["id"]]["ids"] == [edit["replaced"], edit["id"]]
    # the last answer was made twice more: three siblings, the newest shown
    final = view["messages"][-1]["id"]
    assert view["branches"][final]["index"] == 1 and len(view["branches"][final]["ids"]) == 2
    assert len(view["branches"]) == 3

    # switching back to the original second question shows that branch whole, and it continues
    again = await drive(
        tmp_path,
        scenario_server,
        "branches",
        [
            {"op": "switch", "messageId": edit["replaced"]},
            {"op": "user", "text": "And the telescope?"},
            {"op": "run"},
        ],
    )
    switched = again["steps"][0]["view"]
    assert [m["content"] for m in switched["messages"] if m["role"] == "user"] == questions
    run = again["steps"][-1]
    assert_clean(run, switched["state"])
    assert run["events"][1]["type"] == "STATE_SNAPSHOT" and run["events"][1]["snapshot"] == switched["state"]
    view = await server_state(scenario_server, "branches")
    assert [m["id"] for m in view["messages"]] == [m["id"] for m in run["messages"]]
    assert [m["content"] for m in view["messages"] if m["role"] == "user"] == [
        *questions,
        "And the telescope?",
    ]
    assert view["state"] == run["state"]
