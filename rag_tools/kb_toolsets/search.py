"""The search toolset: hybrid search over the knowledge base with stable citation numbers."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field
from pydantic_ai import FunctionToolset, RunContext

from ..config import RagConfig
from ..deps import emit_state_update
from ..filters import build_multi_document_filter, combine_filters, get_session_filter
from ..kb import FilterLike, as_filter, searchable_query
from ..kb.reranking import counting_usage
from ..progress import report_progress
from ..state import SEARCH_NAMESPACE, SESSION_NAMESPACE, SearchHitSummary, SearchState, SessionState
from ._common import SearchResult, cite_hits, deps_of, shows_cards_at_once

__all__ = ["SearchResults", "create_search_toolset"]


class SearchResults(BaseModel):
    """What ``search`` returns to the model."""

    query: str
    documents: list[str] = Field(
        default_factory=list, description="Document names the search was limited to."
    )
    results: list[SearchResult]
    note: str | None = None


def create_search_toolset(
    config: RagConfig,
    expand_context: bool = True,
    base_filter: FilterLike | None = None,
    tool_name: str = "search",
) -> FunctionToolset[Any]:
    """A toolset with one tool, ``search(query, limit?, filter?)``.

    Results carry citation numbers that stay the same for a chunk for the life of the thread (of
    its branch, where the server keeps the state per branch), and
    each search is recorded in the thread's ``SearchState`` (bounded by
    ``config.search_history_limit``). The session's document filter and ``base_filter`` always apply.
    """
    base_filter = as_filter(base_filter)  # a bad one fails here, not at the model's first call
    toolset: FunctionToolset[Any] = FunctionToolset(id=f"rag-{tool_name}")

    async def search(
        ctx: RunContext[Any],
        query: str,
        limit: int | None = None,
        filter: str | list[str] | None = None,
    ) -> SearchResults:
        """Search the documents for passages relevant to a query.

        Args:
            query: What to look for, in natural language or keywords.
            limit: How many passages to return (default from configuration, at most 20).
            filter: A document name, or a list of names, to search only those documents.
        """
        deps = deps_of(ctx)
        query = searchable_query(query)  # what is searched is what the result and the record say
        names = [filter] if isinstance(filter, str) else list(filter or [])
        session = deps.tool_context.get_or_create(SESSION_NAMESPACE, SessionState)
        scope = list(dict.fromkeys([*session.document_filter, *names]))
        restriction = combine_filters(
            get_session_filter(deps.tool_context, base_filter), build_multi_document_filter(names)
        )
        count = max(1, min(limit or config.search_limit, 20))
        await report_progress(ctx, f"Searching for “{query}”", done=0, total=1, data={"query": query})
        with counting_usage(ctx.usage):  # a model that reranks counts in this run
            hits = await deps.client.search(
                query,
                limit=count,
                mode=config.search_mode,
                filter=restriction,
                context_chars=config.context_chars if expand_context else 0,
            )
        results = cite_hits(deps.tool_context, hits, config, show=shows_cards_at_once(ctx))
        searches = deps.tool_context.get_or_create(SEARCH_NAMESPACE, SearchState)
        searches.add_search(
            query,
            [
                SearchHitSummary(
                    citation=r.citation,
                    document_id=h.document_id,
                    title=h.title,
                    uri=h.uri,
                    score=r.score,
                    page=h.page,
                    headings=tuple(h.headings),
                )
                for r, h in zip(results, hits, strict=True)
            ],
            documents=scope,
            limit=config.search_history_limit,
        )
        deps.tool_context.mark_changed(SEARCH_NAMESPACE)
        found = f"Found {len(results)} passage{'' if len(results) == 1 else 's'}"
        await report_progress(ctx, found, done=1, total=1, data={"query": query})
        await emit_state_update(ctx)
        note = None if results else "No passages matched. Say so plainly rather than guessing."
        return SearchResults(query=query, documents=scope, results=results, note=note)

    toolset.add_function(search, name=tool_name)
    return toolset
