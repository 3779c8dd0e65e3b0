"""Offline answers quote whole sentences: never a piece cut at a passage's edge, one opening
mid-phrase or in lower case, code, or a lead-in; a question asking for a value gets the sentence
that states it; the quoted text carries no Markdown escapes."""

from __future__ import annotations

import re

import pytest

from rag_tools.embeddings import resolve_embedding_model
from rag_tools.evaluation import fragments
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


COPYTREE = (
    "`shutil.copytree(src, dst, symlinks=False, ignore=None, copy_function=copy2, "
    "ignore_dangling_symlinks=False, dirs_exist_ok=False)`\n\n"
    "Recursively copy an entire directory tree rooted at src to a directory named dst and return the "
    "destination directory. All intermediate directories needed to contain dst will also be created by default."
)


async def test_a_definition_s_sentence_is_led_by_the_term_it_defines(embedder) -> None:  # type: ignore[no-untyped-def]
    answer = await extractive_answer(
        embedder, "How do I copy a whole directory tree?", [Passage(1, COPYTREE, "shutil: copytree")]
    )
    # the sentence alone never says which function copies the tree: its definition's term leads it,
    # its long parameter list cut, and the term is not quoted a second time on its own
    assert answer.text.startswith("`shutil.copytree(…)`: Recursively copy an entire directory tree"), (
        answer.text
    )
    assert answer.text.count("copytree") == 1
    setting = (
        "`work_mem` (`integer`)\n\nSets the base maximum amount of memory to be used by a query operation."
    )
    short = await extractive_answer(embedder, "What does work_mem limit?", [Passage(2, setting, "Memory")])
    assert short.text.startswith("`work_mem` (`integer`): Sets the base maximum amount of memory"), short.text


async def test_a_lead_in_is_quoted_with_the_one_line_command_it_introduces(embedder) -> None:  # type: ignore[no-untyped-def]
    passage = (
        "To create a virtual environment, decide upon a directory where you want to place it, and run the "
        "venv module as a script with the directory path:\n\n```\npython3 -m venv tutorial-env\n```\n\n"
        "This will create the tutorial-env directory if it doesn’t exist."
    )
    answer = await extractive_answer(
        embedder, "How do I create a virtual environment?", [Passage(1, passage, "venv")]
    )
    assert "with the directory path: `python3 -m venv tutorial-env` [1]." in answer.text, answer.text


def test_a_code_block_with_blank_lines_inside_is_code_to_its_end() -> None:
    text = "Define it first:\n\n```\ndef area(r):\n    return r * r\n\nTotal = area(2) + area(3)\n```\n\nThen call it."
    assert split_sentences(text) == ["Define it first:", "Then call it."]


async def test_a_version_note_is_not_the_value_a_question_asks_for(embedder) -> None:  # type: ignore[no-untyped-def]
    passage = (
        "Changed in version 3.5: The default number of worker threads of the pool was changed.\n\n"
        "If max_workers is not given, the pool uses `min(32, os.cpu_count() + 4)` worker threads."
    )
    answer = await extractive_answer(
        embedder,
        "How many worker threads does the pool use by default?",
        [Passage(1, passage, "ThreadPoolExecutor")],
    )
    # "3.5" dates the first sentence; the second states the number asked for
    assert _sentences(answer.text)[0].startswith("If max_workers is not given"), answer.text


async def test_a_sentence_keeps_its_closing_marks_and_an_aside_in_lower_case_is_not_one(embedder) -> None:  # type: ignore[no-untyped-def]
    text = 'The server says "Ready." Then it listens (see below.) Clients connect.'
    assert split_sentences(text) == [
        'The server says "Ready."',
        "Then it listens (see below.)",
        "Clients connect.",
    ]
    # an aside continuing the sentence before it is a piece, not a sentence: after a stop or at a passage's start
    passage = (
        'The database file sits on another machine. ("remote database" here) This file holds every table of '
        'the remote database.\n\n("remote" here) It is opened once.'
    )
    answer = await extractive_answer(
        embedder, "What does the remote database file hold?", [Passage(1, passage, "Files")]
    )
    assert answer.found and '" here)' not in answer.text, answer.text


async def test_a_passage_cut_from_a_definition_is_led_by_its_section_s_signature(embedder) -> None:  # type: ignore[no-untyped-def]
    heading = (
        "subprocess: subprocess > Using the subprocess Module > subprocess.run(args, *, stdin=None, input=None, "
        "stdout=None, stderr=None, capture_output=False, shell=False, cwd=None, timeout=None, check=False)"
    )
    passage = (
        "Run the command described by args. Wait for command to complete, then return a `CompletedProcess`."
    )
    answer = await extractive_answer(
        embedder, "How can I run a shell command and capture what it prints?", [Passage(1, passage, heading)]
    )
    # the passage has no term line of its own; its section is the signature, shown with only the
    # parameters the question speaks of
    assert answer.text.startswith(
        "`subprocess.run(…, capture_output=False, shell=False, …)`: Run the command"
    ), answer.text


async def test_a_lead_in_is_quoted_with_the_short_example_it_introduces_as_a_block(embedder) -> None:  # type: ignore[no-untyped-def]
    passage = (
        "An option that takes no value and is set when it is given uses the store_true action:\n\n"
        "```\n>>> parser = argparse.ArgumentParser()\n>>> parser.add_argument('--verbose', action='store_true')\n"
        ">>> parser.parse_args(['--verbose'])\nNamespace(verbose=True)\n```\n\nIts default is False."
    )
    answer = await extractive_answer(
        embedder, "How do I add a command-line flag that takes no value?", [Passage(1, passage, "argparse")]
    )
    # before: the lead-in was left out (it introduces what it did not quote) and the example with it
    assert answer.text.startswith(
        "An option that takes no value and is set when it is given uses the store_true action [1]:\n\n```\n"
        ">>> parser = argparse.ArgumentParser()\n>>> parser.add_argument('--verbose', action='store_true')\n"
    ), answer.text
    assert "Namespace(verbose=True)\n```" in answer.text
    assert fragments(answer.text) == []  # an example's lines are code, not sentences


async def test_a_long_example_is_not_quoted(embedder) -> None:  # type: ignore[no-untyped-def]
    example = "\n".join(f"step_{n} = run({n})" for n in range(12))
    passage = f"Run every step of the job like this:\n\n```\n{example}\n```\n\nEach step runs once."
    answer = await extractive_answer(embedder, "How do I run the job's steps?", [Passage(1, passage, "jobs")])
    assert "```" not in answer.text and "step_3" not in answer.text, answer.text
