"""The QA toolset: answer a question with citations, reusing earlier answers when the question recurs."""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
from pydantic import BaseModel, Field, computed_field
from pydantic_ai import Agent, FunctionToolset, RunContext
from pydantic_ai.models import Model

from ..config import RagConfig
from ..deps import apply_later, emit_state_update, spawn
from ..extractive import Passage, extractive_answer
from ..filters import build_document_filter, combine_filters, get_session_filter
from ..kb import Filter, FilterLike, KnowledgeBase, as_filter
from ..kb.reranking import counting_usage
from ..models import model_run_options
from ..progress import report_progress
from ..state import (
    QA_NAMESPACE,
    SESSION_NAMESPACE,
    QASessionState,
    SessionContext,
    SessionState,
    SummarySource,
    ToolContext,
    prepare_context,
)
from ._common import SearchResult, cite_hits, deps_of, document_name_argument

__all__ = ["OnQAComplete", "QACitation", "QAResult", "create_qa_toolset", "run_qa_core", "summarize_session"]

NOT_FOUND = "I could not find an answer to that in the documents."
SUMMARY_CHARS = 160
SUMMARISED_ENTRIES = 8
"""How many of the latest QA entries a session summary is written from."""

OnQAComplete = Callable[[QASessionState, RagConfig], Awaitable[None] | None]


class QACitation(BaseModel):
    """A passage an answer cites as ``[index]``: which document, where in it, and the text."""

    index: int
    document_id: str
    document_title: str
    uri: str
    page: int | None = None
    locator: str = ""
    headings: list[str] = Field(default_factory=list)
    passage: str


class QAResult(BaseModel):
    """An answer with the citations it rests on (``citation_indices`` gives just their numbers)."""

    question: str
    answer: str
    confidence: float = Field(ge=0.0, le=1.0)
    citations: list[QACitation] = Field(default_factory=list)
    recalled_from: str | None = Field(default=None, description="Id of the earlier answer that was reused.")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def citation_indices(self) -> list[int]:
        """The ``[n]`` numbers the answer cites, in order."""
        return [c.index for c in self.citations]


def _citations(session: SessionState, indices: list[int]) -> list[QACitation]:
    """The cards of ``indices`` as citation objects (a card the session no longer keeps is left out)."""
    found = []
    for index in dict.fromkeys(indices):
        card = session.citations.get(str(index)) or session.pending_citations.get(str(index))
        if card is not None:
            found.append(
                QACitation(
                    index=card.index,
                    document_id=card.document_id,
                    document_title=card.title,
                    uri=card.uri,
                    page=card.page,
                    locator=card.locator,
                    headings=list(card.headings),
                    passage=card.passage,
                )
            )
    return found


class _ModelAnswer(BaseModel):
    answer: str = Field(description="The answer, citing passages as [n].")
    confidence: float = Field(ge=0.0, le=1.0)


def _scope(restriction: Filter | None) -> str:
    """A digest of the documents an answer is sought in (the toolset's and the session's filters)."""
    sql = restriction.to_sql() if restriction is not None else None
    return hashlib.sha256((sql or "").encode()).hexdigest()[:16]


def _recall(
    qa: QASessionState, vector: np.ndarray, document_name: str | None, scope: str, threshold: float
) -> str | None:
    """The earlier answer to reuse: a similar question, asked of the same documents, that found one.

    An answer sought under another filter (the user narrowed or widened the session's documents)
    is not reused, nor a "not found": documents may have been added since.
    """
    best_id, best = None, threshold
    by_id = {entry.id: entry for entry in qa.qa_history}
    for entry_id, stored in qa.question_embeddings.items():
        entry = by_id.get(entry_id)
        if (
            entry is None
            or entry.document != document_name
            or entry.scope != scope
            or entry.recalled_from
            or not entry.citations
        ):
            continue
        other = np.asarray(stored, dtype=np.float32)
        similarity = float(vector @ other / max(float(np.linalg.norm(vector) * np.linalg.norm(other)), 1e-12))
        if similarity >= best:
            best_id, best = entry_id, similarity
    return best_id


