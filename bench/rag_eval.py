"""Retrieval quality over the sample corpus, with the default (offline) embedder.

    python -m bench.rag_eval [--modes hybrid,vector,text] [--limit 5] [--embedder local:...]

For each labelled question in ``bench/rag_questions.json`` (question, source document, strings a
correct passage contains, page for the PDF) the knowledge base is searched, and two recalls are
reported per mode:

- document recall@k: a top-k hit comes from the expected document;
- passage recall@k: a top-k hit from the expected document (and page) contains every expected
  string, i.e. the passage that answers the question was retrieved.

Then the offline chat agent answers each question: how often the answer contains the expected
fact, and how often it cites a passage of the expected document.
"""

from __future__ import annotations

import argparse
import asyncio
import json
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


@dataclass
class Question:
    id: str
    question: str
    document: str
    answer_contains: list[str]
    page: int | None = None

    def is_source(self, hit: SearchHit) -> bool:
        return hit.uri.endswith("/" + self.document) and (self.page is None or hit.page == self.page)

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
        report.document_hits += any(h.uri.endswith("/" + q.document) for h in hits)
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
        report.citation_hits += any(c.uri.endswith("/" + q.document) for c in cited)
        if not fact:
            report.misses.append(q.id)
    return report


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
    parser.add_argument("--embedder", default=DEFAULT_EMBEDDER)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ragstream-eval-"))
    try:
        kb = await build_corpus_kb(work / "kb", embedder=args.embedder)
        questions = load_questions()
        print(f"{len(questions)} questions, {await kb.count_chunks()} chunks, embedder {kb.embedder}\n")
        print(f"| mode | document recall@{args.limit} | passage recall@{args.limit} | passage misses |")
        print("|---|---|---|---|")
        for mode in args.modes.split(","):
            r = await evaluate_retrieval(kb, questions, mode=mode, limit=args.limit)
            print(
                f"| {mode} | {r.document_recall:.3f} | {r.passage_recall:.3f} | {', '.join(r.misses) or '-'} |"
            )
        answers = await evaluate_answers(kb, questions)
        print("\nOffline extractive answers (chat agent, one fresh thread per question):\n")
        print("| answer contains the expected fact | answer cites the expected document | fact misses |")
        print("|---|---|---|")
        print(
            f"| {answers.fact_rate:.3f} | {answers.citation_rate:.3f} | {', '.join(answers.misses) or '-'} |"
        )
        kb.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
