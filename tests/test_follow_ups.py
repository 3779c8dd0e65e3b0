"""Follow-up questions in the offline model: what is searched alone, what borrows the last topic."""

from __future__ import annotations

import pytest
from pydantic_ai.messages import ModelResponse, ToolCallPart

from rag_tools import ChatDeps, RagConfig, build_chat_toolkit, create_chat_agent, create_extractive_model
from rag_tools.follow_ups import Turn, is_follow_up, resolve_follow_up
from rag_tools.kb import KnowledgeBase
from rag_tools.state import SESSION_NAMESPACE, SessionState
from tests.embedders import HashingEmbeddingModel

BACKUPS = Turn(
    "How long are nightly database backups kept?",
    query="How long are nightly database backups kept?",
    material="Nightly database backups are retained for 35 days. The monthly backup is kept for 12 months.",
)
OPENING_HOURS = Turn(
    "What time does the bakery open on Saturdays?",
    query="What time does the bakery open on Saturdays?",
    material="Day: Saturday, Shop open: 07:00 to 16:00\nDay: Sunday, Shop open: 08:00 to 13:00",
)


@pytest.mark.parametrize(
    "question",
    [
        "Why?",
        "Who does them?",
        "How long are they kept?",
        "And the monthly ones?",
        "Does it work on Windows?",
        "How do I keep the old one?",
    ],
)
def test_a_question_without_a_topic_of_its_own_leans_on_the_previous_turn(question: str) -> None:
    assert is_follow_up(question, BACKUPS)
    resolved = resolve_follow_up(question, BACKUPS)
    assert resolved.borrowed
    assert resolved.query.startswith(question)
    assert "(nightly database backups" in resolved.query
    assert "How long" not in resolved.query.removeprefix(question)  # its topic, not its wording


@pytest.mark.parametrize(
    "question",
    [
        "And who approves production database changes?",
        "Also, which port does the Kiteline server use by default?",
        "If I point the ingest command at a folder, which kinds of files will it pick up?",
        "One more thing: when do on-call engineers hand over their shift?",
    ],
)
def test_a_question_that_names_its_topic_stands_alone_whatever_it_opens_with(question: str) -> None:
    assert not is_follow_up(question, BACKUPS)
    resolved = resolve_follow_up(question, BACKUPS)
    assert (resolved.query, resolved.topic, resolved.retry) == (question, "", None)


def test_a_short_question_follows_up_when_its_words_are_in_what_the_last_turn_retrieved() -> None:
    resolved = resolve_follow_up("And on Sundays?", OPENING_HOURS)
    assert resolved.query == "And on Sundays? (time bakery open saturdays)"
    # the same words on a turn that showed nothing about Sundays: searched alone first
    unrelated = resolve_follow_up("And on Sundays?", BACKUPS)
    assert unrelated.query == "And on Sundays?"
    assert unrelated.retry == "And on Sundays? (nightly database backups kept)"
    # one of its words on the screen is not enough: passages are full of common words
    bakery = Turn(
        "What does the bakery sell?",
        query="What does the bakery sell?",
        material="Call us to order a cake. The bakery sells bread, pastries and cakes.",
    )
    new_topic = resolve_follow_up("Who is on call for incidents?", bakery)
    assert new_topic.query == "Who is on call for incidents?" and not new_topic.borrowed


def test_a_short_new_topic_is_searched_again_with_the_old_one_only_when_it_answers_weakly() -> None:
    resolved = resolve_follow_up("What is RRF?", BACKUPS)
    assert not resolved.borrowed
    assert resolved.retry_after("What is RRF?", confidence=0.7) is None
    assert resolved.retry_after("What is RRF?", confidence=0.3) == resolved.retry
    assert resolved.retry_after(str(resolved.retry), confidence=0.1) is None  # never a third search
    assert resolve_follow_up("What is RRF?", None).retry is None  # nothing to borrow from


def test_a_chain_of_follow_ups_keeps_its_anchor_and_the_topic_stays_bounded() -> None:
    monthly = resolve_follow_up("And the monthly ones?", BACKUPS)
    second = Turn(monthly.question, query=monthly.query, material=BACKUPS.material)
    deleted = resolve_follow_up("Who deletes them?", second)
    assert deleted.topic == "monthly nightly database backups kept"
    rambling = Turn(" ".join(f"word{n}" for n in range(40)) + "?")
    assert len(resolve_follow_up("Why?", rambling).topic.split()) == 12


def test_an_unknown_follow_up_rule_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="follow_ups must be 'topic' or 'append'"):
        create_extractive_model(HashingEmbeddingModel(), follow_ups="glue")  # type: ignore[arg-type]


