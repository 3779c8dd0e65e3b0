"""Retrieval quality over the sample corpus, with the default (offline) embedder.

    python -m bench.rag_eval [--modes hybrid,vector,text] [--limit 5] [--skip-single] [--embedder local:...]

For each labelled question in ``bench/rag_questions.json`` (question, source document, strings a
correct passage contains, page for the PDF, locator for the office files: ``"slide 3"``,
``"Add-ons, row 6"``, ``"table 1"``) the knowledge base is searched, and two recalls are reported
per mode:

- document recall@k: a top-k hit comes from the expected document;
- passage recall@k: a top-k hit from the expected document (and page, and a locator covering the
  expected one) contains every expected string, i.e. the passage that answers the question was
  retrieved.

Then the offline chat agent answers each question: how often the answer contains the expected
fact, and how often it cites a passage of the expected document.

Last, the labelled conversations of ``bench/rag_conversations.json`` (2-4 turns each, with topic
changes and elliptical follow-ups) run through the same agent, one thread per conversation, once
with each rule for follow-ups (``create_extractive_model(follow_ups=...)``): ``append``, the rule
before issue 22, and ``topic``, today's. Per kind of turn (opening question, self-contained question
after a topic change, elliptical follow-up) they report passage recall@5 of the search the model
made, and how often the answer contains the fact and cites the expected document.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rag_tools.embeddings import DEFAULT_EMBEDDER
from rag_tools.kb import KnowledgeBase, SearchHit
from rag_tools.offline_model import create_extractive_model

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "examples" / "corpus"
QUESTIONS = Path(__file__).resolve().parent / "rag_questions.json"
CONVERSATIONS = Path(__file__).resolve().parent / "rag_conversations.json"
TURN_KINDS = ("opening", "topic_change", "follow_up")
_ROWS = re.compile(r"^(?:(?P<sheet>.*), )?rows? (?P<first>\d+)(?:-(?P<last>\d+))?$")


def locator_covers(found: str, expected: str) -> bool:
    """Whether a hit's locator names the expected place: equal, or rows of the same sheet spanning it."""
    if found == expected:
        return True
    have, want = _ROWS.match(found), _ROWS.match(expected)
    if have is None or want is None or have["sheet"] != want["sheet"]:
        return False
    row = int(want["first"])
    return int(have["first"]) <= row <= int(have["last"] or have["first"])


@dataclass
class Question:
    id: str
    question: str
    document: str
    answer_contains: list[str]
    page: int | None = None
    locator: str | None = None  # the office files' place: "slide 3", "Add-ons, row 6", "table 1"
    kind: str | None = None  # in a conversation: one of TURN_KINDS

    def is_document(self, uri: str) -> bool:
        """Whether ``uri`` (a display source: a path relative to the corpus) is this question's document."""
        return uri == self.document or uri.endswith("/" + self.document)

    def is_source(self, hit: SearchHit) -> bool:
        return (
            self.is_document(hit.uri)
            and (self.page is None or hit.page == self.page)
            and (self.locator is None or locator_covers(hit.locator, self.locator))
        )

    def is_answer(self, hit: SearchHit) -> bool:
        text = (hit.context or hit.text).lower()
        return self.is_source(hit) and all(s.lower() in text for s in self.answer_contains)


@dataclass
class RetrievalReport:
    mode: str
    limit: int
    total: int = 0
    document_hits: int = 0
    passage_hits: int = 0
    misses: list[str] = field(default_factory=list)

    @property
    def document_recall(self) -> float:
        return self.document_hits / self.total if self.total else 0.0

    @property
    def passage_recall(self) -> float:
        return self.passage_hits / self.total if self.total else 0.0


def load_questions(path: Path = QUESTIONS) -> list[Question]:
    return [Question(**item) for item in json.loads(path.read_text())]


async def evaluate_retrieval(
    kb: KnowledgeBase, questions: list[Question], *, mode: str, limit: int = 5
) -> RetrievalReport:
    """Search every question and count document- and passage-level hits in the top ``limit``."""
    report = RetrievalReport(mode, limit)
    for q in questions:
        hits = await kb.search(q.question, limit=limit, mode=mode)  # type: ignore[arg-type]
        report.total += 1
        report.document_hits += any(q.is_document(h.uri) for h in hits)
        if any(q.is_answer(h) for h in hits):
            report.passage_hits += 1
        else:
            report.misses.append(q.id)
    return report


@dataclass
class AnswerReport:
    total: int = 0
    fact_hits: int = 0
    citation_hits: int = 0
    misses: list[str] = field(default_factory=list)
    citation_misses: list[str] = field(default_factory=list)

    @property
    def fact_rate(self) -> float:
        return self.fact_hits / self.total if self.total else 0.0

    @property
    def citation_rate(self) -> float:
        return self.citation_hits / self.total if self.total else 0.0