async def _answer_with_model(
    model: Model | str,
    question: str,
    results: list[SearchResult],
    session_context: str | None,
    run_options: dict[str, Any] | None = None,
) -> _ModelAnswer:
    passages = "\n\n".join(f"[{r.citation}] {r.title} ({r.location or r.uri})\n{r.text}" for r in results)
    instructions = (
        "Answer the question using only the numbered passages. Cite every claim with its passage number "
        "in square brackets, like [2]. If the passages do not answer it, say so plainly."
    )
    if session_context:
        instructions += f"\n\nEarlier in this conversation: {session_context}"
    agent = Agent(model, instructions=instructions, output_type=_ModelAnswer)
    prompt = f"Question: {question}\n\nPassages:\n{passages}"
    return (await agent.run(prompt, **(run_options or {}))).output


async def run_qa_core(
    *,
    client: KnowledgeBase,
    config: RagConfig,
    question: str,
    document_name: str | None = None,
    context: ToolContext | None = None,
    session_context: str | None = None,
    on_qa_complete: OnQAComplete | None = None,
    base_filter: FilterLike | None = None,
    model: Model | str | None = None,
    run_options: dict[str, Any] | None = None,
) -> QAResult:
    """The QA cycle without an agent: recall, else search and answer; then record it.

    An earlier answer in ``context`` whose question is at least ``config.qa_recall_threshold``
    similar, asked of the same documents (the same ``document_name``, ``base_filter`` and session
    filter) and that found an answer, is returned without searching. Otherwise the
    answer comes from ``model`` (default ``config.model``), or is extractive with no model. Every
    answer is appended to the bounded QA history; ``on_qa_complete`` runs last. ``run_options``
    are passed to the answer writer's ``Agent.run`` (``rag_tools.models.model_run_options``: inside a
    run, its usage, limits and capabilities).
    """
    context = context if context is not None else prepare_context(ToolContext(), ["qa"])
    qa = context.get_or_create(QA_NAMESPACE, QASessionState)
    vector = np.asarray(await client.embed_query(question), dtype=np.float32)
    restriction = get_session_filter(context, base_filter)
    scope = _scope(restriction)
    recalled_id = _recall(qa, vector, document_name, scope, config.qa_recall_threshold)
    if recalled_id is not None:
        prior = next(e for e in qa.qa_history if e.id == recalled_id)
        answer, confidence, cited = prior.answer, prior.confidence, list(prior.citations)
    else:
        if document_name:
            restriction = combine_filters(restriction, build_document_filter(document_name))
        hits = await client.search(
            question, limit=config.search_limit, filter=restriction, context_chars=config.context_chars
        )
        results = cite_hits(context, hits, config)
        answer_model = model if model is not None else config.model
        if not results:
            answer, confidence, cited = NOT_FOUND, 0.0, []
        elif answer_model is not None:
            produced = await _answer_with_model(answer_model, question, results, session_context, run_options)
            answer, confidence = produced.answer, produced.confidence
            cited = [r.citation for r in results if f"[{r.citation}]" in produced.answer]
        else:
            passages = [Passage(r.citation, r.text, f"{r.title}: {r.location or ''}") for r in results]
            extracted = await extractive_answer(client.embedding_model, question, passages)
            answer = extracted.text if extracted.found else NOT_FOUND
            confidence = extracted.confidence if extracted.found else 0.0
            cited = list(extracted.citations)
    session = context.get_or_create(SESSION_NAMESPACE, SessionState)
    result = QAResult(
        question=question,
        answer=answer,
        confidence=confidence,
        citations=_citations(session, cited),
        recalled_from=recalled_id,
    )
    if session.promote(cited, limit=config.citations_limit, text=answer):
        context.mark_changed(SESSION_NAMESPACE)
    qa.add_entry(
        {
            "question": question,
            "answer": result.answer,
            "confidence": result.confidence,
            "citations": tuple(cited),
            "document": document_name,
            "recalled_from": result.recalled_from,
            "scope": scope,
        },
        None if recalled_id else vector.tolist(),
        limit=config.qa_history_limit,
    )
    context.mark_changed(QA_NAMESPACE)
    if on_qa_complete is not None:
        outcome = on_qa_complete(qa, config)
        if inspect.isawaitable(outcome):
            await outcome
    return result


def _summarised(context: ToolContext, qa: QASessionState) -> tuple[list[str], list[str]]:
    """The ids of the entries ``summarize_session`` writes its summary from, and of the documents
    their answers cited."""
    entries = qa.qa_history[-SUMMARISED_ENTRIES:]
    session = context.get(SESSION_NAMESPACE, SessionState)
    cited = session.documents_of({i for e in entries for i in e.citations}) if session is not None else {}
    return [e.id for e in entries], sorted({d for d in cited.values() if d})


