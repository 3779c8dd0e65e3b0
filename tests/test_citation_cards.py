"""One shape for a citation card (docs/protocol.md, "On the wire"), wherever a client
reads it: the AG-UI state of a run, ``GET /threads/{id}`` and ``GET /threads/{id}/state/citations/{n}``.

Every card has exactly the documented keys, each always present with its documented type: a card of
a document without pages has ``page: null``, never a missing key, and its ``locator`` is what its
format has instead (docs/knowledge-base.md): ``slide 3``, ``Sheet1, rows 12-20``, ``rows 2-9``,
``table 2``, or ``""`` when the format has no such label.
"""

from __future__ import annotations

import re
from typing import Any

import httpx

from rag_tools.state import Citation, SessionState
from ragstream.app import create_app
from tests.protocol import check_stream, parse_sse, run_body
from tests.servers import serve

CARD_TYPES: dict[str, Any] = {
    "index": int,
    "document_id": str,
    "title": str,
    "uri": str,
    "headings": list,
    "page": (int, type(None)),
    "locator": str,
    "passage": str,
}
QUESTIONS = (
    "How long are backups kept?",
    "What does the Harbor Street Bakery sell?",
    "When do offline maps ship in Tessel Maps?",
    "What is the monthly price per user of the Business plan?",
    "When do new support engineers answer their first tickets?",
    "Which incident hit the Sync API in February 2024?",
    "Which version of Python do I need to install ragstream?",  # a Markdown guide's card
    "How soon does Kiteline Cloud run a new release?",  # the release notes' plain-text card
)
#: What a card of a document without pages may say instead, by format (docs/knowledge-base.md).
LOCATORS = {
    "pptx": r"slide \d+",
    "xlsx": r".+, rows \d+(-\d+)?",
    "csv": r"rows \d+(-\d+)?",
    "docx": r"(table \d+)?",
}


def assert_card(card: Any, index: str) -> str:
    """``card`` has exactly the documented keys and types; returns its document's kind (extension)."""
    assert isinstance(card, dict) and list(card) == list(CARD_TYPES), card
    for key, kind in CARD_TYPES.items():
        assert isinstance(card[key], kind) and not isinstance(card[key], bool), (key, card)
    assert str(card["index"]) == index
    assert all(isinstance(h, str) and h for h in card["headings"]), card
    assert card["passage"], card
    kind = str(card["uri"]).rsplit(".", 1)[-1]
    if kind == "pdf":
        assert card["page"] >= 1 and card["locator"] == f"page {card['page']}", card
    else:
        assert card["page"] is None and re.fullmatch(LOCATORS.get(kind, ""), card["locator"]), card
    return kind


async def test_a_card_has_the_documented_keys_in_the_state_the_thread_and_by_key(
    scenario_config: Any,
) -> None:
    scenario_config.citations_emitted = 2  # older cards are then read only by key
    async with (
        serve(create_app(scenario_config)) as url,
        httpx.AsyncClient(base_url=url, timeout=60) as client,
    ):
        state: Any = {}
        sent: dict[str, Any] = {}  # each card as the last run that carried it sent it
        for n, question in enumerate(QUESTIONS):
            response = await client.post("/agui", json=run_body("cards", f"r{n}", question))
            events = [event for _, event in parse_sse(response.text)]
            state = check_stream(events, {})  # the state a run's consumer folds from its events
            assert events[-1]["type"] == "RUN_FINISHED"
            for index, card in state["citations"].items():
                assert_card(card, index)
            sent.update(state["citations"])

        view = (await client.get("/threads/cards")).json()
        assert view["state"]["citations"] == state["citations"]
        for index, card in view["state"]["citations"].items():
            assert_card(card, index)

        everything = (await client.get("/threads/cards/state/citations")).json()["value"]
        assert set(everything) > set(state["citations"])  # some cards are only on the thread now
        kinds = set()
        for index, card in everything.items():
            assert_card(card, index)
            item = await client.get(f"/threads/cards/state/citations/{index}")
            assert item.status_code == 200, item.text
            assert item.json()["value"] == card
            if index in sent:  # an answer citing more cards than the state carries sends only the latest
                assert card == sent[index]  # an older answer's card read by key shows what the run showed
            kinds.add(assert_card(card, index))
        assert any(index not in state["citations"] for index in set(sent) & set(everything))
        assert kinds == {"pdf", "md", "html", "txt", "pptx", "xlsx", "docx", "csv"}


