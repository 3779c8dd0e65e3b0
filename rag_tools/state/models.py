"""The RAG state namespaces: session (filter, citations), search history and QA history.

Collections that grow per turn are bounded; eviction drops the oldest entries first:

- ``citations`` (emitted): the cards of passages an answer actually cited, at most
  ``citations_limit``; the card added longest ago goes first. A search numbers every hit at once
  (so the model can cite it) but parks its card in ``pending_citations`` (server-only, newest
  ``PENDING_LIMIT`` kept) until an answer cites it: the client receives only what it renders. The
  ``citation_registry`` (server-only) keeps every chunk's index, so a chunk cited again after its
  card was evicted gets its original number back; it keeps the newest ``REGISTRY_LIMIT`` entries.
- ``searches``: at most ``search_history_limit`` records, oldest first.
- ``qa_history``: at most ``qa_history_limit`` entries, oldest first, with their cached question
  embeddings (server-only) removed alongside.

Items are frozen models with tuple fields, so ``ToolContext`` can reuse their dumps.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from ..arguments import NAME_CHARS, as_list
from .context import StateModel, ToolContext

__all__ = [
    "FEATURE_NAMESPACES",
    "QA_NAMESPACE",
    "SEARCH_NAMESPACE",
    "SESSION_NAMESPACE",
    "WITHHELD_NAMESPACE",
    "Citation",
    "QAEntry",
    "QASessionState",
    "SearchHitSummary",
    "SearchRecord",
    "SearchState",
    "SessionContext",
    "SessionState",
    "SummarySource",
    "WithheldState",
    "prepare_context",
]

SESSION_NAMESPACE = "rag.session"
SEARCH_NAMESPACE = "rag.search"
QA_NAMESPACE = "rag.qa"
WITHHELD_NAMESPACE = "rag.withheld"

REGISTRY_LIMIT = 10_000
PENDING_LIMIT = 500
PASSAGE_CHARS = 1200
EXCERPT_CHARS = 150
ANSWER_SUMMARY_CHARS = 120
_CITATION_MARK = re.compile(r"\[(\d{1,6})\]")
_SENTENCE = re.compile(r"[^.!?]*[.!?]?")


def _excerpt(passage: str, quoted: Sequence[str]) -> str:
    """About ``EXCERPT_CHARS`` of ``passage`` (more, up to twice that, to end a long quoted
    sentence), from the first quoted sentence found in it, else from its start; cut between words.
    A passage only a little longer is shown whole rather than missing a few words."""
    return _quoted_excerpt(passage, quoted) or _cut(passage, 0, EXCERPT_CHARS)


def _quoted_excerpt(passage: str, quoted: Sequence[str]) -> str | None:
    """The excerpt from the first of ``quoted`` found in ``passage``; ``None`` when none is.

    Sentences are found by their letters and digits alone: an answer quotes a passage's text without
    its Markdown (``GET /health`` for `` `GET /health` ``), its line breaks or its punctuation. A table
    row quoted as ``Role: Lead, Budget: 600 EUR`` is found by its values (``| Lead | 600 EUR |``).
    """
    if len(passage) <= EXCERPT_CHARS + _WORD_CHARS:
        return passage
    if not quoted:
        return None
    letters, positions = _letters(passage)
    for sentence in quoted:
        found = next((at for probe in _probes(sentence) if (at := letters.find(probe)) >= 0), -1)
        if found >= 0:
            start = max(0, min(positions[found], len(passage) - EXCERPT_CHARS))
            return _cut(
                passage, start, start + min(max(EXCERPT_CHARS, len(sentence) + 20), 2 * EXCERPT_CHARS)
            )
    return None


def _cut(passage: str, start: int, end: int) -> str:
    """``passage[start:end]``, both ends moved back to a word's edge, with "…" where it goes on."""
    start = _word_edge(passage, start) if start > 0 else 0
    end = _word_edge(passage, end) if end < len(passage) else len(passage)
    return ("…" if start else "") + passage[start:end].strip() + ("…" if end < len(passage) else "")


_WORD_CHARS = 30
"""How far a cut may move back to fall between words (a longer "word", such as a URL, is cut)."""


