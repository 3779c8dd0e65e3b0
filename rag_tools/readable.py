"""A thread's state as its reader may see it now: cached results of documents it may not read go.

A thread keeps what its searches and answers found (citation cards with passages, search
summaries, QA answers that a later question may recall without searching). Those came from the
documents its owner could read then; groups change, and a forked thread may be read later. So
whenever the state is served again (a run's start, the thread view, a state item) it is first
checked against the knowledge base as the current reader sees it (``KnowledgeBase.reader``):

- citation cards (shown or pending) of a document the reader may not read are dropped;
- a search summary keeps only the hits of readable documents;
- a QA entry that cites any passage of an unreadable document is dropped with its question's
  embedding, so it is neither shown nor recalled.

A document that is gone counts as unreadable. A reader of every document changes nothing. Every
change replaces a field's value (``ToolContext.view`` copies models shallowly).

The thread's conversation keeps tool results too (a search's passages, a document's text, a QA
result), which the model reads again on every turn and a reloaded page shows. The same check
gives a ``Withholding`` for them: a result that names a document the reader may not read (by
``document_id``, by ``uri``, the document's display source, or by ``citation``, the thread's
number for a passage) is replaced whole by ``WITHHELD``, so neither the model nor the page gets
its text. Whole, because a result's other
text (a QA answer) may say what the passages said. Documents that are gone do not withhold a
result here: a ``uri`` may be a web page a user's tool fetched, not a document at all. What the
assistant said in its answers stays: it is what the user was told.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .kb import KnowledgeBase
from .state import (
    QA_NAMESPACE,
    SEARCH_NAMESPACE,
    SESSION_NAMESPACE,
    QASessionState,
    SearchState,
    SessionState,
    ToolContext,
)

__all__ = ["WITHHELD", "Withholding", "drop_unreadable"]

WITHHELD = "Withheld: this result came from a document you may no longer read."
"""What a tool result naming a document its reader may not read (any more) is replaced with."""


@dataclass(frozen=True)
class _Names:
    """What a tool result names documents by: ids, display sources, the thread's citation numbers."""

    ids: frozenset[str]
    uris: frozenset[str]
    citations: frozenset[int]


def _names(result: Any) -> _Names:
    """Every ``document_id``, ``uri`` and ``citation`` (a number) anywhere in a result (as JSON)."""
    ids: set[str] = set()
    uris: set[str] = set()
    citations: set[int] = set()
    stack = [result]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            document_id, uri, citation = value.get("document_id"), value.get("uri"), value.get("citation")
            if isinstance(document_id, str):
                ids.add(document_id)
            if isinstance(uri, str):
                uris.add(uri)
            if isinstance(citation, int) and not isinstance(citation, bool):
                citations.add(citation)
            stack.extend(v for v in value.values() if isinstance(v, (dict, list)))
        elif isinstance(value, list):
            stack.extend(v for v in value if isinstance(v, (dict, list)))
    return _Names(frozenset(ids), frozenset(uris), frozenset(citations))


@dataclass(frozen=True)
class Withholding:
    """Which tool results a reader may not see: those naming a document it may not read, by id,
    by display source (``uri``) or by the thread's citation number."""

    ids: frozenset[str] = frozenset()
    uris: frozenset[str] = frozenset()
    citations: frozenset[int] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.ids or self.uris or self.citations)

    def __call__(self, result: Any) -> Any:
        """``result`` itself, or ``WITHHELD`` when it names a document the reader may not read."""
        if not self or not isinstance(result, (dict, list)):
            return result
        names = _names(result)
        if (
            self.ids.isdisjoint(names.ids)
            and self.uris.isdisjoint(names.uris)
            and self.citations.isdisjoint(names.citations)
        ):
            return result
        return WITHHELD


NOTHING_WITHHELD = Withholding()


def _document_of(session: SessionState, index: int) -> str | None:
    """The document a citation number points at (its card, else the registry's chunk id)."""
    key = str(index)
    card = session.citations.get(key) or session.pending_citations.get(key)
    if card is not None:
        return card.document_id
    for chunk_id, known in session.citation_registry.items():
        if known == index:
            return chunk_id.split(":", 1)[0]
    return None


async def drop_unreadable(
    context: ToolContext, kb: KnowledgeBase, results: Iterable[Any] = ()
) -> Withholding:
    """Remove from ``context`` what ``kb.reader`` may not read now, and say which of the thread's
    tool ``results`` (as JSON) it may not see either."""
    if kb.reader.reads_all:
        return NOTHING_WITHHELD
    names = [_names(r) for r in results if isinstance(r, (dict, list))]
    session = context.get(SESSION_NAMESPACE, SessionState)
    cited = _cited(context, session) if session is not None else set()
    cited.update(c for n in names for c in n.citations)
    documents = {index: _document_of(session, index) for index in cited} if session is not None else {}
    named_ids = {i for n in names for i in n.ids}
    readability = await kb.document_readability(named_ids | {d for d in documents.values() if d})
    if session is not None:
        _drop_from_state(context, session, {d for d, ok in readability.items() if ok}, documents)
    uris = await kb.uri_readability({u for n in names for u in n.uris})
    unreadable = {d for d, ok in readability.items() if not ok}
    return Withholding(
        ids=frozenset(unreadable & named_ids),
        uris=frozenset(u for u, ok in uris.items() if not ok),
        citations=frozenset(c for n in names for c in n.citations if documents.get(c) in unreadable),
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
    context: ToolContext, session: SessionState, readable: set[str], documents: dict[int, str | None]
) -> None:
    searches = context.get(SEARCH_NAMESPACE, SearchState)
    qa = context.get(QA_NAMESPACE, QASessionState)

    def ok(index: int) -> bool:
        return documents.get(index) in readable

    citations = {k: c for k, c in session.citations.items() if c.document_id in readable}
    pending = {k: c for k, c in session.pending_citations.items() if c.document_id in readable}
    if len(citations) != len(session.citations) or len(pending) != len(session.pending_citations):
        session.citations, session.pending_citations = citations, pending
        context.mark_changed(SESSION_NAMESPACE)
    if searches is not None:
        records = {
            key: record.model_copy(update={"hits": tuple(h for h in record.hits if ok(h.citation))})
            for key, record in searches.searches.items()
        }
        if any(len(records[k].hits) != len(r.hits) for k, r in searches.searches.items()):
            searches.searches = records
            context.mark_changed(SEARCH_NAMESPACE)
    if qa is not None:
        kept = [e for e in qa.qa_history if all(ok(i) for i in e.citations)]
        if len(kept) != len(qa.qa_history):
            ids = {e.id for e in kept}
            qa.qa_history = kept
            qa.question_embeddings = {k: v for k, v in qa.question_embeddings.items() if k in ids}
            context.mark_changed(QA_NAMESPACE)