def test_a_card_saved_before_locators_gets_its_page_as_locator() -> None:
    saved = {
        "index": 3,
        "document_id": "d",
        "title": "Handbook",
        "uri": "handbook.pdf",
        "headings": ["Handbook", "Backups"],
        "page": 7,
        "passage": "Backups are kept for 35 days.",
    }
    card = Citation.model_validate(saved).emitted()
    assert card == {**saved, "headings": ["Backups"], "locator": "page 7"}
    assert Citation.model_validate({**saved, "locator": "slide 2"}).read_view()["locator"] == "slide 2"
    no_page = Citation.model_validate({**saved, "page": None}).read_view()
    assert (no_page["page"], no_page["locator"]) == (None, "")


def test_cite_passes_a_locator_through_and_labels_pages() -> None:
    session = SessionState()
    pdf = session.cite(chunk_id="a", document_id="d", title="T", uri="t.pdf", text="x", page=4)
    sheet = session.cite(
        chunk_id="b", document_id="e", title="S", uri="s.xlsx", text="y", locator="sheet Budget"
    )
    assert session.citations[str(pdf)].emitted()["locator"] == "page 4"
    assert session.citations[str(sheet)].emitted()["locator"] == "sheet Budget"
    assert session.citations[str(sheet)].emitted()["page"] is None


def test_a_shown_card_is_cut_around_the_sentence_the_answer_quoted_despite_its_markdown() -> None:
    """The answer quotes a passage's text without its Markdown and line breaks; the card the client
    gets is still the part of the passage holding that sentence, not the passage's opening."""
    passage = (
        "Logs go to standard error as JSON lines when `RAGSTREAM_LOG_FORMAT=json` is set, and as "
        "plain text otherwise; rotate them with the host's tools.\n\n"
        "There is no metrics\nendpoint; `GET /health` reports whether the process is up, and "
        "`GET /ready` checks the knowledge base, the thread store and Redis."
    )
    session = SessionState()
    index = session.cite(
        chunk_id="c", document_id="d", title="Deployment", uri="deploy.md", text=passage, promote=False
    )
    answer = f"There is no metrics endpoint; GET /health reports whether the process is up [{index}]."
    assert session.promote_cited(answer) == [index]
    shown = session.citations[str(index)].emitted()["passage"]
    assert shown.startswith("…") and "`GET /health` reports whether the process is up" in shown, shown
    assert "Logs go to standard error" not in shown


def test_a_card_shows_the_table_row_and_the_whole_sentence_an_answer_quoted() -> None:
    """A table row is quoted as ``header: value`` pairs; the card still shows that row. A quoted
    sentence longer than the excerpt is shown to its end. A card cited again by a later answer shows
    what that answer quoted."""
    rows = "\n".join(f"| Role {i} | {100 + i} EUR |" for i in range(30))
    passage = f"# Budgets\n\n| Role | Budget |\n|---|---|\n{rows}\n| Support team lead | 600 EUR |\n"
    session = SessionState()
    index = session.cite(
        chunk_id="c", document_id="d", title="Budgets", uri="b.docx", text=passage, promote=False
    )
    session.promote_cited(f"Role: Support team lead, Budget: 600 EUR [{index}].")
    assert "| Support team lead | 600 EUR |" in session.citations[str(index)].emitted()["passage"]

    long = "Selective sync lets clients choose which subfolders of a team folder they keep locally, " * 2
    prose = "Opening words of the passage. " * 10 + long.strip() + " Closing words. " * 10
    other = session.cite(chunk_id="p", document_id="e", title="Notes", uri="n.md", text=prose, promote=False)
    session.promote_cited(f"{long.strip()} [{other}].")
    shown = session.citations[str(other)].emitted()["passage"]
    assert shown.startswith("…Selective sync") and long.strip() in shown, shown

    session.promote_cited(f"Role: Role 3, Budget: 103 EUR [{index}].")  # a later answer, the same card
    again = session.citations[str(index)].emitted()["passage"]
    assert again.startswith("…Role 3 | 103 EUR |") and "Support team lead" not in again
    assert list(session.citations)[-1] == str(index)
    session.promote_cited(f"Something no passage says at all [{index}].")  # not found: the card stays
    assert session.citations[str(index)].emitted()["passage"] == again