def _word_edge(text: str, at: int) -> int:
    """``at``, or the nearest earlier place between two words when ``at`` falls inside one."""
    if text[at - 1].isspace() or text[at].isspace():
        return at
    space = max(text.rfind(" ", 0, at), text.rfind("\n", 0, at))
    return space + 1 if space >= 0 and at - space <= _WORD_CHARS else at


# The end of the term an offline answer leads a definition's sentence with (``rag_tools.extractive``:
# code spans, then a colon), which the passage writes on a line of its own or only in its section
# heading; a signature's dots split it from the sentence's start here, so only its end is looked for.
_TERM_END = re.compile(r"^[^`]{0,200}`\)?:\s+")


def _probes(sentence: str) -> list[str]:
    """What to look for of a quoted sentence: its first letters, the first letters after the term
    leading it, and for a table row read as ``header: value`` pairs, the first letters of its values
    alone."""
    probes = [_letters(sentence)[0][:_PROBE_LETTERS]]
    term = _TERM_END.search(sentence)
    if term:  # "`shutil.copytree(…)`: Recursively copy...": the term leads, the sentence is quoted
        probes.append(_letters(sentence[term.end() :])[0][:_PROBE_LETTERS])
    pairs = [pair.split(": ", 1) for pair in sentence.rstrip(".").split(", ")]
    if len(pairs) >= 2 and all(len(pair) == 2 for pair in pairs):
        probes.append(_letters(" ".join(value for _, value in pairs))[0][:_PROBE_LETTERS])
    return [probe for probe in probes if len(probe) >= _MIN_PROBE_LETTERS]


_PROBE_LETTERS = 32
_MIN_PROBE_LETTERS = 10


def _letters(text: str) -> tuple[str, list[int]]:
    """``text``'s letters and digits, lower case, and the index in ``text`` of each."""
    kept: list[str] = []
    positions: list[int] = []
    for index, char in enumerate(text):
        if char.isalnum():
            lowered = char.lower()
            kept.append(lowered)
            positions.extend([index] * len(lowered))
    return "".join(kept), positions


def _now() -> datetime:
    return datetime.now(UTC)


class Citation(BaseModel):
    """A numbered source card: what ``[n]`` in an answer points at.

    Clients get it as ``card()``: the same keys in a run's state, in ``GET /threads/{id}`` and read
    by key (``index``, ``document_id``, ``title``, ``uri``, ``headings``, ``page``, ``locator``,
    ``passage``), every one always present: ``page`` is ``null`` and ``locator`` ``""`` for formats
    without pages. ``locator`` labels where the passage sits (``"page 3"``); a passage with a page
    and no locator gets ``"page N"``.
    """

    model_config = ConfigDict(frozen=True)

    index: int
    document_id: str
    title: str
    uri: str
    headings: tuple[str, ...] = ()
    page: int | None = None
    locator: str = Field(default="", description='Where the passage sits, e.g. "page 3"; "" when unknown.')
    passage: str = Field(description="The cited text.")
    excerpt: str | None = Field(
        default=None, description="What the client is shown of the passage: around what the answer quoted."
    )

    @model_validator(mode="before")
    @classmethod
    def _page_locator(cls, data: Any) -> Any:
        """A card with a page and no locator (a PDF passage, or one saved before locators) gets
        ``"page N"``."""
        if isinstance(data, dict) and not data.get("locator") and data.get("page") is not None:
            return {**data, "locator": f"page {data['page']}"}
        return data

    def card(self, passage: str) -> dict[str, Any]:
        """The documented card with ``passage``: the heading path without a first heading that only
        repeats the title or the locator's label (a sheet's name in ``"Plans, rows 2-5"``)."""
        first = self.headings[0] if self.headings else None
        repeats = first is not None and (first == self.title or self.locator.startswith(f"{first}, "))
        headings = self.headings[1:] if repeats else self.headings
        return {
            "index": self.index,
            "document_id": self.document_id,
            "title": self.title,
            "uri": self.uri,
            "headings": list(headings),
            "page": self.page,
            "locator": self.locator,
            "passage": passage,
        }

    def emitted(self) -> dict[str, Any]:
        """The card as runs send it: the excerpt in place of the whole passage."""
        return self.card(self.excerpt if self.excerpt is not None else _excerpt(self.passage, ()))

    def read_view(self) -> dict[str, Any]:
        """The card as read by key (``GET /threads/{id}/state/citations/{n}``): as runs send it, so an
        older answer's card shows what that answer quoted, not the passage's opening."""
        return self.emitted()


