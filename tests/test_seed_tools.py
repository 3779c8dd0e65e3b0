"""The rest of the seed's tool surface, through the real server and the real @ag-ui/client.

A tools directory declares a toolset factory rebuilt at every run step (``per_run_step``) and a
tool whose instructions are a function of the run context; every tool call's start and end reach
the client (a ``ragstream.tool_call`` CUSTOM event) and the thread's stored history (the result's
metadata).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic_ai import FunctionToolset
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from rag_tools import build_chat_toolkit, create_chat_agent
from rag_tools.tools import ToolRegistry, toolset_options
from rag_tools.tools.timing import TIMING_KEY, TOOL_CALL_EVENT
from tests.agents import planned_model
from tests.agui_client import drive
from tests.servers import serve

TOOLS_FILE = '''
from pydantic_ai import FunctionToolset, RunContext
from pydantic_ai.messages import ModelRequest, ToolReturnPart

from rag_tools.state import SEARCH_NAMESPACE, SearchState
from rag_tools.tools import tool_options, toolset_options


def searches_so_far(ctx: RunContext) -> str:
    state = ctx.deps.tool_context.get(SEARCH_NAMESPACE, SearchState)
    return f"Searches so far in this thread: {len(state.searches) if state else 0}."


@tool_options(instructions=searches_so_far)
def clock() -> str:
    """What time it is."""
    return "noon"


def searched_in_this_run(ctx: RunContext) -> bool:
    return any(
        isinstance(p, ToolReturnPart) and p.tool_name == "search"
        for m in ctx.messages
        if isinstance(m, ModelRequest)
        for p in m.parts
    )


@toolset_options(per_run_step=True)
def follow_up(ctx: RunContext):
    toolset = FunctionToolset()
    if searched_in_this_run(ctx):

        @toolset.tool_plain
        def open_first_hit() -> str:
            """Open the first passage the search found."""
            return "opened"

    return toolset


TOOLS = [clock]
TOOLSETS = {"follow_up": follow_up}
'''


def stepper() -> FunctionModel:
    """Search; then open the first hit if that tool appeared; then answer with what the instructions said."""
    seen: list[str] = []

    def plan(messages: list[ModelMessage], info: AgentInfo) -> tuple[str, dict[str, Any]] | str:
        line = next(
            (s for s in (info.instructions or "").splitlines() if s.startswith("Searches so far")), "none"
        )
        seen.append(line.rsplit(" ", 1)[-1].rstrip("."))
        done = {
            p.tool_name
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, ToolReturnPart)
        }
        tools = {t.name for t in info.function_tools}
        if "search" not in done:
            return ("search", {"query": "nightly backups"})
        if "open_first_hit" in tools and "open_first_hit" not in done:
            return ("open_first_hit", {})
        return f"instructions saw {', '.join(seen)} searches"

    return planned_model(plan, "stepper")


def test_a_factory_declares_per_run_step_and_instructions_for_the_registry() -> None:
    registry = ToolRegistry()

    @toolset_options(per_run_step=True, instructions=lambda ctx: "dynamic")
    def factory(ctx: Any) -> FunctionToolset[Any]:
        return FunctionToolset()

    spec = registry.add_toolset("f", factory)
    assert spec.per_run_step and spec.instructions is not None
    (built,) = registry.resolve(tools=[], toolsets=["f"])
    assert built.wrapped.per_run_step is True  # type: ignore[attr-defined]


async def test_per_run_step_factories_context_instructions_and_tool_call_times(
    scenario_config: Any, tmp_path: Path
) -> None:
    from ragstream.agui.history import stored_messages
    from ragstream.app import create_app

    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "seed_tools.py").write_text(TOOLS_FILE)
    config = scenario_config
    config.tool_dirs = [tools]
    toolkit = build_chat_toolkit(config)
    app = create_app(config, agent=create_chat_agent(config, toolkit, model=stepper()), toolkit=toolkit)
    async with serve(app) as url:
        report = await drive(tmp_path, url, "steps", [{"op": "user", "text": "go"}, {"op": "run"}])
        record = await app.state.services.store.load("steps")
    run = report["steps"][-1]
    assert run["finished"]["outcome"] == "success" and run["warnings"] == [] and run["errors"] == []
    calls = [e["toolCallName"] for e in run["events"] if e["type"] == "TOOL_CALL_START"]
    assert calls == ["search", "open_first_hit"], (
        "the factory offered its tool from the step after the search"
    )
    # the instructions were computed per request from the thread's state: 0 searches, then 1
    assert run["messages"][-1]["content"] == "instructions saw 0, 1, 1 searches"

    timings = {
        e["value"]["toolCallId"]: e["value"] for e in run["events"] if e.get("name") == TOOL_CALL_EVENT
    }
    results = [e for e in run["events"] if e["type"] == "TOOL_CALL_RESULT"]
    assert {r["toolCallId"] for r in results} == set(timings)
    for value in timings.values():
        started, ended = datetime.fromisoformat(value["startedAt"]), datetime.fromisoformat(value["endedAt"])
        assert started <= ended and value["outcome"] == "success"
        assert value["durationMs"] >= 0
    # the thread's record keeps the same times in each result's metadata
    messages, _ = stored_messages(record.extras, "steps")
    returns = [
        p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)
    ]
    assert [p.tool_name for p in returns] == ["search", "open_first_hit"]
    for part in returns:
        stamp = part.metadata[TIMING_KEY]
        assert stamp["started_at"] == timings[part.tool_call_id]["startedAt"]
        assert stamp["ended_at"] == timings[part.tool_call_id]["endedAt"]
