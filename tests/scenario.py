"""A keyword-driven model and agent for server tests: each user message picks a scenario.

- ``archive <note>``: calls ``archive_note`` (needs approval; changes server-owned state);
  ``archive both <a> <b>``: two such calls in one response;
- ``pick``: calls the browser's ``pick_color`` tool (a frontend tool the client declares);
- ``slow``: streams 300 tokens, 20 ms apart (for stop and abort tests);
- ``convert 3 km mi`` / ``note <text>``: call the example user tools (examples/custom_tools);
- ``call <tool> <json args>``: calls any tool with those arguments (a failed call is answered
  ``Failed: <message>``);
- ``fail``: the model raises an error whose text holds a secret;
- ``hang``: the model waits forever (for run timeouts);
- ``searching slowly <query>``: ``search``, then answer as ``slow`` does (a stop or a timeout after
  the run changed the state);
- ``fenced <query>``: ``search``, then answer with a fenced code block (a blank line inside it)
  between two paragraphs citing the first passage;
- anything else: ``search`` for the text, then answer citing the first passage.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, ClassVar

from pydantic_ai import Agent, DeferredToolRequests, FunctionToolset, RunContext
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from rag_tools import ChatDeps, Toolkit, emit_state_update
from rag_tools.state import StateModel
from tests.protocol import last_user_text

SECRET = "postgres://admin:hunter2@db"


class Notes(StateModel):
    client_fields: ClassVar[frozenset[str]] = frozenset()
    archived: list[str] = []


async def _stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    last = messages[-1]
    returns = (
        [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []
    )
    if returns:
        part = returns[-1]
        if part.tool_name == "search":
            content = (
                part.content if isinstance(part.content, dict) else json.loads(part.model_response_str())
            )
            results = content.get("results", [])
            if last_user_text(messages).startswith("searching slowly"):
                for i in range(300):
                    await asyncio.sleep(0.02)
                    yield f"tok{i} "
            elif results and last_user_text(messages).startswith("fenced"):
                cite = results[0]["citation"]
                yield f"Make the environment and activate it [{cite}]:\n\n```bash\npython3 -m venv env\n\n"
                yield f"source env/bin/activate\n```\n\nThen `pip install` what you need [{cite}]."
            elif results:
                first = results[0]
                yield f"Found it in {first['title']} [{first['citation']}]."
            else:
                yield "Nothing found."
        elif part.tool_name == "archive_note":
            yield ("Not archived: " if part.outcome == "denied" else "") + str(part.content)
        elif part.tool_name == "pick_color":
            yield f"You picked {part.content}."
        else:
            prefix = {"denied": "Denied: ", "failed": "Failed: "}.get(part.outcome, f"{part.tool_name}: ")
            yield prefix + str(part.content)
        return
    text = last_user_text(messages).strip()
    if text.startswith("slow"):
        for i in range(300):
            await asyncio.sleep(0.02)
            yield f"tok{i} "
    elif text.startswith("archive both "):  # two calls in one response: two approvals pending
        first, second = text[13:].split(" ", 1)
        yield {
            0: DeltaToolCall(name="archive_note", json_args=json.dumps({"note": first})),
            1: DeltaToolCall(name="archive_note", json_args=json.dumps({"note": second})),
        }
    elif text.startswith("archive "):
        yield {0: DeltaToolCall(name="archive_note", json_args=json.dumps({"note": text[8:]}))}
    elif text.startswith("pick") and "pick_color" in {t.name for t in info.function_tools}:
        yield {0: DeltaToolCall(name="pick_color", json_args=json.dumps({"options": ["red", "blue"]}))}
    elif text.startswith("convert "):
        value, from_unit, to_unit = text.split()[1:4]
        args = {"value": float(value), "from_unit": from_unit, "to_unit": to_unit}
        yield {0: DeltaToolCall(name="convert_units", json_args=json.dumps(args))}
    elif text.startswith("note "):
        yield {0: DeltaToolCall(name="save_note", json_args=json.dumps({"text": text[5:]}))}
    elif text.startswith("call "):
        name, _, args = text[5:].partition(" ")
        yield {0: DeltaToolCall(name=name, json_args=args or "{}")}
    elif text.startswith("fail"):
        raise RuntimeError(f"connection to {SECRET} failed")
    elif text.startswith("hang"):
        await asyncio.sleep(3600)
        yield "never"
    else:
        yield {0: DeltaToolCall(name="search", json_args=json.dumps({"query": text}))}


def scenario_model() -> FunctionModel:
    return FunctionModel(stream_function=_stream, model_name="scenario")


def notes_toolset() -> FunctionToolset[Any]:
    toolset: FunctionToolset[Any] = FunctionToolset(id="notes")

    @toolset.tool(requires_approval=True)
    async def archive_note(ctx: RunContext[ChatDeps], note: str) -> str:
        """Archive a note (needs the user's approval)."""
        notes = ctx.deps.tool_context.get_or_create("notes", Notes)
        notes.archived = [*notes.archived, note]
        ctx.deps.tool_context.mark_changed("notes")
        await emit_state_update(ctx)
        return f"Archived {note}."

    return toolset


def scenario_agent(toolkit: Toolkit, model: FunctionModel | None = None) -> Agent[ChatDeps, Any]:
    """The scenario agent over ``toolkit``; ``model`` replaces the scenario model (one that records
    what it is sent and then answers as ``_stream`` does, say)."""
    return Agent(
        model or scenario_model(),
        deps_type=ChatDeps,
        output_type=[str, DeferredToolRequests],
        toolsets=[*toolkit.toolsets, notes_toolset()],
        capabilities=toolkit.capabilities,
    )