class SessionState(StateModel):
    """The document filter the user chose, and the thread's citations."""

    client_fields: ClassVar[frozenset[str]] = frozenset({"document_filter"})
    server_only_fields: ClassVar[frozenset[str]] = frozenset(
        {"citation_registry", "next_citation", "pending_citations"}
    )

    document_filter: list[Annotated[str, StringConstraints(max_length=NAME_CHARS)]] = Field(
        default_factory=list, max_length=50, description="Document names that restrict every tool."
    )
    citations: dict[str, Citation] = Field(default_factory=dict, description="Citation cards by index.")
    citation_registry: dict[str, int] = Field(default_factory=dict, description="Chunk id to index.")
    pending_citations: dict[str, Citation] = Field(
        default_factory=dict, description="Cards of numbered passages no answer has cited yet."
    )
    next_citation: int = 1

    def documents_of(self, indices: Iterable[int]) -> dict[int, str | None]:
        """The document each citation number points at: its card's, else the registry's chunk id's."""
        cards = {**self.pending_citations, **self.citations}
        found: dict[int, str | None] = {}
        by_index: dict[int, str] | None = None
        for index in indices:
            card = cards.get(str(index))
            if card is not None:
                found[index] = card.document_id
                continue
            if by_index is None:  # built once, and only when a number has no card
                by_index = {i: chunk_id.split(":", 1)[0] for chunk_id, i in self.citation_registry.items()}
            found[index] = by_index.get(index)
        return found

    def cite(
        self,
        *,
        chunk_id: str,
        document_id: str,
        title: str,
        uri: str,
        text: str,
        headings: Sequence[str] = (),
        page: int | None = None,
        locator: str = "",
        limit: int = 200,
        promote: bool = True,
    ) -> int:
        """The stable 1-based index of ``chunk_id``: the first occurrence numbers it for good.

        With ``promote=False`` the card waits in ``pending_citations`` until ``promote`` shows it.
        """
        index = self.citation_registry.get(chunk_id)
        if index is None:
            index = self.next_citation
            self.next_citation += 1
            self.citation_registry[chunk_id] = index
            if len(self.citation_registry) > REGISTRY_LIMIT:
                for old in list(self.citation_registry)[: len(self.citation_registry) - REGISTRY_LIMIT]:
                    del self.citation_registry[old]
        key = str(index)
        if key not in self.citations:
            card = Citation(
                index=index,
                document_id=document_id,
                title=title,
                uri=uri,
                headings=tuple(headings),
                page=page,
                locator=locator,
                passage=text[:PASSAGE_CHARS],
            )
            if promote:
                self._show(card, limit)
            else:
                self.pending_citations.pop(key, None)
                self.pending_citations[key] = card
                while len(self.pending_citations) > PENDING_LIMIT:
                    del self.pending_citations[next(iter(self.pending_citations))]
        return index

    def _show(self, card: Citation, limit: int) -> None:
        key = str(card.index)
        self.pending_citations.pop(key, None)
        self.citations.pop(key, None)  # (re)inserted last: the most recently cited come last
        self.citations[key] = card
        while len(self.citations) > limit:
            del self.citations[next(iter(self.citations))]

    def promote(self, indices: Iterable[int], *, limit: int = 200, text: str = "") -> list[int]:
        """Show the cards of ``indices`` (cited by an answer); returns those shown or brought forward.

        A shown card carries an excerpt of its passage, from what ``text`` (the answer) quoted of
        it when that can be found, so the client gets what it renders. A card cited again moves to
        the end, where the state's emit window (the latest cards) keeps it, and shows what the new
        answer quoted of it.
        """
        shown = []
        for index in dict.fromkeys(indices):
            key = str(index)
            marker = f"[{index}]"
            quoted = [_CITATION_MARK.sub("", s) for s in _SENTENCE.findall(text) if marker in s]
            if key in self.citations:  # cited again: shown around what this answer quotes of it
                card = self.citations[key]
                excerpt = _quoted_excerpt(card.passage, quoted) or card.excerpt
                if excerpt != card.excerpt or next(reversed(self.citations)) != key:
                    del self.citations[key]  # (re)inserted last
                    self.citations[key] = (
                        card if excerpt == card.excerpt else card.model_copy(update={"excerpt": excerpt})
                    )
                    shown.append(index)
                continue
            card = self.pending_citations.get(key)
            if card is None:
                continue
            self._show(card.model_copy(update={"excerpt": _excerpt(card.passage, quoted)}), limit)
            shown.append(index)
        return shown

    def promote_cited(self, text: str, *, limit: int = 200) -> list[int]:
        """Show the cards of every ``[n]`` in ``text``."""
        return self.promote((int(n) for n in _CITATION_MARK.findall(text)), limit=limit, text=text)