def _normalise(text: str) -> str:
    return " ".join(text.lower().replace("`", "").replace("*", "").split())


async def evaluate_answers(kb: KnowledgeBase, questions: list[Question]) -> AnswerReport:
    """Ask the offline chat agent each question in a fresh thread.

    A fact hit: the answer contains every expected string. A citation hit: some ``[n]`` in the
    answer points at a passage of the expected document.
    """
    from rag_tools import ChatDeps, RagConfig, build_chat_toolkit, create_chat_agent
    from rag_tools.state import SESSION_NAMESPACE, SessionState

    config = RagConfig()
    toolkit = build_chat_toolkit(config)
    agent = create_chat_agent(config, toolkit, model=create_extractive_model(kb.embedding_model))
    report = AnswerReport()
    for q in questions:
        deps = ChatDeps(client=kb, tool_context=toolkit.create_context(), config=config)
        answer = (await agent.run(q.question, deps=deps)).output
        session = deps.tool_context.get(SESSION_NAMESPACE, SessionState)
        cited = [c for key, c in session.citations.items() if f"[{key}]" in answer]
        report.total += 1
        fact = all(_normalise(s) in _normalise(answer) for s in q.answer_contains)
        report.fact_hits += fact
        cites = any(
            q.is_document(c.uri) and (q.locator is None or locator_covers(c.locator, q.locator))
            for c in cited
        )
        report.citation_hits += cites
        if not cites:
            report.citation_misses.append(q.id)
        if not fact:
            report.misses.append(q.id)
    return report


@dataclass
class Conversation:
    id: str
    turns: list[Question]


def load_conversations(path: Path = CONVERSATIONS) -> list[Conversation]:
    """The labelled conversations; each turn is a ``Question`` with its ``kind``."""
    conversations = []
    for item in json.loads(path.read_text()):
        turns = [Question(id=f"{item['id']}.{n}", **turn) for n, turn in enumerate(item["turns"], 1)]
        if any(t.kind not in TURN_KINDS for t in turns) or turns[0].kind != "opening":
            raise ValueError(f"{item['id']}: turns start with an opening and have a kind in {TURN_KINDS}")
        conversations.append(Conversation(item["id"], turns))
    return conversations


@dataclass
class TurnFigures:
    """One kind of turn: passage recall@k of the model's own search, fact and citation rates."""

    total: int = 0
    passage_hits: int = 0
    fact_hits: int = 0
    citation_hits: int = 0
    misses: list[str] = field(default_factory=list)  # turns whose answer lacks the fact
    passage_misses: list[str] = field(default_factory=list)

    @property
    def passage_recall(self) -> float:
        return self.passage_hits / self.total if self.total else 0.0

    @property
    def fact_rate(self) -> float:
        return self.fact_hits / self.total if self.total else 0.0

    @property
    def citation_rate(self) -> float:
        return self.citation_hits / self.total if self.total else 0.0


@dataclass
class ConversationReport:
    follow_ups: str
    kinds: dict[str, TurnFigures] = field(default_factory=lambda: {k: TurnFigures() for k in TURN_KINDS})
    queries: dict[str, str] = field(default_factory=dict)  # turn id: what the model searched
    answers: dict[str, str] = field(default_factory=dict)  # turn id: what it answered