async def test_a_very_long_question_is_searched_once_and_answered(scenario_config: Any) -> None:
    """A question of 16,000 characters makes a search result long enough to be cut for the model, so
    pydantic-ai announces ``read_tool_output`` mid-run; the offline model must not take that note for
    the user's next question (it searched for it 49 times, until the run's request limit)."""
    question = ("How long are nightly database backups retained? " * 400)[:16_000]
    async with (
        serve(create_app(scenario_config)) as url,
        httpx.AsyncClient(base_url=url, timeout=60) as client,
    ):
        response = await client.post("/agui", json=run_body("long", "r1", question))
        events = [event for _, event in parse_sse(response.text)]
        check_stream(events, {})
        assert events[-1]["type"] == "RUN_FINISHED", events[-1]
        assert [e["toolCallName"] for e in events if e["type"] == "TOOL_CALL_START"] == ["search"]
        answer = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
        assert "35 days" in answer
        searched = (await client.get("/threads/long")).json()["state"]["searches"]
        assert [len(s["query"]) <= 1000 for s in searched.values()] == [True]  # searched: its start

        # nothing found: the answer quotes the start of the question, not all of it
        response = await client.post("/agui", json=run_body("long-none", "r1", "zqxj " * 3000))
        events = [event for _, event in parse_sse(response.text)]
        answer = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
        assert events[-1]["type"] == "RUN_FINISHED" and "zqxj" in answer and len(answer) < 400, answer


def test_a_card_leaves_out_the_sheet_its_locator_names() -> None:
    sheet = {"index": 1, "document_id": "d", "title": "Pricing", "uri": "pricing.xlsx", "passage": "x"}
    card = Citation.model_validate({**sheet, "headings": ["Plans"], "locator": "Plans, rows 2-5"}).emitted()
    assert (card["locator"], card["headings"]) == ("Plans, rows 2-5", [])
    other = Citation.model_validate({**sheet, "headings": ["Plans", "Business"], "locator": "rows 2-5"})
    assert other.emitted()["headings"] == ["Plans", "Business"]


def test_an_excerpt_is_cut_between_words_and_a_passage_a_little_longer_is_shown_whole() -> None:
    """What a card shows never starts or ends inside a word ("…very user has" for "every user"),
    and a passage only a few words over the excerpt's length is not cut at all."""
    quota = (
        "Every user has a storage quota. The default storage quota of a new user is 50 GiB; "
        "administrators can raise it per user up to 2 TiB in the admin console."
    )
    assert 150 < len(quota) < 180
    session = SessionState()
    index = session.cite(
        chunk_id="q", document_id="d", title="Quotas", uri="q.txt", text=quota, promote=False
    )
    session.promote_cited(f"The default storage quota of a new user is 50 GiB [{index}].")
    assert session.citations[str(index)].emitted()["passage"] == quota

    words = " ".join(f"word{n}" for n in range(120))  # under a card's passage limit
    quoted = "word50 word51 word52 word53"
    index = session.cite(chunk_id="w", document_id="d", title="Words", uri="w.txt", text=words, promote=False)
    session.promote_cited(f"{quoted} [{index}].")
    shown = session.citations[str(index)].emitted()["passage"]
    assert quoted in shown and shown.startswith("…word") and shown.endswith("…"), shown
    assert all(part.startswith("word") for part in shown.strip("…").split()), shown  # whole words only
    ending = session.cite(chunk_id="e", document_id="d", title="End", uri="e.txt", text=words, promote=False)
    session.promote_cited(f"word116 word117 word118 word119 [{ending}].")  # near the end
    shown = session.citations[str(ending)].emitted()["passage"]
    assert shown.startswith("…word") and shown.endswith("word119"), shown  # the start moved back whole


def test_a_card_is_cut_around_a_definition_s_sentence_the_answer_quoted_after_its_term() -> None:
    """The offline answer leads a definition's sentence with its term (a signature the passage
    writes only in its section heading); the card still shows the part holding the sentence."""
    filler = " ".join(f"If option{i} is true, the copy keeps attribute {i} of each file." for i in range(12))
    passage = (
        f"{filler}\n\nWhen dirs_exist_ok is false (the default) and dst already exists, an error is raised.\n\n"
        f"{filler}"
    )
    session = SessionState()
    index = session.cite(
        chunk_id="c", document_id="d", title="shutil", uri="shutil.html", text=passage, promote=False
    )
    session.promote_cited(
        f"`shutil.copytree(…, dirs_exist_ok=False)`: When dirs_exist_ok is false (the default) and dst already "
        f"exists, an error is raised [{index}]."
    )
    shown = session.citations[str(index)].emitted()["passage"]
    assert shown.startswith("…When dirs_exist_ok is false (the default)"), shown
