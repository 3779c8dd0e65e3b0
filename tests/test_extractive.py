"""Offline answers quote whole sentences: never a piece cut at a passage's edge, one opening
mid-phrase or in lower case, code, or a lead-in; a question asking for a value gets the sentence
that states it; the quoted text carries no Markdown escapes."""

from __future__ import annotations

import re

import pytest

from rag_tools.embeddings import resolve_embedding_model
from rag_tools.extractive import Passage, extractive_answer, split_sentences

VACUUM = (
    "Plain `VACUUM` (without `FULL`) simply reclaims space and makes it available for re-use. This form "
    "of the command can operate in parallel with normal reading and writing of the table. `VACUUM FULL` "
    "rewrites the entire contents of the table into a new disk file with no extra space, allowing unused "
    "space to be returned to the operating system.\n\n"
    "`FULL`: Selects “full” vacuum, which can reclaim more space, but takes much longer and exclusively "
    "locks the table.\n\n"
    "more than a plain `VACUUM` would, which is why the FULL form is rarely needed in routine"
)


@pytest.fixture(scope="module")
def embedder():  # type: ignore[no-untyped-def]
    return resolve_embedding_model("local:all-minilm-l6-v2-int8")


def _sentences(answer: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", re.sub(r"\s*\[\d+\]", "", answer)) if s]


async def test_the_answer_is_whole_sentences_with_their_citations(embedder) -> None:  # type: ignore[no-untyped-def]
    answer = await extractive_answer(
        embedder,
        "What does VACUUM FULL do that plain VACUUM does not?",
        [Passage(1, VACUUM, "VACUUM: Description")],
    )
    assert answer.found
    assert "`FULL`: Selects “full” vacuum, which can reclaim more space" in answer.text
    for sentence in _sentences(answer.text):
        # opens as a sentence opens (a capital or code), never mid-phrase, and ends as one ends
        assert sentence[0].isupper() or sentence[0] == "`", sentence
        assert sentence[-1] in ".!?", sentence
    # the piece cut at the passage's end ("more than a plain VACUUM would, ...") is never quoted
    assert "more than a plain" not in answer.text
    assert re.search(r"\[1\][.!?]", answer.text)


def test_wrapped_lines_and_abbreviations_do_not_cut_sentences() -> None:
    wrapped = (
        "Plain VACUUM (without FULL) simply reclaims\nspace and makes it\navailable for re-use.\nIt is fast."
    )
    assert split_sentences(wrapped) == [
        "Plain VACUUM (without FULL) simply reclaims space and makes it available for re-use.",
        "It is fast.",
    ]
    assert split_sentences("Use a modern driver, e.g. Psycopg 3, for async code. It pools connections.") == [
        "Use a modern driver, e.g. Psycopg 3, for async code.",
        "It pools connections.",
    ]


def test_code_blocks_list_pieces_and_lead_ins_are_not_sentences_to_quote() -> None:
    text = (
        "Return True if all elements are true. Equivalent to:\n\n```\ndef all(iterable):\n"
        "    for element in iterable:\n        return False\n```\n\n"
        "The source can be given in several ways:\n\n- if it is a string, give the encoding\n- Unicode strings"
    )
    sentences = split_sentences(text)
    assert "def all(iterable):" not in sentences and not any("for element" in s for s in sentences)


async def test_lower_case_pieces_are_never_quoted_but_api_definitions_are(embedder) -> None:  # type: ignore[no-untyped-def]
    passage = (
        "The optional source parameter can be used to initialize the array:\n\n"
        "- if it is a string, you must also give the encoding parameter\n\n"
        "os.makedirs(name, mode=0o777, exist_ok=False): Recursive directory creation function."
    )
    answer = await extractive_answer(
        embedder, "How do I make a folder with all its missing parents?", [Passage(2, passage, "os")]
    )
    assert answer.text.startswith(
        "os.makedirs(name, mode=0o777, exist_ok=False): Recursive directory creation"
    )
    lower = await extractive_answer(
        embedder, "What if the source is a string?", [Passage(2, passage, "bytearray")]
    )
    assert "if it is a string" not in lower.text
    glossary = "descriptor: Any object which defines the methods `__get__()`, `__set__()`, or `__delete__()`."
    term = await extractive_answer(embedder, "What is a descriptor?", [Passage(3, glossary, "Glossary")])
    assert term.text.startswith("Descriptor: Any object which defines")  # a term leads, not a lower-case word


async def test_a_question_for_a_value_gets_the_sentence_that_states_it(embedder) -> None:  # type: ignore[no-untyped-def]
    passage = (
        "| Name | Storage Size | Description |\n| --- | --- | --- |\n"
        "| `smallint` | 2 bytes | small-range integer |\n| `bigint` | 8 bytes | large-range integer |\n\n"
        "The `bigint` type is designed to be used when the range of the `integer` type is insufficient."
    )
    answer = await extractive_answer(
        embedder, "How much storage does a bigint take?", [Passage(3, passage, "Numeric Types")]
    )
    first = _sentences(answer.text)[0]
    assert "Storage Size: 8 bytes" in first and "bigint" in first, answer.text


async def test_markdown_escapes_are_not_quoted(embedder) -> None:  # type: ignore[no-untyped-def]
    passage = "Run pg\\_checksums and pg\\_receivewal only on a stopped cluster, never on a \\*live\\* one."
    answer = await extractive_answer(embedder, "When may I run pg_checksums?", [Passage(4, passage, "Notes")])
    assert "pg_checksums and pg_receivewal" in answer.text and "\\" not in answer.text