def _searches(messages: list[Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The (query, results) of each search call in a run's new messages."""
    from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart

    queries = {
        p.tool_call_id: str(p.args_as_dict().get("query", ""))
        for m in messages
        if isinstance(m, ModelResponse)
        for p in m.parts
        if isinstance(p, ToolCallPart) and p.tool_name == "search"
    }
    found = []
    for m in messages:
        for p in m.parts if isinstance(m, ModelRequest) else ():
            if isinstance(p, ToolReturnPart) and p.tool_call_id in queries:
                content = p.content.model_dump() if hasattr(p.content, "model_dump") else p.content
                found.append((queries[p.tool_call_id], list(content.get("results") or [])))
    return found


async def evaluate_conversations(
    kb: KnowledgeBase, conversations: list[Conversation], *, follow_ups: str = "topic"
) -> ConversationReport:
    """Run each conversation through the offline chat agent, one thread each, turn by turn.

    A passage hit: a passage of the model's search (at most ``search_limit``, 5) comes from the
    expected document (and page) and contains every expected string (whitespace collapsed, as a
    PDF's lines may break inside one). Fact and citation hits are
    counted as in ``evaluate_answers``.
    """
    from rag_tools import ChatDeps, RagConfig, build_chat_toolkit, create_chat_agent
    from rag_tools.state import SESSION_NAMESPACE, SessionState

    config = RagConfig()
    toolkit = build_chat_toolkit(config)
    model = create_extractive_model(kb.embedding_model, follow_ups=follow_ups)  # type: ignore[arg-type]
    agent = create_chat_agent(config, toolkit, model=model)
    report = ConversationReport(follow_ups)
    for conversation in conversations:
        deps = ChatDeps(client=kb, tool_context=toolkit.create_context(), config=config)
        history: list[Any] = []
        for turn in conversation.turns:
            result = await agent.run(turn.question, deps=deps, message_history=history)
            history = result.all_messages()
            answer = str(result.output)
            session = deps.tool_context.get(SESSION_NAMESPACE, SessionState)
            cards = {**session.pending_citations, **session.citations}
            searches = _searches(result.new_messages())
            query, results = searches[-1] if searches else ("", [])
            report.queries[turn.id] = query
            report.answers[turn.id] = answer
            figures = report.kinds[turn.kind or "opening"]
            figures.total += 1
            found = any(
                turn.is_document(r["uri"])
                and (turn.page is None or cards[str(r["citation"])].page == turn.page)
                and all(_normalise(s) in _normalise(r["text"]) for s in turn.answer_contains)
                for r in results
            )
            figures.passage_hits += found
            if not found:
                figures.passage_misses.append(turn.id)
            fact = all(_normalise(s) in _normalise(answer) for s in turn.answer_contains)
            figures.fact_hits += fact
            cited = [c for key, c in session.citations.items() if f"[{key}]" in answer]
            figures.citation_hits += any(turn.is_document(c.uri) for c in cited)
            if not fact:
                figures.misses.append(turn.id)
    return report


def conversation_table(reports: list[ConversationReport]) -> str:
    """A Markdown table of the reports side by side, one row per kind of turn and rule."""
    lines = [
        "| turn kind | turns | follow-up rule | passage recall@5 | answer contains the fact | "
        "answer cites the document | passage misses | fact misses |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for kind in TURN_KINDS:
        for report in reports:
            f = report.kinds[kind]
            lines.append(
                f"| {kind} | {f.total} | {report.follow_ups} | {f.passage_recall:.3f} | {f.fact_rate:.3f} | "
                f"{f.citation_rate:.3f} | {', '.join(f.passage_misses) or '-'} | {', '.join(f.misses) or '-'} |"
            )
    return "\n".join(lines)


async def build_corpus_kb(path: Path, **options: Any) -> KnowledgeBase:
    """A knowledge base at ``path`` holding the sample corpus (default embedder unless given)."""
    kb = KnowledgeBase(path, **options)
    await kb.open()
    report = await kb.ingest_paths([CORPUS])
    if report.errors:
        raise RuntimeError(f"sample corpus failed to ingest: {report.errors}")
    return kb


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--modes", default="hybrid,vector,text")
    parser.add_argument("--limit", type=int, default=5)
    parser.add_argument("--skip-single", action="store_true", help="only the conversations")
    parser.add_argument("--embedder", default=DEFAULT_EMBEDDER)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ragstream-eval-"))
    try:
        kb = await build_corpus_kb(work / "kb", embedder=args.embedder)
        questions = load_questions()
        print(f"{len(questions)} questions, {await kb.count_chunks()} chunks, embedder {kb.embedder}\n")
        if not args.skip_single:
            print(f"| mode | document recall@{args.limit} | passage recall@{args.limit} | passage misses |")
            print("|---|---|---|---|")
            for mode in args.modes.split(","):
                r = await evaluate_retrieval(kb, questions, mode=mode, limit=args.limit)
                print(
                    f"| {mode} | {r.document_recall:.3f} | {r.passage_recall:.3f} | {', '.join(r.misses) or '-'} |"
                )
            answers = await evaluate_answers(kb, questions)
            print("\nOffline extractive answers (chat agent, one fresh thread per question):\n")
            print(
                "| answer contains the expected fact | answer cites the expected document | fact misses | "
                "citation misses |"
            )
            print("|---|---|---|---|")
            print(
                f"| {answers.fact_rate:.3f} | {answers.citation_rate:.3f} | {', '.join(answers.misses) or '-'} | "
                f"{', '.join(answers.citation_misses) or '-'} |"
            )
        conversations = load_conversations()
        reports = [
            await evaluate_conversations(kb, conversations, follow_ups=rule) for rule in ("append", "topic")
        ]
        turns = sum(len(c.turns) for c in conversations)
        print(f"\n{len(conversations)} conversations, {turns} turns (one thread each, offline model):\n")
        print(conversation_table(reports))
        print("\nQueries searched (append | topic), where the rules differ:\n")
        for turn_id, query in reports[1].queries.items():
            if query != reports[0].queries[turn_id]:
                print(f"- {turn_id}: {reports[0].queries[turn_id]!r} | {query!r}")
        kb.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
