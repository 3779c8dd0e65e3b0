"""pydantic-ai internals ragstream relies on (``ragstream.agui._upstream``): fail here, loudly, on an upgrade.

Each check names what moved. A failure here means: read the note in ``server/agui/_upstream.py`` on
that item and either follow the rename or replace the use with the public API that ended it.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from pydantic_ai import ToolCallPart
from pydantic_ai.messages import ModelRequest, UserPromptPart

from ragstream.agui import _upstream


def test_approval_to_interrupt_still_builds_the_interrupt_run_finished_carries() -> None:
    call = ToolCallPart(tool_name="delete_notes", args={"pattern": "*"}, tool_call_id="call-1")
    interrupt = _upstream.approval_to_interrupt(call, {"call-1": {"reason": "deletes data"}})
    assert interrupt.tool_call_id == "call-1"
    assert interrupt.reason == "tool_call"
    assert interrupt.metadata == {"reason": "deletes data"}
    assert "approved" in interrupt.response_schema["properties"]


def test_interrupt_ids_still_map_back_to_the_tool_call() -> None:
    call = ToolCallPart(tool_name="ask_year", args={}, tool_call_id="call-7")
    interrupt = _upstream.approval_to_interrupt(call, {})
    assert _upstream.interrupt_id_to_tool_call_id(interrupt.id) == "call-7"


def test_resume_payloads_are_still_checked_against_the_advertised_schema() -> None:
    from ag_ui.core import ResumeEntry
    from pydantic_ai import ToolApproved, ToolDenied
    from pydantic_ai.exceptions import UserError

    def entry(payload: Any) -> ResumeEntry:
        return ResumeEntry(interrupt_id="int-call-7", status="resolved", payload=payload)

    assert isinstance(_upstream.resume_entry_to_approval(entry({"approved": True})), ToolApproved)
    assert isinstance(_upstream.resume_entry_to_approval(entry({"approved": False})), ToolDenied)
    for wrong in ({"approved": "yes"}, {}, "yes"):
        with pytest.raises(UserError, match="does not match the `responseSchema`"):
            _upstream.resume_entry_to_approval(entry(wrong))


def test_ui_message_ids_are_still_kept_where_dump_messages_puts_them_back() -> None:
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.ui.ag_ui import AGUIAdapter

    message = ModelRequest(parts=[UserPromptPart("hi")])
    assert _upstream.get_ui_message_id(message) is None
    response = ModelResponse(parts=[TextPart("hello")])
    _upstream.set_ui_message_id(response, "streamed-1")
    assert _upstream.get_ui_message_id(response) == "streamed-1"
    assert [m.id for m in AGUIAdapter.dump_messages([response])] == ["streamed-1"]


def test_the_stream_locks_the_patch_replaces_are_still_there() -> None:
    assert _upstream._missing_lock_attributes() == [], (
        "pydantic-ai moved the stream locks install_fast_stream_locks replaces; see server/agui/_upstream.py"
    )


def test_the_patch_makes_new_stream_locks_fast_and_is_idempotent() -> None:
    from pydantic_ai._utils import PeekableAsyncStream

    assert _upstream.install_fast_stream_locks()
    assert _upstream.install_fast_stream_locks()  # a second call changes nothing
    stream = PeekableAsyncStream(_upstream._NoSource())
    assert isinstance(stream._source_lock, anyio.Lock)
    assert stream._source_lock._fast_acquire  # type: ignore[attr-defined]


def test_an_app_created_with_defaults_leaves_pydantic_ai_unpatched() -> None:
    # In a fresh interpreter: other tests in this process may have installed the patch on purpose.
    script = textwrap.dedent(
        """
        from pydantic_ai import _agent_graph, _utils, result
        def patched():
            return (
                result.AgentStream.__post_init__,
                _utils.PeekableAsyncStream.__init__,
                _utils.cancel_and_drain,
                _agent_graph.cancel_and_drain,
            )
        before = patched()
        from ragstream.app import create_app
        from ragstream.config import AppConfig
        from ragstream.agui._upstream import fast_stream_locks_installed
        create_app(AppConfig(tool_dirs=[]))
        assert before == patched(), "create_app patched pydantic-ai"
        create_app(AppConfig(tool_dirs=[]), handoff_drain_fix=True)
        assert patched()[2:] != before[2:] and patched()[:2] == before[:2]
        assert not fast_stream_locks_installed()
        create_app(AppConfig(tool_dirs=[]), fast_stream_locks=True)
        assert fast_stream_locks_installed()
        assert result.AgentStream.__post_init__ is not before[0]
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


