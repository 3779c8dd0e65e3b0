"""Document filters as the toolsets use them: by name, by several names, from the session.

Every tool of a toolkit restricts itself with ``get_session_filter``: the toolkit's ``base_filter``
AND the document filter the user set in the session state. Names are matched case-insensitively
against titles and uris, also with spaces removed; nothing here is SQL until ``to_sql()``.
"""

from __future__ import annotations

from collections.abc import Iterable

from .arguments import as_list
from .kb.filters import DocumentFilter, Filter, FilterLike, combine_filters
from .state import SESSION_NAMESPACE, SessionState, ToolContext

__all__ = [
    "build_document_filter",
    "build_multi_document_filter",
    "combine_filters",
    "get_session_filter",
]


def build_document_filter(name: str) -> DocumentFilter:
    """A filter for documents whose title or uri contains ``name`` (case and spaces ignored)."""
    if not name.strip():
        raise ValueError("a document name must not be empty")
    return DocumentFilter(names=(name.strip(),))


def build_multi_document_filter(names: Iterable[str]) -> DocumentFilter | None:
    """A filter for documents matching any of ``names``; ``None`` when no name is given."""
    given = as_list(names, "names")
    cleaned = tuple(dict.fromkeys(n.strip() for n in given if n and n.strip()))
    return DocumentFilter(names=cleaned) if cleaned else None


def get_session_filter(context: ToolContext | None, base_filter: FilterLike | None = None) -> Filter | None:
    """``base_filter`` combined with the session's document filter (the user's choice in the UI)."""
    session = context.get(SESSION_NAMESPACE, SessionState) if context is not None else None
    chosen = build_multi_document_filter(session.document_filter) if session is not None else None
    return combine_filters(base_filter, chosen)