class SearchHitSummary(BaseModel):
    """What the client shows of a hit: its number, its document and how well it matched.

    Deliberately small (no uri, no text): a card with everything arrives once an answer cites it.
    ``document_id`` names the document as ``SearchResult`` does (``None`` in searches recorded
    before it was kept).
    """

    model_config = ConfigDict(frozen=True)

    citation: int
    title: str
    score: float
    page: int | None = None
    document_id: str | None = None


class SearchRecord(BaseModel):
    """One search the agent ran."""

    model_config = ConfigDict(frozen=True)

    id: str
    seq: int
    query: str
    documents: tuple[str, ...] = ()
    hits: tuple[SearchHitSummary, ...] = ()
    at: datetime = Field(default_factory=_now)

    def emitted(self) -> dict[str, Any]:
        """The record as the client gets it: no timestamp, no empty document list (read it by id)."""
        return self.model_dump(
            mode="json", exclude_none=True, exclude={"at"} if self.documents else {"at", "documents"}
        )


class SearchState(StateModel):
    """The thread's recent searches, keyed by id (``seq`` gives their order)."""

    server_only_fields: ClassVar[frozenset[str]] = frozenset({"next_search"})

    searches: dict[str, SearchRecord] = Field(default_factory=dict)
    next_search: int = 1

    def add_search(
        self, query: str, hits: Iterable[SearchHitSummary], *, documents: Sequence[str] = (), limit: int = 20
    ) -> SearchRecord:
        """Record a search; the oldest records beyond ``limit`` are dropped."""
        seq = self.next_search
        self.next_search += 1
        record = SearchRecord(
            id=f"s{seq}", seq=seq, query=query, documents=tuple(documents), hits=tuple(hits)
        )
        self.searches[record.id] = record
        while len(self.searches) > limit:
            del self.searches[min(self.searches.values(), key=lambda r: r.seq).id]
        return record


class QAEntry(BaseModel):
    """One answered question."""

    model_config = ConfigDict(frozen=True)

    id: str
    question: str
    answer: str
    confidence: float
    citations: tuple[int, ...] = ()
    document: str | None = None
    recalled_from: str | None = Field(default=None, description="Id of the earlier answer this one reused.")
    scope: str | None = Field(
        default=None,
        description="Which documents the answer was sought in (a digest of the toolset's and the "
        "session's filters): an answer is recalled only in the same scope.",
    )
    at: datetime = Field(default_factory=_now)

    def emitted(self) -> dict[str, Any]:
        """The entry as the client gets it: the answer's opening (the whole answer is a message), no
        timestamp or scope; the whole entry is read by id."""
        data = self.model_dump(mode="json", exclude_none=True, exclude={"at", "scope"})
        if len(self.answer) > ANSWER_SUMMARY_CHARS:
            data["answer"] = self.answer[: ANSWER_SUMMARY_CHARS - 1].rstrip() + "…"
        return data


class SummarySource(BaseModel):
    """A document the answers a session summary was written from cited."""

    model_config = ConfigDict(frozen=True)

    document_id: str


