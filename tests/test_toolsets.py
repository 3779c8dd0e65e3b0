"""The RAG toolsets exercised through real pydantic-ai agents driven by scripted models."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from ag_ui.core import EventType, RunAgentInput, UserMessage
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.ui.ag_ui import AGUIAdapter

from rag_tools import (
    AgentDeps,
    ChatDeps,
    RagConfig,
    ToolContext,
    build_toolkit,
    create_chat_agent,
    run_qa_core,
)
from rag_tools.kb import DocumentFilter, KnowledgeBase
from rag_tools.state import (
    QA_NAMESPACE,
    SEARCH_NAMESPACE,
    SESSION_NAMESPACE,
    QASessionState,
    SearchState,
    SessionState,
    prepare_context,
)
from tests.agents import Script
from tests.embedders import HashingEmbeddingModel

DOCS = {
    "alpha-manual.md": "# Alpha Manual\n\n## Backups\n\nAlpha keeps backups for 30 days.\n\n## Ports\n\nAlpha listens on port 7000.",
    "beta-manual.md": "# Beta Manual\n\n## Backups\n\nBeta keeps backups for 90 days.\n\n## Ports\n\nBeta listens on port 9000.",
    "gamma-notes.md": "# Gamma Notes\n\nGamma has no backups at all.",
}


@pytest.fixture
async def small_kb(tmp_path: Path) -> AsyncIterator[KnowledgeBase]:
    async with KnowledgeBase(tmp_path / "kb") as kb:
        for name, text in DOCS.items():
            await kb.ingest_bytes(text.encode(), name=name, uri=f"mem://{name}")
        yield kb


def config(**overrides: Any) -> RagConfig:
    return RagConfig(**{"search_limit": 5, "context_chars": 0, **overrides})


def deps_for(kb: KnowledgeBase, features: list[str], **overrides: Any) -> AgentDeps:
    return AgentDeps(client=kb, tool_context=prepare_context(ToolContext(), features), **overrides)


async def run(
    script: Script, toolkit_features: list[str], deps: AgentDeps, cfg: RagConfig | None = None, **kw: Any
) -> Any:
    toolkit = build_toolkit(cfg or config(), toolkit_features, **kw)
    agent = Agent(
        script.model, deps_type=AgentDeps, toolsets=toolkit.toolsets, capabilities=toolkit.capabilities
    )
    return await agent.run("go", deps=deps)


async def test_search_accumulates_state_with_stable_citations(small_kb: KnowledgeBase) -> None:
    deps = deps_for(small_kb, ["search"])
    script = Script(
        [
            [("search", {"query": "backups"})],
            [("search", {"query": "port"})],
            [("search", {"query": "backups"})],
        ]
    )
    await run(script, ["search"], deps)
    first, second, third = script.returns["search"]
    assert {r.title for r in first.results} >= {"Alpha Manual", "Beta Manual"}
    assert [(r.citation, r.uri) for r in first.results] == [(r.citation, r.uri) for r in third.results]
    session = deps.tool_context.get(SESSION_NAMESPACE, SessionState)
    all_citations = {r.citation for result in (first, second, third) for r in result.results}
    assert set(session.citation_registry.values()) == all_citations
    assert sorted(all_citations) == list(range(1, len(all_citations) + 1))
    # numbered, but the cards wait server-side until an answer cites them
    assert session.citations == {}
    assert set(session.pending_citations) == {str(c) for c in all_citations}
    assert session.promote_cited(f"as [{first.results[0].citation}] says") == [first.results[0].citation]
    assert set(session.citations) == {str(first.results[0].citation)}
    searches = deps.tool_context.get(SEARCH_NAMESPACE, SearchState)
    assert [s.query for s in sorted(searches.searches.values(), key=lambda s: s.seq)] == [
        "backups",
        "port",
        "backups",
    ]

    # a second run on the same context keeps numbering
    again = Script([[("search", {"query": "backups"})]])
    await run(again, ["search"], deps)
    assert [r.citation for r in again.returns["search"][0].results] == [r.citation for r in first.results]


async def test_session_filter_and_base_filter_restrict_every_tool(small_kb: KnowledgeBase) -> None:
    features = ["search", "documents", "qa"]
    deps = deps_for(small_kb, features)
    deps.tool_context.get(SESSION_NAMESPACE, SessionState).document_filter = ["manual"]
    base = DocumentFilter(names=("beta",))
    script = Script(
        [
            [("search", {"query": "backups"})],
            [("list_documents", {})],
            [("ask", {"question": "how long are backups kept"})],
            [("get_document", {"query": "alpha"})],
        ]
    )
    await run(script, features, deps, base_filter=base)
    assert {r.title for r in script.returns["search"][0].results} == {"Beta Manual"}
    assert [d.title for d in script.returns["list_documents"][0].documents] == ["Beta Manual"]
    qa = script.returns["ask"][0]
    assert "90 days" in qa.answer
    assert "30 days" not in qa.answer
    assert script.returns["get_document"][0].found is False  # alpha is outside both filters

    deps.tool_context.get(SESSION_NAMESPACE, SessionState).document_filter = ["gamma"]
    blocked = Script([[("search", {"query": "backups"})]])
    await run(blocked, ["search"], deps, base_filter=base)
    assert blocked.returns["search"][0].results == []
    assert blocked.returns["search"][0].note


async def test_filter_argument_is_a_name_never_sql(small_kb: KnowledgeBase) -> None:
    await small_kb.ingest_bytes(
        b"Quoted backups are kept for 5 days.", name="q.txt", uri="mem://q", title="O'Brien's ' OR 1=1 --"
    )
    deps = deps_for(small_kb, ["search"])
    script = Script(
        [
            [("search", {"query": "backups", "filter": "' OR 1=1 --"})],
            [("search", {"query": "backups", "filter": ["nonexistent'); DROP TABLE chunks; --"]})],
            [("search", {"query": "backups", "filter": ["alpha", "beta"]})],
        ]
    )
    await run(script, ["search"], deps)
    injected, dropped, two = script.returns["search"]
    assert {r.title for r in injected.results} == {"O'Brien's ' OR 1=1 --"}
    assert dropped.results == []
    assert {r.title for r in two.results} == {"Alpha Manual", "Beta Manual"}
    assert await small_kb.count_documents() == 4


async def test_documents_listing_pages_lookup_and_offline_summary(tmp_path: Path) -> None:
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel(64)) as kb:
        for i in range(55):
            await kb.ingest_bytes(
                f"Report {i} says the value is {i}. It was measured twice. All good.".encode(),
                name=f"r{i:02d}.txt",
                uri=f"mem://reports/r{i:02d}",
            )
        deps = deps_for(kb, ["documents"])
        script = Script(
            [
                [("list_documents", {})],
                [("list_documents", {"page": 2})],
                [("get_document", {"query": "mem://reports/r07"})],
                [("get_document", {"query": "r1"})],
                [("summarize_document", {"query": "r42"})],
            ]
        )
        await run(script, ["documents"], deps)
    page1, page2 = script.returns["list_documents"]
    assert (len(page1.documents), page1.pages, page1.total, page1.has_next) == (50, 2, 55, True)
    assert (len(page2.documents), page2.has_next) == (5, False)
    exact, partial = script.returns["get_document"]
    assert exact.uri == "mem://reports/r07"
    assert "value is 7" in exact.content
    assert partial.uri == "mem://reports/r1" or partial.uri.startswith("mem://reports/r1")
    summary = script.returns["summarize_document"][0]
    assert summary.found
    assert "value is 42" in summary.summary


async def test_qa_recall_hits_above_threshold_and_misses_below(small_kb: KnowledgeBase) -> None:
    question = "how long are backups kept"
    paraphrase = "how long are the backups kept"
    q, p = await small_kb.embed_query(question), await small_kb.embed_query(paraphrase)
    similarity = sum(a * b for a, b in zip(q, p, strict=True))
    assert 0.5 < similarity < 0.995

    for threshold, expect_recall in ((similarity - 0.01, True), (similarity + 0.01, False)):
        context = prepare_context(ToolContext(), ["qa"])
        cfg = config(qa_recall_threshold=threshold)
        first = await run_qa_core(client=small_kb, config=cfg, question=question, context=context)
        again = await run_qa_core(client=small_kb, config=cfg, question=paraphrase, context=context)
        assert first.recalled_from is None
        assert (again.recalled_from == "qa1") is expect_recall, threshold
        history = context.get(QA_NAMESPACE, QASessionState).qa_history
        assert [e.question for e in history] == [question, paraphrase]
        if expect_recall:
            assert again.answer == first.answer
            assert again.citations == first.citations


async def test_qa_recall_stays_within_the_documents_the_answer_was_sought_in(small_kb: KnowledgeBase) -> None:
    """An answer is reused only under the same filters, and a "not found" never is: after the user
    narrows the session's documents (or a toolset's base filter differs), the question is searched
    again in what may be read now."""
    cfg = config(qa_recall_threshold=0.5)
    context = prepare_context(ToolContext(), ["qa"])
    session = context.get(SESSION_NAMESPACE, SessionState)
    first = await run_qa_core(
        client=small_kb, config=cfg, question="how long does alpha keep backups", context=context
    )
    assert "30 days" in first.answer

    session.document_filter = ["gamma"]
    narrowed = await run_qa_core(
        client=small_kb, config=cfg, question="how long does alpha keep backups", context=context
    )
    assert narrowed.recalled_from is None
    assert "30 days" not in narrowed.answer
    assert {c.document_title for c in narrowed.citations} <= {"Gamma Notes"}

    session.document_filter = []
    again = await run_qa_core(
        client=small_kb, config=cfg, question="how long does alpha keep backups", context=context
    )
    assert again.recalled_from == "qa1"  # the first scope again: its answer is reused

    beta_only = await run_qa_core(
        client=small_kb,
        config=cfg,
        question="how long does alpha keep backups",
        context=context,
        base_filter=DocumentFilter(names=("beta",)),
    )
    assert beta_only.recalled_from is None and "30 days" not in beta_only.answer

    nothing = prepare_context(ToolContext(), ["qa"])
    nothing.get(SESSION_NAMESPACE, SessionState).document_filter = ["no such document"]
    missed = await run_qa_core(
        client=small_kb, config=cfg, question="how long does alpha keep backups", context=nothing
    )
    assert missed.citations == []
    nothing.get(SESSION_NAMESPACE, SessionState).document_filter = ["no such document"]
    retried = await run_qa_core(
        client=small_kb, config=cfg, question="how long does alpha keep backups", context=nothing
    )
    assert retried.recalled_from is None  # a "not found" is searched again, never recalled
    assert all("scope" not in entry for entry in nothing.build_state_snapshot()["qa_history"])


async def test_a_models_document_name_never_fails_the_run(small_kb: KnowledgeBase) -> None:
    """A blank ``document_name`` means no restriction; one longer than any filter takes goes back
    to the model as a retry, saying why, instead of failing the run."""
    deps = deps_for(small_kb, ["qa"])
    script = Script(
        [
            [("ask", {"question": "how long does beta keep backups", "document_name": "   "})],
            [("ask", {"question": "how long does beta keep backups", "document_name": "x" * 600})],
        ]
    )
    result = await run(script, ["qa"], deps)
    assert result.output == "done"
    assert "90 days" in script.returns["ask"][0].answer
    assert "600 characters long" in str(script.returns["ask"][1])


async def test_qa_history_is_bounded_and_callback_runs(small_kb: KnowledgeBase) -> None:
    seen: list[int] = []

    async def on_complete(state: QASessionState, cfg: RagConfig) -> None:
        seen.append(len(state.qa_history))

    context = prepare_context(ToolContext(), ["qa"])
    cfg = config(qa_history_limit=2, qa_recall_threshold=1.0)
    for question in ["alpha port", "beta port", "gamma backups"]:
        await run_qa_core(
            client=small_kb, config=cfg, question=question, context=context, on_qa_complete=on_complete
        )
    qa = context.get(QA_NAMESPACE, QASessionState)
    assert [e.question for e in qa.qa_history] == ["beta port", "gamma backups"]
    assert seen == [1, 2, 2]
    assert set(qa.question_embeddings) == {e.id for e in qa.qa_history}


async def test_ask_writes_the_offline_session_summary_with_the_answer(small_kb: KnowledgeBase) -> None:
    deps = deps_for(small_kb, ["qa"])
    await run(Script([[("ask", {"question": "what port does alpha use"})]]), ["qa"], deps)
    context = deps.tool_context.get(QA_NAMESPACE, QASessionState).session_context
    assert context is not None, "no model: the summary is written with the answer, no task needed"
    assert "what port does alpha use" in context.summary


async def test_a_model_summary_is_written_by_a_tracked_background_task(small_kb: KnowledgeBase) -> None:
    class Recorder:
        def __init__(self) -> None:
            self.tasks: list[asyncio.Task[Any]] = []

        def track(self, task: asyncio.Task[Any]) -> None:
            self.tasks.append(task)

    recorder = Recorder()
    deps = deps_for(small_kb, ["qa"], tasks=recorder)
    script = Script([[("ask", {"question": "what port does alpha use"})]])

    def answer_or_summarize(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if info.output_tools:  # the QA answer (structured)
            args = {"answer": "Alpha uses its port [1].", "confidence": 0.8}
            return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, args)])
        return ModelResponse(parts=[TextPart("The user asked about alpha's port.")])  # the summary

    await run(script, ["qa"], deps, model=FunctionModel(answer_or_summarize))
    assert len(recorder.tasks) == 1, "the summary task is handed to the thread's tracker"
    await recorder.tasks[0]
    context = deps.tool_context.get(QA_NAMESPACE, QASessionState).session_context
    assert context is not None
    assert context.summary == "The user asked about alpha's port."


async def test_tool_state_changes_reach_agui_as_deltas_that_apply(small_kb: KnowledgeBase) -> None:
    script = Script([[("search", {"query": "backups"})], [("ask", {"question": "what port does beta use"})]])
    toolkit = build_toolkit(config(), ["search", "qa"])
    agent = Agent(script.model, deps_type=AgentDeps, toolsets=toolkit.toolsets)
    deps = AgentDeps(client=small_kb, tool_context=toolkit.create_context())
    client_state: dict[str, Any] = {"document_filter": [], "citations": {}, "searches": {}, "qa_history": []}
    run_input = RunAgentInput(
        thread_id="t",
        run_id="r",
        state=client_state,
        messages=[UserMessage(id="u", content="go")],
        tools=[],
        context=[],
        forwarded_props={},
    )
    events = [event async for event in AGUIAdapter(agent=agent, run_input=run_input).run_stream(deps=deps)]
    kinds = [e.type for e in events]
    assert kinds[0] == EventType.RUN_STARTED
    assert kinds[-1] == EventType.RUN_FINISHED
    state_events = [e for e in events if e.type in (EventType.STATE_DELTA, EventType.STATE_SNAPSHOT)]
    assert len(state_events) == 2  # one per state-changing tool call (a snapshot when that is smaller)
    assert state_events[-1].type == EventType.STATE_DELTA
    state = client_state
    for event in state_events:
        wire = event.model_dump(mode="json", by_alias=True)  # what the client receives
        state = jsonpatch.apply_patch(state, wire["delta"]) if "delta" in wire else wire["snapshot"]
    assert state == deps.state
    assert state["qa_history"][0]["question"] == "what port does beta use"


async def test_offline_chat_agent_answers_with_citations_and_follow_ups(corpus_kb: KnowledgeBase) -> None:
    cfg = RagConfig()
    agent = create_chat_agent(cfg)
    deps = ChatDeps(
        client=corpus_kb,
        tool_context=prepare_context(ToolContext(), ["search", "documents", "qa"]),
        config=cfg,
    )
    first = await agent.run("How long are nightly database backups retained?", deps=deps)
    assert "35 days" in first.output
    session = deps.tool_context.get(SESSION_NAMESPACE, SessionState)
    cited = [c for c in session.citations.values() if f"[{c.index}]" in first.output]
    assert cited
    assert any(c.title == "Kiteline Cloud Operations Handbook" and c.page == 2 for c in cited)

    follow = await agent.run("and the monthly ones?", deps=deps, message_history=first.all_messages())
    assert "12 months" in follow.output

    session.document_filter = ["deployment"]
    filtered = await agent.run("How long should backups be kept?", deps=deps)
    used = {session.citations[n].title for n in session.citations if f"[{n}]" in filtered.output}
    assert used == {"Deploying ragstream"}

    nothing = await agent.run("What is the airspeed of an unladen swallow?", deps=deps)
    assert nothing.output.startswith("None of the ") and "swallow" in nothing.output
    assert "deployment" in nothing.output  # names the filter it searched under
    shown = set(session.citations)
    quoting = await agent.run("What are swallows [1] and [2]?", deps=deps)
    assert quoting.output.startswith("None of the ") and "(1) and (2)" in quoting.output
    assert set(session.citations) == shown  # the question's [1] and [2] cite nothing
