"""The seed chat app's names and shapes, through the real server and the real @ag-ui/client.

``AGUI_STATE_KEY`` puts the state under one key, ``QAResult.citations`` are citation objects (with
``citation_indices``), a trusted SQL ``base_filter`` restricts every tool together with the
session's structured filter, and the background session summary is saved when it lands, after
the run committed, so it survives the thread leaving the cache.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from rag_tools import (
    AGUI_STATE_KEY,
    QAResult,
    RagConfig,
    ToolContext,
    build_toolkit,
    combine_filters,
    create_chat_agent,
    prepare_chat_context,
    run_qa_core,
)
from rag_tools.kb import DocumentFilter, KnowledgeBase, SqlFilter
from tests.agui_client import drive
from tests.protocol import check_stream
from tests.servers import serve
from tests.test_composition import QUESTION, researcher

HANDBOOK = "Kiteline Cloud Operations Handbook"


def test_prepare_chat_context_registers_the_chat_namespaces_once_under_the_key() -> None:
    context = prepare_chat_context(ToolContext(), state_key=AGUI_STATE_KEY)
    assert list(context.build_state_snapshot()) == [AGUI_STATE_KEY]
    state = context.build_state_snapshot()[AGUI_STATE_KEY]
    assert {"citations", "qa_history", "document_filter", "session_context"} <= set(state)
    before = context.dump_namespaces()
    assert prepare_chat_context(context) is context and context.dump_namespaces() == before


def test_a_sql_base_filter_combines_with_structured_filters_as_one_term() -> None:
    combined = combine_filters("uri LIKE '%ops%' OR title = 'x'", DocumentFilter(names=("guide",)))
    assert combined is not None
    sql = combined.to_sql()
    assert sql is not None and sql.startswith("((uri LIKE '%ops%' OR title = 'x') AND (")
    assert combine_filters(None, "title = 'a'") == SqlFilter("title = 'a'")
    for unsafe in ("", "1=1) OR (1=1", "title = 'a'; DROP TABLE chunks", "title = 'a' -- x", "title = 'a"):
        with pytest.raises(ValueError, match="SQL filter"):
            combine_filters(unsafe, None)


async def test_qa_result_citations_are_objects_with_their_numbers_reachable(corpus_kb: KnowledgeBase) -> None:
    result = await run_qa_core(client=corpus_kb, config=RagConfig(), question=QUESTION)
    assert isinstance(result, QAResult) and result.citations
    lines = [
        f"[{citation.index}] {citation.document_title}" for citation in result.citations
    ]  # the seed's loop
    assert lines[0].endswith(HANDBOOK)
    assert result.citation_indices == [c.index for c in result.citations]
    assert all(f"[{n}]" in result.answer for n in result.citation_indices)
    first = result.citations[0]
    assert first.uri and first.passage and (first.page or first.headings)
    assert result.model_dump()["citation_indices"] == result.citation_indices


def qa_and_summary_model(gate: asyncio.Event) -> FunctionModel:
    """Answers QA questions (structured) at once; writes the session summary once ``gate`` opens."""

    async def function(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if info.output_tools:
            prompt = str(messages[0].parts[-1].content)  # type: ignore[union-attr]
            cited = prompt.split("Passages:\n[")[1].split("]")[0]
            answer = {"answer": f"They are kept 35 days [{cited}].", "confidence": 0.9}
            return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, answer)])
        await gate.wait()
        return ModelResponse(parts=[TextPart("The user asked how long nightly backups are kept.")])

    return FunctionModel(function, model_name="qa-and-summary")


async def test_seed_chat_shapes_through_the_server(scenario_config: Any, tmp_path: Path) -> None:
    from ragstream.app import create_app

    gate = asyncio.Event()
    config = scenario_config
    config.state_key = AGUI_STATE_KEY
    toolkit = build_toolkit(
        config,
        ["search", "documents", "qa"],
        base_filter="title LIKE 'Kiteline%' OR title LIKE 'Northwind%'",  # the seed's SQL form
        model=qa_and_summary_model(gate),
    )
    app = create_app(config, agent=create_chat_agent(config, toolkit, model=researcher()), toolkit=toolkit)
    async with serve(app) as url:
        services = app.state.services
        first = await drive(
            tmp_path,
            url,
            "seed",
            [
                {"op": "setState", "state": {AGUI_STATE_KEY: {"document_filter": ["operations"]}}},
                {"op": "user", "text": QUESTION},
                {"op": "run"},
            ],
        )
        run = first["steps"][-1]
        assert run["finished"]["outcome"] == "success" and run["warnings"] == []
        state = check_stream(run["events"], {AGUI_STATE_KEY: {"document_filter": ["operations"]}})
        assert list(state) == [AGUI_STATE_KEY] and state == run["state"]
        keyed = state[AGUI_STATE_KEY]
        assert keyed["document_filter"] == ["operations"]
        assert keyed["session_context"] is None, "the summary is still being written"
        # base filter AND the session's filter: every card is from the handbook
        assert {c["title"] for c in keyed["citations"].values()} == {HANDBOOK}
        # the client sees QAResult's citation objects in the ask tool's result
        ask_call = next(
            e for e in run["events"] if e["type"] == "TOOL_CALL_START" and e["toolCallName"] == "ask"
        )
        result = json.loads(
            next(
                e["content"]
                for e in run["events"]
                if e["type"] == "TOOL_CALL_RESULT" and e["toolCallId"] == ask_call["toolCallId"]
            )
        )
        assert result["citations"][0]["document_title"] == HANDBOOK
        assert result["citation_indices"] == [c["index"] for c in result["citations"]]
        assert keyed["qa_history"][-1]["citations"] == result["citation_indices"]

        gate.set()  # the summary lands after the run committed ...
        for _ in range(500):
            saved = await services.store.load("seed")
            qa = saved.state.get("rag.qa", {}) if saved else {}
            if qa.get("session_context"):
                break
            await asyncio.sleep(0.01)
        assert qa["session_context"]["summary"] == "The user asked how long nightly backups are kept."
        assert await services.cache.evict("seed")  # ... and is saved: eviction loses nothing
        assert "seed" not in services.cache

        second = await drive(tmp_path, url, "seed", [{"op": "user", "text": "Thanks!"}, {"op": "run"}])
    run = second["steps"][-1]
    state = check_stream(run["events"], {})
    summary = state[AGUI_STATE_KEY]["session_context"]["summary"]
    assert summary == "The user asked how long nightly backups are kept."
