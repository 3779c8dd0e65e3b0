"""Composing the RAG toolsets into your own agent, served over AG-UI and read by the real @ag-ui/client.

Three compositions answer the same conversation: the toolsets alone with ``AgentDeps``, the
toolsets alone with a deps class of the user's own (the ``RAGDeps`` protocol), and the chat
agent's way (toolsets plus ``toolkit.capabilities``). Each gets citation cards for what the answer
cites, the QA history and a run-carried baseline (STATE_SNAPSHOT first, then deltas that apply).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.ui.ag_ui import AGUIAdapter
from pydantic_core import to_jsonable_python
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from rag_tools import (
    AgentDeps,
    KnowledgeBase,
    RagConfig,
    RAGDeps,
    ToolContext,
    ToolContextCache,
    Toolkit,
    build_toolkit,
)
from tests.agents import planned_model
from tests.agui_client import drive
from tests.protocol import check_stream
from tests.servers import serve

QUESTION = "How long are nightly database backups retained?"


@dataclass
class MyDeps:
    """A user's own deps: no ragstream base class, just what ``RAGDeps`` asks for (and a user id)."""

    client: KnowledgeBase
    tool_context: ToolContext | None
    user: str = "ada"


def researcher() -> FunctionModel:
    """Searches, asks, then answers citing the first passage the search found."""

    def plan(messages: list[ModelMessage], info: AgentInfo) -> tuple[str, dict[str, Any]] | str:
        turn = max(
            i
            for i, m in enumerate(messages)
            if isinstance(m, ModelRequest) and any(p.part_kind == "user-prompt" for p in m.parts)
        )
        returns = {
            p.tool_name: to_jsonable_python(p.content)
            for m in messages[turn:]
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, ToolReturnPart)
        }
        if "search" not in returns:
            return ("search", {"query": "nightly database backups retention"})
        if "ask" not in returns:
            return ("ask", {"question": QUESTION})
        first = returns["search"]["results"][0]["citation"]
        return f"Nightly backups are kept for 35 days [{first}]."

    return planned_model(plan, "researcher")


def agui_app(
    kb: KnowledgeBase, toolkit: Toolkit, agent: Agent[Any, Any], make_deps: Callable[[ToolContext], Any]
) -> Starlette:
    """The pattern of ``examples/custom_agent_agui.py``: pydantic-ai's own AG-UI dispatch, one context per thread."""
    contexts = ToolContextCache(prepare=toolkit.prepare)

    async def run(request: Request) -> Response:
        run_input = AGUIAdapter.build_run_input(await request.body())
        context, _ = await contexts.get_or_create(run_input.thread_id)
        return await AGUIAdapter.dispatch_request(request, agent=agent, deps=make_deps(context))

    return Starlette(routes=[Route("/agui", run, methods=["POST"])])


def composed(kb: KnowledgeBase, how: str) -> Starlette:
    config = RagConfig(search_limit=3, context_chars=0)
    toolkit = build_toolkit(config, features=["search", "documents", "qa"])
    if how == "agent-deps":
        agent: Agent[Any, Any] = Agent(researcher(), toolsets=toolkit.toolsets, deps_type=AgentDeps)
        return agui_app(kb, toolkit, agent, lambda context: AgentDeps(client=kb, tool_context=context))
    if how == "own-deps":
        agent = Agent(researcher(), toolsets=toolkit.toolsets, deps_type=MyDeps)
        return agui_app(kb, toolkit, agent, lambda context: MyDeps(client=kb, tool_context=context))
    agent = Agent(
        researcher(), toolsets=toolkit.toolsets, capabilities=toolkit.capabilities, deps_type=AgentDeps
    )
    return agui_app(kb, toolkit, agent, lambda context: AgentDeps(client=kb, tool_context=context))


def test_a_deps_class_of_your_own_satisfies_the_protocol(corpus_kb: KnowledgeBase) -> None:
    assert isinstance(MyDeps(client=corpus_kb, tool_context=None), RAGDeps)
    assert isinstance(AgentDeps(client=corpus_kb, tool_context=ToolContext()), RAGDeps)
    assert not isinstance(object(), RAGDeps)


async def converse(kb: KnowledgeBase, how: str, tmp_path: Path) -> list[dict[str, Any]]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    async with serve(composed(kb, how)) as url:
        report = await drive(
            tmp_path,
            url,
            f"thread-{how}",
            [
                {"op": "user", "text": QUESTION},
                {"op": "run"},
                {"op": "user", "text": QUESTION},
                {"op": "run"},
            ],
        )
    runs = [s for s in report["steps"] if s["op"] == "run"]
    state: Any = {}
    for run in runs:
        assert run["warnings"] == [] and run["errors"] == [], (run["warnings"], run["errors"])
        assert run["runError"] is None and run["failed"] is None
        assert run["finished"]["outcome"] == "success"
        state = check_stream(run["events"], state)
        assert state == run["state"], "the client's state differs from what the stream says"
        kinds = [t for t in run["types"] if t.startswith("STATE_")]
        assert kinds[0] == "STATE_SNAPSHOT" and set(kinds[1:]) <= {"STATE_DELTA"}, kinds
    return runs


# pydantic-ai warns that MyDeps takes no client state (it is no StateHandler): that is the point
@pytest.mark.filterwarnings("ignore:State was provided but:UserWarning")
@pytest.mark.parametrize("how", ["agent-deps", "own-deps"])
async def test_toolsets_alone_give_citations_qa_history_and_state_events(
    corpus_kb: KnowledgeBase, tmp_path: Path, how: str
) -> None:
    chat_way = await converse(corpus_kb, "with-capabilities", tmp_path / "chat")
    runs = await converse(corpus_kb, how, tmp_path / how)
    for run, reference in zip(runs, chat_way, strict=True):
        answer = run["messages"][-1]["content"]
        assert answer == reference["messages"][-1]["content"]
        cited = answer.split("[")[1].split("]")[0]
        card, expected = run["state"]["citations"][cited], reference["state"]["citations"][cited]
        assert card["title"] == expected["title"] == "Kiteline Cloud Operations Handbook"
        assert card["uri"] == expected["uri"] and card["index"] == int(cited)
        assert run["state"]["qa_history"] == reference["state"]["qa_history"]
        assert run["state"]["qa_history"][-1]["question"] == QUESTION
        assert run["state"]["searches"].keys() == reference["state"]["searches"].keys()
