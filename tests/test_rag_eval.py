"""Retrieval quality on the labelled sample-corpus questions, with the default embedder."""

from __future__ import annotations

from bench.rag_eval import (
    evaluate_answers,
    evaluate_conversations,
    evaluate_retrieval,
    load_conversations,
    load_questions,
)
from rag_tools.kb import KnowledgeBase


async def test_hybrid_retrieval_finds_the_answering_passage(corpus_kb: KnowledgeBase) -> None:
    questions = load_questions()
    assert len(questions) >= 30
    hybrid = await evaluate_retrieval(corpus_kb, questions, mode="hybrid", limit=5)
    vector = await evaluate_retrieval(corpus_kb, questions, mode="vector", limit=5)
    text = await evaluate_retrieval(corpus_kb, questions, mode="text", limit=5)
    # Measured: hybrid 71/71, vector 68/71, text 67/71 (passage recall@5). The floor of 0.98 sits
    # above what either ranking reaches alone, so it fails if fusion degrades to one of them, and
    # still allows one miss should a corpus edit move a passage across a chunk boundary.
    assert hybrid.passage_recall >= 0.98, hybrid.misses
    assert hybrid.passage_recall >= max(vector.passage_recall, text.passage_recall)
    assert hybrid.document_recall == 1.0


async def test_offline_answers_contain_the_fact_and_cite_the_source(corpus_kb: KnowledgeBase) -> None:
    report = await evaluate_answers(corpus_kb, load_questions())
    # Measured: 60/71 answers contain the expected fact (0.845), 71/71 cite the expected document
    # (and locator). An extractive answer quotes sentences, so it misses facts phrased across
    # sentences or tables; the floors leave room for ten more fact misses and five more citation misses,
    # and still fail when sentence selection or citation numbering breaks (both rates collapse).
    assert report.fact_rate >= 0.70, report.misses
    assert report.citation_rate >= 0.92


async def test_conversations_search_topic_changes_alone_and_follow_ups_with_their_topic(
    corpus_kb: KnowledgeBase,
) -> None:
    conversations = load_conversations()
    assert len(conversations) >= 10
    report = await evaluate_conversations(corpus_kb, conversations, follow_ups="topic")
    follow_up, topic_change = report.kinds["follow_up"], report.kinds["topic_change"]
    assert follow_up.total >= 20 and topic_change.total >= 10
    # Measured, this rule against the one before issue 22 (bench.rag_eval runs both): follow-ups
    # 22/22 answering passages found by the model's search (18/22 before), 19/22 answers contain the
    # fact (15/22), 22/22 cite the document (18/22); after a topic change 13/13 passages (13/13)
    # and 10/13 facts (8/13). Each floor allows one more miss than measured and still sits above
    # what the old rule reaches wherever the two differ.
    assert follow_up.passage_recall >= 0.95, report.queries
    assert follow_up.fact_rate >= 0.80, follow_up.misses
    assert follow_up.citation_rate >= 0.95
    assert topic_change.fact_rate >= 0.69, topic_change.misses
    assert topic_change.passage_recall >= 0.92, topic_change.passage_misses
    # A question after a topic change is searched as asked, never glued to an earlier one.
    for conversation in conversations:
        for turn in conversation.turns:
            if turn.kind == "topic_change":
                assert report.queries[turn.id] == turn.question