class SessionContext(BaseModel):
    """What the session has been about: a short summary, refreshed in the background after answers.

    ``sources`` names the documents it may repeat, as a tool result names its own, so a run's
    replayed state is checked for its reader like the run's results (``server/NOTES.md``).
    """

    model_config = ConfigDict(frozen=True)

    summary: str
    last_updated: datetime = Field(default_factory=_now)
    sources: tuple[SummarySource, ...] = ()


class QASessionState(StateModel):
    """The thread's QA history and session summary; question embeddings stay on the server.

    ``session_context`` is server-owned: a client's copy never replaces the server's.
    """

    server_only_fields: ClassVar[frozenset[str]] = frozenset({"question_embeddings", "next_qa", "summary_of"})

    qa_history: list[QAEntry] = Field(default_factory=list)
    question_embeddings: dict[str, list[float]] = Field(default_factory=dict)
    session_context: SessionContext | None = None
    summary_of: list[str] = Field(
        default_factory=list, description="The ids of the QA entries ``session_context`` was written from."
    )
    next_qa: int = 1

    def add_entry(
        self, entry_fields: dict[str, object], embedding: Sequence[float] | None, *, limit: int
    ) -> QAEntry:
        """Append an answer (its id is assigned here); evicts the oldest beyond ``limit``."""
        entry = QAEntry(id=f"qa{self.next_qa}", **entry_fields)  # type: ignore[arg-type]
        self.next_qa += 1
        self.qa_history.append(entry)
        if embedding is not None:
            self.question_embeddings[entry.id] = list(embedding)
        while len(self.qa_history) > limit:
            evicted = self.qa_history.pop(0)
            self.question_embeddings.pop(evicted.id, None)
        return entry


class WithheldState(StateModel):
    """What a reader who may not read some documents was not shown of the thread's state: citation
    cards, the whole search records whose hits it saw cut, QA entries with their embeddings, and
    the session summary written from those entries.

    Kept server-side (nothing here is emitted) only while it holds something, and put back before
    the state is checked again, so all of it returns once its documents are readable again
    (``rag_tools.readable``). Items of documents that are gone are not kept.
    """

    server_only_fields: ClassVar[frozenset[str]] = frozenset(
        {
            "citations",
            "pending_citations",
            "card_order",
            "searches",
            "qa_entries",
            "question_embeddings",
            "session_context",
            "summary_of",
        }
    )

    citations: dict[str, Citation] = Field(default_factory=dict)
    pending_citations: dict[str, Citation] = Field(default_factory=dict)
    card_order: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Each card field's keys in the order they had (recency: the emit window's and "
        "eviction's order), so the cards go back where they were.",
    )
    searches: dict[str, SearchRecord] = Field(default_factory=dict)
    qa_entries: list[QAEntry] = Field(default_factory=list)
    question_embeddings: dict[str, list[float]] = Field(default_factory=dict)
    session_context: SessionContext | None = None
    summary_of: list[str] = Field(default_factory=list)

    def holds_any(self) -> bool:
        """Whether anything is kept aside (an emptied one may stay registered after a branch switch)."""
        return bool(
            self.citations
            or self.pending_citations
            or self.searches
            or self.qa_entries
            or self.session_context
        )


FEATURE_NAMESPACES: dict[str, tuple[tuple[str, type[BaseModel]], ...]] = {
    "search": ((SESSION_NAMESPACE, SessionState), (SEARCH_NAMESPACE, SearchState)),
    "documents": ((SESSION_NAMESPACE, SessionState),),
    "qa": ((SESSION_NAMESPACE, SessionState), (QA_NAMESPACE, QASessionState)),
    "analysis": ((SESSION_NAMESPACE, SessionState),),
}


def prepare_context(
    context: ToolContext, features: Iterable[str] = ("search", "documents"), state_key: str | None = None
) -> ToolContext:
    """Register the namespaces ``features`` need (idempotent: existing namespaces are kept)."""
    if state_key is not None:
        context.state_key = state_key
    for feature in as_list(features, "features"):
        if feature not in FEATURE_NAMESPACES:
            known = ", ".join(FEATURE_NAMESPACES)
            raise ValueError(f"unknown feature {feature!r}; known: {known}")
        for namespace, model_type in FEATURE_NAMESPACES[feature]:
            context.get_or_create(namespace, model_type)
    return context