async def test_a_run_stopped_as_pydantic_ai_hands_over_leaves_no_task_behind(tmp_path: Path) -> None:
    """``install_handoff_drain_fix``: stopped runs give back every pydantic-ai task they started.

    Found by a soak of stopped runs: a stop that lands in the one event-loop trip in which
    pydantic-ai hands a model request's stream to the run (or the run itself to its ``wrap_run``
    hooks) left the task on the other side of the handoff waiting forever, with the run's deps and
    thread context. Each run here asks the engine to stop it (what ``POST .../stop`` does) a
    growing number of loop trips after it starts, or after its model answers with a tool call, so
    some runs are stopped inside each window whatever the machine's speed; with the windows open,
    tasks were left from about 45 trips after the tool call on, and at a few trips after the start.
    """
    from pydantic_ai import Agent, DeferredToolRequests, FunctionToolset, RunContext
    from pydantic_ai.capabilities import Hooks
    from pydantic_ai.messages import ModelMessage, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

    from rag_tools import ChatDeps, build_chat_toolkit
    from ragstream.app import create_app
    from ragstream.config import AppConfig
    from tests.protocol import parse_sse, run_body
    from tests.servers import serve

    plan = {"at": "start", "trips": 0}
    services: list[Any] = []

    def stop_after(trips: int) -> None:
        if trips:
            asyncio.get_running_loop().call_soon(stop_after, trips - 1)
            return
        for run in services[0].runs.active.values():
            run.source.cancel()

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        if any(isinstance(p, ToolReturnPart) for p in getattr(messages[-1], "parts", [])):
            yield "Noted."
            return
        if plan["at"] == "tool call":
            stop_after(plan["trips"])
        yield {0: DeltaToolCall(name="note", json_args='{"text": "x"}')}

    toolset: FunctionToolset[Any] = FunctionToolset(id="handoff")

    @toolset.tool_plain
    def note(text: str) -> str:
        """Note something."""
        return text

    hooks: Hooks[Any] = Hooks()

    @hooks.on.before_run
    async def stop_from_the_start(ctx: RunContext[Any]) -> None:
        if plan["at"] == "start":
            stop_after(plan["trips"])

    config = AppConfig(data_dir=tmp_path / "data", keepalive_seconds=5, tool_dirs=[])
    toolkit = build_chat_toolkit(config)
    agent = Agent(
        FunctionModel(stream_function=stream),
        deps_type=ChatDeps,
        output_type=[str, DeferredToolRequests],
        toolsets=[*toolkit.toolsets, toolset],
        capabilities=[*toolkit.capabilities, hooks],
    )
    app = create_app(config, agent=agent, toolkit=toolkit, handoff_drain_fix=True)

    def pydantic_ai_tasks() -> list[str]:
        return [
            repr(t.get_coro())
            for t in asyncio.all_tasks()
            if "pydantic_ai" in getattr(getattr(t.get_coro(), "cr_code", None), "co_filename", "")
        ]

    stops = [("start", trips) for trips in range(20)] + [("tool call", trips) for trips in range(80)]
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        services.append(app.state.services)
        for n, (at, trips) in enumerate(stops):
            plan.update(at=at, trips=trips)
            response = await client.post("/agui", json=run_body(f"handoff-{n}", "r1", "note it"))
            assert response.status_code == 200, response.text
            assert [e for _, e in parse_sse(response.text)][-1]["type"] in ("RUN_FINISHED", "RUN_ERROR")
        for _ in range(20):  # the runs' own tasks wind down
            await asyncio.sleep(0.01)
        left = pydantic_ai_tasks()
    assert left == [], f"{len(left)} pydantic-ai tasks left after {len(stops)} stopped runs: {left[:2]}"