async def summarize_session(
    qa: QASessionState, model: Model | str | None, run_options: dict[str, Any] | None = None
) -> str:
    """A short account of what the session has asked so far, used as context for later answers.

    Without a model it lists the latest questions (at most ``SUMMARY_CHARS``); with one, the model
    summarises the latest exchanges.
    """
    recent = qa.qa_history[-SUMMARISED_ENTRIES:]
    if not recent:
        return ""
    if model is None:
        listed = "Questions so far: " + "; ".join(e.question for e in recent[-2:])
        return listed if len(listed) <= SUMMARY_CHARS else listed[: SUMMARY_CHARS - 1] + "…"
    transcript = "\n".join(f"Q: {e.question}\nA: {e.answer}" for e in recent)
    agent = Agent(model, instructions="Summarise this Q&A session in at most three sentences.")
    return (await agent.run(transcript, **(run_options or {}))).output


def _keep_summary(summary: str, of: tuple[list[str], list[str]]) -> Callable[[ToolContext], None]:
    """Keep ``summary``, written from the QA entries and citing the documents ``of`` names (a
    reader who may no longer read one of them is not shown it: ``rag_tools.readable``)."""
    entries, documents = of
    sources = tuple(SummarySource(document_id=d) for d in documents)

    def keep(context: ToolContext) -> None:
        state = context.get_or_create(QA_NAMESPACE, QASessionState)
        state.session_context = SessionContext(summary=summary, sources=sources)
        state.summary_of = entries
        context.mark_changed(QA_NAMESPACE)

    return keep


def create_qa_toolset(
    config: RagConfig,
    base_filter: FilterLike | None = None,
    tool_name: str = "ask",
    on_ask_complete: OnQAComplete | None = None,
    *,
    model: Model | str | None = None,
) -> FunctionToolset[Any]:
    """A toolset with ``ask(question, document_name?)`` returning a ``QAResult``.

    After each answer the session summary (``session_context``) is refreshed. Without a model it is
    the list of the latest questions, written with the answer. With one, a model writes it in the
    background: the task belongs to the thread (``AgentDeps.spawn``), so it is cancelled when the
    thread is evicted or the process stops, and its result is saved with the thread when it lands
    (``AgentDeps.apply_later``), even after the run committed; clients get it with the next run.
    """
    base_filter = as_filter(base_filter)  # a bad one fails here, not at the model's first call
    toolset: FunctionToolset[Any] = FunctionToolset(id=f"rag-{tool_name}")
    answer_model = model if model is not None else config.model

    async def ask(ctx: RunContext[Any], question: str, document_name: str | None = None) -> QAResult:
        """Answer a question from the documents, with citations.

        Args:
            question: The question to answer.
            document_name: Restrict the answer to this document (part of its title or uri).
        """
        deps = deps_of(ctx)
        document_name = document_name_argument(document_name)
        await report_progress(ctx, f"Answering “{question}”")
        qa = deps.tool_context.get_or_create(QA_NAMESPACE, QASessionState)
        with counting_usage(ctx.usage):  # a model that reranks the search counts in this run
            result = await run_qa_core(
                client=deps.client,
                config=config,
                question=question,
                document_name=document_name,
                context=deps.tool_context,
                session_context=qa.session_context.summary if qa.session_context else None,
                on_qa_complete=on_ask_complete,
                base_filter=base_filter,
                model=answer_model,
                run_options=model_run_options(deps.deps, ctx),
            )
        if answer_model is None:  # listing the questions is instant: part of this answer's state change
            of = _summarised(deps.tool_context, qa)
            _keep_summary(await summarize_session(qa, None), of)(deps.tool_context)
        await emit_state_update(ctx)
        if answer_model is not None:

            async def refresh_summary() -> None:
                of = _summarised(deps.tool_context, qa)
                # counted like the answer (tokens, traces, the day's budget), after the run too
                summary = await summarize_session(qa, answer_model, model_run_options(deps.deps, ctx))
                await apply_later(deps.deps, deps.tool_context, _keep_summary(summary, of))

            spawn(deps.deps, refresh_summary())
        return result

    toolset.add_function(ask, name=tool_name)
    return toolset
