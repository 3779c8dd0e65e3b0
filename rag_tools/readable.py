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
"""

from __future__ import annotations

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

__all__ = ["drop_unreadable"]


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


async def drop_unreadable(context: ToolContext, kb: KnowledgeBase) -> bool:
    """Remove from ``context`` what ``kb.reader`` may not read now; whether anything was removed."""
    if kb.reader.reads_all:
        return False
    session = context.get(SESSION_NAMESPACE, SessionState)
    if session is None:
        return False
    searches = context.get(SEARCH_NAMESPACE, SearchState)
    qa = context.get(QA_NAMESPACE, QASessionState)
    cited = {int(k) for k in (*session.citations, *session.pending_citations)}
    if searches is not None:
        cited.update(h.citation for r in searches.searches.values() for h in r.hits)
    if qa is not None:
        cited.update(i for e in qa.qa_history for i in e.citations)
    documents = {index: _document_of(session, index) for index in cited}
    readable = await kb.readable_document_ids({d for d in documents.values() if d})

    def ok(index: int) -> bool:
        return documents.get(index) in readable

    changed = False
    citations = {k: c for k, c in session.citations.items() if c.document_id in readable}
    pending = {k: c for k, c in session.pending_citations.items() if c.document_id in readable}
    if len(citations) != len(session.citations) or len(pending) != len(session.pending_citations):
        session.citations, session.pending_citations = citations, pending
        context.mark_changed(SESSION_NAMESPACE)
        changed = True
    if searches is not None:
        records = {
            key: record.model_copy(update={"hits": tuple(h for h in record.hits if ok(h.citation))})
            for key, record in searches.searches.items()
        }
        if any(len(records[k].hits) != len(r.hits) for k, r in searches.searches.items()):
            searches.searches = records
            context.mark_changed(SEARCH_NAMESPACE)
            changed = True
    if qa is not None:
        kept = [e for e in qa.qa_history if all(ok(i) for i in e.citations)]
        if len(kept) != len(qa.qa_history):
            ids = {e.id for e in kept}
            qa.qa_history = kept
            qa.question_embeddings = {k: v for k, v in qa.question_embeddings.items() if k in ids}
            context.mark_changed(QA_NAMESPACE)
            changed = True
    return changed
