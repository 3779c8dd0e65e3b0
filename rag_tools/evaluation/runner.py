"""Run labelled questions against a knowledge base: each search mode, then (optionally) the chat agent."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from statistics import fmean

from ..agent import build_chat_toolkit, create_chat_agent
from ..config import RagConfig, SearchMode
from ..deps import ChatDeps
from ..kb import KnowledgeBase, SearchHit
from ..offline_model import create_extractive_model
from ..state import SESSION_NAMESPACE, SessionState
from .metrics import DEPTH, RANKING_FIGURES, ranking_figures
from .questions import LabelledQuestion, contains_fact
from .report import AnswerFigures, AnswerResult, EvalReport, ModeReport, QuestionResult, Result

__all__ = ["evaluate", "evaluation_steps", "fragments"]

_TOP = 5
_MARKER = re.compile(r"\s*\[\d+\]")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_LEAD = re.compile(r"^[\s\-*+>\"“'(]*(?:\d+[.)]\s+)?")
_PLAIN_WORD = re.compile(r"[a-z][a-z'-]*(?=[\s,;:]|$)")
_ESCAPE = re.compile(r"\\[_*]")
_CODE_SPAN = re.compile(r"`[^`\n]+`")
_CODE_BLOCK = re.compile(r"^\s*(```|~~~).*?(?:^\s*\1[^\n]*$|\Z)", re.MULTILINE | re.DOTALL)
_ABBREVIATION = re.compile(r"\b(?:e\.g|i\.e|etc|vs|cf)\.$", re.IGNORECASE)  # "i.e. a clock" goes on


def evaluation_steps(questions: Sequence[LabelledQuestion], modes: Sequence[str], answers: bool) -> int:
    """How many steps ``evaluate`` reports to ``on_step``: a question searched or answered."""
    return len(questions) * (len(modes) + (1 if answers else 0))


def fragments(answer: str) -> list[str]:
    """The sentences of ``answer`` that start mid-phrase: with a plain lower-case word (not an
    identifier such as ``pg_dump`` or ``os.path``) or with punctuation that continues a sentence.
    Code blocks are not sentences."""
    found = []
    text = _CODE_BLOCK.sub("\n", _MARKER.sub("", answer))
    masked = _CODE_SPAN.sub(lambda m: "`" + "x" * (len(m.group()) - 2) + "`", text)  # no end inside code
    ends = (m for m in _SENTENCE_END.finditer(masked) if not _ABBREVIATION.search(masked[: m.start()]))
    starts = [0, *(m.end() for m in ends)]
    for start, end in zip(starts, [*starts[1:], len(text)], strict=True):
        sentence = text[start:end]
        body = _LEAD.sub("", sentence).strip()
        if body and (body[0] in ",;:.)]}" or _PLAIN_WORD.match(body)):
            found.append(sentence.strip())
    return found


def _result(hit: SearchHit) -> Result:
    text = " ".join(hit.text.split())
    return Result(uri=hit.uri, title=hit.title, location=hit.location, score=hit.score, text=text[:300])


async def _search_mode(
    kb: KnowledgeBase,
    questions: Sequence[LabelledQuestion],
    mode: SearchMode,
    context_chars: int,
    on_step: Callable[[], None],
) -> ModeReport:
    rankings: dict[str, list[str]] = {}
    found: dict[str, bool | None] = {}
    tops: dict[str, list[Result]] = {}
    for q in questions:
        hits = await kb.search(q.question, limit=DEPTH, mode=mode, context_chars=context_chars)
        rankings[q.id] = list(dict.fromkeys(h.uri for h in hits))
        found[q.id] = (
            None if q.fact is None else any(contains_fact(h.context or h.text, q.fact) for h in hits[:_TOP])
        )
        tops[q.id] = [_result(h) for h in hits[:_TOP]]
        on_step()
    per_question = ranking_figures({q.id: q.pages for q in questions}, rankings)
    results = [
        QuestionResult(
            id=q.id,
            rank=next((n for n, page in enumerate(rankings[q.id], 1) if page in q.pages), None),
            fact_in_top5=found[q.id],
            figures=per_question[q.id],
            top=tops[q.id],
        )
        for q in questions
    ]
    figures: dict[str, float | None] = {
        name: fmean(r.figures[name] for r in results) for name in RANKING_FIGURES
    }
    facts = [r.fact_in_top5 for r in results if r.fact_in_top5 is not None]
    figures["fact@5"] = fmean(facts) if facts else None
    return ModeReport(mode=mode, figures=figures, questions=results)


async def _answers(
    kb: KnowledgeBase,
    questions: Sequence[LabelledQuestion],
    config: RagConfig,
    on_step: Callable[[], None],
) -> AnswerFigures:
    toolkit = build_chat_toolkit(config)
    # the server's resolution (``resolve_chat_model``), sharing the knowledge base's loaded embedder
    model = config.model or create_extractive_model(kb.embedding_model)
    agent = create_chat_agent(config, toolkit, model=model)
    results = []
    for q in questions:
        deps = ChatDeps(client=kb, tool_context=toolkit.create_context(), config=config)
        output = (await agent.run(q.question, deps=deps)).output
        answer = output if isinstance(output, str) else ""
        session = deps.tool_context.get(SESSION_NAMESPACE, SessionState)
        cited = [c.uri for key, c in session.citations.items() if f"[{key}]" in answer]
        results.append(
            AnswerResult(
                id=q.id,
                answer=answer,
                fact_found=None if q.fact is None else contains_fact(answer, q.fact),
                cites_page=any(uri in q.pages for uri in cited),
                cited=list(dict.fromkeys(cited)),
                fragments=fragments(answer),
                escapes=len(
                    _ESCAPE.findall(_CODE_SPAN.sub("", _CODE_BLOCK.sub("", answer)))
                ),  # code shows a backslash as it is
            )
        )
        on_step()
    facts = [r.fact_found for r in results if r.fact_found is not None]
    return AnswerFigures(
        model=config.model or "offline extractive model",
        fact_rate=fmean(facts) if facts else None,
        citation_rate=fmean(r.cites_page for r in results),
        fragments=sum(len(r.fragments) for r in results),
        escapes=sum(r.escapes for r in results),
        answers=results,
    )


async def evaluate(
    kb: KnowledgeBase,
    questions: Sequence[LabelledQuestion],
    *,
    modes: Sequence[SearchMode] = ("hybrid", "vector", "text"),
    answers: bool = False,
    config: RagConfig | None = None,
    on_step: Callable[[], None] | None = None,
) -> EvalReport:
    """Search every question in each of ``modes`` (the top ``DEPTH`` results, expanded with the
    configured context) and, with ``answers``, ask the configured chat agent each one in a fresh
    thread. ``on_step`` is called after each question searched or answered."""
    config = config or RagConfig()
    step = on_step or (lambda: None)
    pages = {page for q in questions for page in q.pages}
    known = await kb.document_ids_for_uris(pages)
    reports = [await _search_mode(kb, questions, mode, config.context_chars, step) for mode in modes]
    return EvalReport(
        questions={q.id: {"question": q.question, "pages": q.pages, "fact": q.fact} for q in questions},
        documents=await kb.count_documents(),
        chunks=await kb.count_chunks(),
        embedder=kb.embedder,
        depth=DEPTH,
        unknown_pages=sorted(pages - known.keys()),
        modes=reports,
        answers=await _answers(kb, questions, config, step) if answers else None,
    )