async def _converse(
    kb: KnowledgeBase, questions: list[str], follow_ups: str = "topic"
) -> list[tuple[list[str], str, set[str]]]:
    """Ask ``questions`` in one thread; per turn: the queries searched, the answer, cited titles."""
    config = RagConfig()
    toolkit = build_chat_toolkit(config)
    model = create_extractive_model(kb.embedding_model, follow_ups=follow_ups)  # type: ignore[arg-type]
    agent = create_chat_agent(config, toolkit, model=model)
    deps = ChatDeps(client=kb, tool_context=toolkit.create_context(), config=config)
    history: list = []
    turns = []
    for question in questions:
        result = await agent.run(question, deps=deps, message_history=history)
        history = result.all_messages()
        queries = [
            str(part.args_as_dict()["query"])
            for message in result.new_messages()
            if isinstance(message, ModelResponse)
            for part in message.parts
            if isinstance(part, ToolCallPart) and part.tool_name == "search"
        ]
        session = deps.tool_context.get(SESSION_NAMESPACE, SessionState)
        cited = {c.title for key, c in session.citations.items() if f"[{key}]" in result.output}
        turns.append((queries, result.output, cited))
    return turns


async def test_a_topic_change_is_searched_on_its_own_and_answered(corpus_kb: KnowledgeBase) -> None:
    questions = [
        "What is the on-call escalation policy for a sev-1 incident?",
        "And who approves production database changes?",
    ]
    (_, _, _), (queries, answer, cited) = await _converse(corpus_kb, questions)
    assert queries == ["And who approves production database changes?"]
    assert "approval from two engineers" in answer
    assert "Kiteline Cloud Operations Handbook" in cited
    # The rule before issue 22 searched both questions, and its answer did not say who approves.
    (_, _, _), (old_queries, old_answer, _) = await _converse(corpus_kb, questions, follow_ups="append")
    assert old_queries == [" ".join(questions)]
    assert "two engineers" not in old_answer


async def test_an_elliptical_follow_up_borrows_the_previous_topic(corpus_kb: KnowledgeBase) -> None:
    turns = await _converse(
        corpus_kb,
        [
            "How long are nightly database backups kept?",
            "And the monthly ones?",
            "How often is restoring them tested?",
        ],
    )
    (first, _, _), (monthly, monthly_answer, _), (restore, restore_answer, cited) = turns
    assert first == ["How long are nightly database backups kept?"]
    assert monthly == ["And the monthly ones? (nightly database backups kept)"]
    assert "retained for 12 months" in monthly_answer
    assert restore == ["How often is restoring them tested? (monthly nightly database backups kept)"]
    assert "every quarter" in restore_answer
    assert cited == {"Kiteline Cloud Operations Handbook"}


async def test_a_short_question_is_searched_again_with_the_topic_only_when_alone_it_finds_nothing(
    corpus_kb: KnowledgeBase,
) -> None:
    questions = [
        "When are the maintenance windows for production changes?",
        "How far ahead are customers told?",
    ]
    (_, _, _), (told, answer, cited) = await _converse(corpus_kb, questions)
    # Alone it quoted the bakery's deliveries; with the topic it stays with the change rules.
    assert told == [
        "How far ahead are customers told?",
        "How far ahead are customers told? (maintenance windows production changes)",
    ]
    assert cited == {"Kiteline Cloud Operations Handbook"}
    assert "maintenance windows" in answer


async def test_a_short_question_on_a_new_topic_is_searched_once_on_its_own(corpus_kb: KnowledgeBase) -> None:
    questions = ["What time does the bakery open on Saturdays?", "Who is Priya Raman?"]
    (_, _, _), (priya, answer, _) = await _converse(corpus_kb, questions)
    assert priya == ["Who is Priya Raman?"]
    assert "Head of Platform Operations: Priya Raman" in answer


async def test_nothing_found_quotes_the_users_own_question(corpus_kb: KnowledgeBase) -> None:
    """A question searched with a borrowed topic that still finds nothing is quoted as the user asked
    it, not as it was searched (the topic in brackets is the server's, not the user's words)."""
    questions = ["xqzvbnm plorkt wuzzle", "What is the capital of Mongolia?"]
    turns = await _converse(corpus_kb, questions)
    for question, (_, answer, cited) in zip(questions, turns, strict=True):
        assert answer.startswith("None of the ") and f"answers “{question}”" in answer, answer
        assert not cited
    # quoted as plain words: no markup a Markdown page would render, no "[n]" read as a citation
    ((_, answer, _),) = await _converse(corpus_kb, ["zzqx **bold** <b>x</b> [12] [link](http://x.example)"])
    assert answer.endswith("answers “zzqx bold b x /b (12) link (http://x.example)”."), answer
