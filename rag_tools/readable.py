"""A thread's state as its reader may see it now: cached results of documents it may not read go.

A thread keeps what its searches and answers found (citation cards with passages, search
summaries, QA answers that a later question may recall without searching). Those came from the
documents its owner could read then; groups change, and a forked thread may be read later. So
whenever the state is served again (a run's start, the thread view, a state item) it is first
checked against the knowledge base as the current reader sees it (``KnowledgeBase.reader``):

- citation cards (shown or pending) of a document the reader may not read are taken out;
- a search summary keeps only the hits of readable documents;
- a QA entry that cites any passage of an unreadable document is taken out with its question's
  embedding, so it is neither shown nor recalled; so is the session summary (``session_context``)
  written from such an entry (a model's account of its answer, which later answers are instructed
  with), until a summary of readable entries replaces it;
- any other namespace that keeps what documents gave (``NamesDocuments``: the tool system's
  attachments) hides the items naming a document the reader may not read, until it may again.

What is taken out is not lost: it is kept aside in the thread (``WithheldState``, server-side,
saved with the state a run commits) and put back before every check, so a card, a search's hits
and an answer return once their documents are readable again (a group given back). A document
that is gone counts as unreadable, and what only it made unreadable is dropped for good. A reader
of every document is shown everything, kept aside or not. Every change replaces a field's value
(``ToolContext.view`` copies models shallowly).

The thread's conversation keeps tool results too (a search's passages, a document's text, a QA
result, an analysis and the documents it read), which the model reads again on every turn and a
reloaded page shows. The same check gives a ``Withholding`` for them: a result that names a
document the reader may not read (by ``document_id``, by ``citation``, the thread's number for a
passage, or by ``uri``, the document's display source; ``DocumentNames``; a result given as text,
such as a failed ``ToolResult``'s message, is read as the JSON it is) is replaced whole by
``WITHHELD``, so neither the model nor the page gets its text. Whole, because a result's other
text (a QA answer) may say what the passages said. A result cut to the output limit names what the
whole named in its metadata, and its kept full text is read back only by a reader of all of them
(``rag_tools.tools.outputs``). A document that is gone withholds the results naming it by id or by
citation number (it may have been taken from the reader before it was deleted); a ``uri`` naming no
document withholds nothing (a web page a user's tool fetched). What the assistant said in its
answers stays: it is what the user was told.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic_core import from_json, to_jsonable_python

from .kb import KnowledgeBase
from .state import (
    QA_NAMESPACE,
    SEARCH_NAMESPACE,
    SESSION_NAMESPACE,
    WITHHELD_NAMESPACE,
    Citation,
    QASessionState,
    SearchState,
    SessionContext,
    SessionState,
    ToolContext,
    WithheldState,
)

__all__ = [
    "NOTHING_WITHHELD",
    "WITHHELD",
    "DocumentNames",
    "NamesDocuments",
    "Withholding",
    "drop_unreadable",
    "hides_any",
    "unreadable_names",
]

_SCALARS = (str, int, float, bool, type(None))

WITHHELD = "Withheld: this result came from a document you may no longer read."
"""What a tool result naming a document its reader may not read (any more) is replaced with."""


@dataclass(frozen=True)
class DocumentNames:
    """How a tool result names knowledge-base documents: by id, by the thread's citation number,
    and by display source (``uri``) where a part of it names neither of the others.

    Worked out once when a result is stored (``to_json`` keeps it beside the result), so checking a
    long thread is a set lookup per result, not a walk through every result's JSON.
    """

    ids: frozenset[str] = frozenset()
    uris: frozenset[str] = frozenset()
    citations: frozenset[int] = frozenset()

    @classmethod
    def of(cls, result: Any) -> DocumentNames:
        """The names anywhere in ``result``, read as the JSON it is sent as (a tool's pydantic model
        output, such as a document's text, is walked like the dict it becomes)."""
        ids: set[str] = set()
        uris: set[str] = set()
        citations: set[int] = set()
        stack = [result]
        while stack:
            value = stack.pop()
            if isinstance(value, _SCALARS):
                continue
            if isinstance(value, list | tuple):
                stack.extend(v for v in value if not isinstance(v, _SCALARS))
                continue
            if not isinstance(value, dict):  # a model or dataclass: as the JSON it is sent as
                stack.append(to_jsonable_python(value, fallback=str))
                continue
            document_id, citation = value.get("document_id"), value.get("citation")
            if isinstance(document_id, str):
                ids.add(document_id)
            if isinstance(citation, int) and not isinstance(citation, bool):
                citations.add(citation)
            elif not isinstance(document_id, str) and isinstance(uri := value.get("uri"), str):
                uris.add(uri)
            if isinstance(cited := value.get("citations"), list):  # a QA answer's citation numbers
                citations.update(n for n in cited if isinstance(n, int) and not isinstance(n, bool))
            stack.extend(v for v in value.values() if not isinstance(v, _SCALARS))
        return cls(frozenset(ids), frozenset(uris), frozenset(citations))

    @classmethod
    def in_text(cls, text: str) -> DocumentNames:
        """The names in a result given as text: JSON (a result ``text_of`` made, a failed tool
        result's message), else a plain string, which names nothing."""
        if not text.startswith(("{", "[")):
            return cls()
        try:
            return cls.of(from_json(text))
        except ValueError:
            return cls()

    @classmethod
    def from_json_many(cls, many: Iterable[dict[str, list[Any]]]) -> DocumentNames:
        """Everything any of ``many`` (``to_json`` values) names, as one."""
        ids: set[str] = set()
        uris: set[str] = set()
        citations: set[int] = set()
        for data in many:
            if data:
                ids.update(data.get("ids", ()))
                uris.update(data.get("uris", ()))
                citations.update(data.get("citations", ()))
        return cls(frozenset(ids), frozenset(uris), frozenset(citations))

    def references(self) -> list[dict[str, Any]]:
        """The names in a result's own shape (``{"document_id": ...}``, ``{"citation": n}``,
        ``{"uri": ...}``), which ``of`` reads back: for a stand-in that keeps what a result named
        without its text (the metadata of a truncated result)."""
        return [
            *({"document_id": i} for i in sorted(self.ids)),
            *({"citation": c} for c in sorted(self.citations)),
            *({"uri": u} for u in sorted(self.uris)),
        ]

    def to_json(self) -> dict[str, list[Any]]:
        """The names as JSON, empty kinds left out."""
        kinds = {"ids": self.ids, "uris": self.uris, "citations": self.citations}
        return {kind: sorted(names) for kind, names in kinds.items() if names}  # type: ignore[type-var]

    def __bool__(self) -> bool:
        return bool(self.ids or self.uris or self.citations)

    def __or__(self, other: DocumentNames) -> DocumentNames:
        return DocumentNames(self.ids | other.ids, self.uris | other.uris, self.citations | other.citations)

    def meets(self, other: DocumentNames) -> bool:
        """Whether the two name any document in the same way."""
        return not (
            self.ids.isdisjoint(other.ids)
            and self.uris.isdisjoint(other.uris)
            and self.citations.isdisjoint(other.citations)
        )


@dataclass(frozen=True)
class Withholding:
    """Which tool results a reader may not see: those naming a document it may not read."""

    unreadable: DocumentNames = DocumentNames()

    def __bool__(self) -> bool:
        return bool(self.unreadable)

    def __call__(self, result: Any) -> Any:
        """``result`` itself, or ``WITHHELD`` when it names a document the reader may not read."""
        if not self or not isinstance(result, (dict, list)):
            return result
        return WITHHELD if self.unreadable.meets(DocumentNames.of(result)) else result


NOTHING_WITHHELD = Withholding()


class NamesDocuments:
    """Base of a state namespace keeping items that came from documents (a tool's attachments):
    it says what they name and shows a reader only the items naming nothing it may not read.

    ``drop_unreadable`` checks every namespace of this kind beside the RAG namespaces it knows.
    Like those, an item is hidden, not dropped, and comes back when its documents are readable
    again; it keeps its hidden items itself. ``show_readable`` may run on a ``ToolContext.view``
    copy: it replaces fields, never mutates them.
    """

    def document_names(self) -> DocumentNames:
        """Everything the namespace's items name, shown or hidden."""
        raise NotImplementedError

    def show_readable(self, unreadable: DocumentNames) -> bool:
        """Show the items naming none of ``unreadable``, hide the others; whether anything moved."""
        raise NotImplementedError

    def hides_any(self) -> bool:
        """Whether any item is hidden now (from the last reader it was shown to)."""
        raise NotImplementedError


def _holders(context: ToolContext) -> list[tuple[str, NamesDocuments]]:
    return [(ns, m) for ns, m in context.namespaces.items() if isinstance(m, NamesDocuments)]


def _show(context: ToolContext, holders: list[tuple[str, NamesDocuments]], unreadable: DocumentNames) -> None:
    for namespace, holder in holders:
        if holder.show_readable(unreadable):
            context.mark_changed(namespace)


def hides_any(context: ToolContext) -> bool:
    """Whether ``context`` keeps aside anything from its last restricted reader (``WithheldState``,
    ``NamesDocuments``), which a reader of every document would be shown (on a ``drop_unreadable``
    of a view)."""
    return _keeps_aside(context) or any(holder.hides_any() for _, holder in _holders(context))


def _keeps_aside(context: ToolContext) -> bool:
    if not context.has(WITHHELD_NAMESPACE):
        return False
    aside = context.get(WITHHELD_NAMESPACE, WithheldState)
    return aside is None or aside.holds_any()  # (stored and not read yet: it holds something)


async def drop_unreadable(
    context: ToolContext, kb: KnowledgeBase, names: DocumentNames = DocumentNames()
) -> Withholding:
    """Take out of ``context`` what ``kb.reader`` may not read now (kept aside in the thread, see
    ``WithheldState``), put back what it may read again, and say which of the thread's tool results
    (``names``: everything they name) it may not see either."""
    holders = _holders(context)
    _put_back(context)
    if kb.reader.reads_all:
        _show(context, holders, DocumentNames())
        return NOTHING_WITHHELD
    for _, holder in holders:
        names |= holder.document_names()
    session = context.get(SESSION_NAMESPACE, SessionState)
    cited = (_cited(context, session) if session is not None else set()) | names.citations
    documents = session.documents_of(cited) if session is not None else {}
    by_uri, readability = await _readability(kb, names, documents)
    if session is not None:
        _drop_from_state(context, session, readability, documents)
    withholding = Withholding(_unreadable(names, documents, by_uri, readability))
    _show(context, holders, withholding.unreadable)
    return withholding


async def unreadable_names(
    kb: KnowledgeBase, names: DocumentNames, documents: Mapping[int, str | None]
) -> DocumentNames:
    """What of ``names`` ``kb.reader`` may not read now; ``documents`` places its citation numbers
    (``SessionState.documents_of``). The rule a thread's tool results are withheld by, for callers
    that check something else the same way (a run's replayed events)."""
    return _unreadable(names, documents, *await _readability(kb, names, documents))


async def _readability(
    kb: KnowledgeBase, names: DocumentNames, documents: Mapping[int, str | None]
) -> tuple[dict[str, set[str]], dict[str, bool]]:
    """The documents ``names`` gives by ``uri``, and whether the reader may read each document
    named (by id, number or uri) that still exists."""
    by_uri = await kb.document_ids_for_uris(set(names.uris))
    named = set(names.ids) | {d for d in documents.values() if d}
    return by_uri, await kb.document_readability(named.union(*by_uri.values()))


def _unreadable(
    names: DocumentNames,
    documents: Mapping[int, str | None],
    by_uri: Mapping[str, set[str]],
    readability: Mapping[str, bool],
) -> DocumentNames:
    unreadable = {d for d, ok in readability.items() if not ok}
    # a document named by id that is gone may have been made unreadable first: its results go too
    gone = (set(names.ids) | {d for d in documents.values() if d}) - set(readability)
    return DocumentNames(
        ids=frozenset(names.ids & (unreadable | gone)),
        uris=frozenset(u for u, ids in by_uri.items() if not ids.isdisjoint(unreadable)),
        citations=frozenset(c for c in names.citations if documents.get(c) in unreadable | gone),
    )


def _cited(context: ToolContext, session: SessionState) -> set[int]:
    """The citation numbers the thread's state holds (cards, search summaries, QA entries)."""
    searches = context.get(SEARCH_NAMESPACE, SearchState)
    qa = context.get(QA_NAMESPACE, QASessionState)
    cited = {int(k) for k in (*session.citations, *session.pending_citations)}
    if searches is not None:
        cited.update(h.citation for r in searches.searches.values() for h in r.hits)
    if qa is not None:
        cited.update(i for e in qa.qa_history for i in e.citations)
    return cited


def _drop_from_state(
    context: ToolContext,
    session: SessionState,
    readability: dict[str, bool],
    documents: dict[int, str | None],
) -> None:
    """Take out what is not readable; keep aside (``WithheldState``) what is of a document that
    still exists, so it can come back."""
    searches = context.get(SEARCH_NAMESPACE, SearchState)
    qa = context.get(QA_NAMESPACE, QASessionState)
    aside = _Aside(context)

    def ok(index: int) -> bool:
        return readability.get(documents.get(index) or "") is True

    def kept_aside(indices: Iterable[int]) -> bool:
        """Whether an item citing ``indices`` (not all readable) may come back: one is only unreadable."""
        return any(readability.get(documents.get(i) or "") is False for i in indices)

    for field in ("citations", "pending_citations"):
        cards: dict[str, Citation] = getattr(session, field)
        kept = {k: c for k, c in cards.items() if readability.get(c.document_id) is True}
        if len(kept) != len(cards):
            setattr(session, field, kept)
            context.mark_changed(SESSION_NAMESPACE)
            stashed = {k: c for k, c in cards.items() if readability.get(c.document_id) is False}
            if stashed:
                aside.add(field, stashed)
                aside.add("card_order", {field: list(cards)})
    if searches is not None:
        cut = {k for k, r in searches.searches.items() if not all(ok(h.citation) for h in r.hits)}
        if cut:  # copies only of the records that lose hits
            aside.add(
                "searches",
                {
                    k: searches.searches[k]
                    for k in cut
                    if kept_aside(h.citation for h in searches.searches[k].hits)
                },
            )
            searches.searches = {
                key: record.model_copy(update={"hits": tuple(h for h in record.hits if ok(h.citation))})
                if key in cut
                else record
                for key, record in searches.searches.items()
            }
            context.mark_changed(SEARCH_NAMESPACE)
    if qa is not None:
        kept_entries = [e for e in qa.qa_history if all(ok(i) for i in e.citations)]
        if len(kept_entries) != len(qa.qa_history):
            ids = {e.id for e in kept_entries}
            gone = [e for e in qa.qa_history if e.id not in ids and kept_aside(e.citations)]
            aside.add("qa_entries", gone)
            aside.add(
                "question_embeddings",
                {e.id: qa.question_embeddings[e.id] for e in gone if e.id in qa.question_embeddings},
            )
            withheld = {e.id for e in qa.qa_history} - ids
            # the summary says what the answers it was written from said (not known: any of them)
            summarised = set(qa.summary_of) or withheld
            if qa.session_context is not None and not withheld.isdisjoint(summarised):
                if len(gone) == len(withheld):  # all of them may come back
                    aside.add_summary(qa.session_context, qa.summary_of)
                qa.session_context, qa.summary_of = None, []
            qa.qa_history = kept_entries
            qa.question_embeddings = {k: v for k, v in qa.question_embeddings.items() if k in ids}
            context.mark_changed(QA_NAMESPACE)


class _Aside:
    """The thread's ``WithheldState``, created only when something is put in it."""

    def __init__(self, context: ToolContext) -> None:
        self._context = context
        self._state: WithheldState | None = None

    def add(self, field: str, items: dict[str, Any] | list[Any]) -> None:
        if not items:
            return
        if self._state is None:
            self._state = self._context.get_or_create(WITHHELD_NAMESPACE, WithheldState)
        current = getattr(self._state, field)
        merged = [*current, *items] if isinstance(current, list) else {**current, **items}
        setattr(self._state, field, merged)  # replaced, never mutated: it may be a view's copy
        self._context.mark_changed(WITHHELD_NAMESPACE)

    def add_summary(self, summary: SessionContext, of: list[str]) -> None:
        if self._state is None:
            self._state = self._context.get_or_create(WITHHELD_NAMESPACE, WithheldState)
        self._state.session_context, self._state.summary_of = summary, of
        self._context.mark_changed(WITHHELD_NAMESPACE)


def _put_back(context: ToolContext) -> None:
    """Return what ``WithheldState`` keeps to the state it was taken from (to be checked again)."""
    if not context.has(WITHHELD_NAMESPACE):
        return
    aside = context.get_or_create(WITHHELD_NAMESPACE, WithheldState)
    if not aside.holds_any():
        context.unregister(WITHHELD_NAMESPACE)
        return
    session = context.get(SESSION_NAMESPACE, SessionState)
    searches = context.get(SEARCH_NAMESPACE, SearchState)
    qa = context.get(QA_NAMESPACE, QASessionState)
    if session is not None and (aside.citations or aside.pending_citations):
        for field in ("citations", "pending_citations"):
            cards = getattr(aside, field)
            if cards:
                setattr(
                    session, field, _in_order(getattr(session, field), cards, aside.card_order.get(field, []))
                )
        context.mark_changed(SESSION_NAMESPACE)
    if searches is not None and aside.searches:  # a record evicted meanwhile stays out
        searches.searches = {key: aside.searches.get(key, r) for key, r in searches.searches.items()}
        context.mark_changed(SEARCH_NAMESPACE)
    if qa is not None and aside.qa_entries:
        live = {e.id for e in qa.qa_history}
        back = [e for e in aside.qa_entries if e.id not in live]
        qa.qa_history = sorted([*qa.qa_history, *back], key=lambda e: e.at)
        qa.question_embeddings = {**aside.question_embeddings, **qa.question_embeddings}
        context.mark_changed(QA_NAMESPACE)
    if qa is not None and aside.session_context is not None and qa.session_context is None:
        qa.session_context, qa.summary_of = aside.session_context, aside.summary_of  # none written since
        context.mark_changed(QA_NAMESPACE)
    context.unregister(WITHHELD_NAMESPACE)


def _in_order(live: dict[str, Citation], back: dict[str, Citation], order: list[str]) -> dict[str, Citation]:
    """``live`` cards with ``back`` among them, in the ``order`` they had when taken out (cards new
    since then last: the most recently cited)."""
    merged = {**back, **live}
    known = set(order)
    keys = [k for k in order if k in merged] + [k for k in live if k not in known]
    keys += [k for k in back if k not in known and k not in live]  # (an order always names them)
    return {k: merged[k] for k in keys}
