"""Helpers shared by the toolsets: reaching the deps, citing hits, describing where a hit is."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field
from pydantic_ai import RunContext

from ..config import RagConfig
from ..deps import AgentDeps
from ..kb import KnowledgeBase, SearchHit
from ..state import SESSION_NAMESPACE, SessionState, ToolContext

__all__ = ["SearchResult", "cite_hits", "deps_of", "location_of"]


def deps_of(ctx: RunContext[Any]) -> AgentDeps:
    """The run's ``AgentDeps``; a clear error when the agent was given something else."""
    if not isinstance(ctx.deps, AgentDeps):
        raise TypeError(
            f"rag_tools toolsets need AgentDeps (or a subclass) as deps, got {type(ctx.deps).__name__}"
        )
    return ctx.deps


def kb_of(ctx: RunContext[Any]) -> KnowledgeBase:
    return deps_of(ctx).client


def location_of(hit: SearchHit) -> str | None:
    """Where a hit sits in its document: its heading path, or its page."""
    if hit.headings:
        return " > ".join(hit.headings)
    return f"page {hit.page}" if hit.page else None


class SearchResult(BaseModel):
    """A passage as the model sees it: cite it as ``[citation]``."""

    citation: int
    title: str
    uri: str
    location: str | None = None
    text: str
    context: str | None = Field(
        default=None, description="The passage with its neighbouring text, when expanded."
    )
    score: float


def cite_hits(context: ToolContext, hits: list[SearchHit], config: RagConfig) -> list[SearchResult]:
    """Give each hit its stable citation number in the session and return them model-ready.

    The cards stay server-side until an answer cites them (``SessionState.promote``).
    """
    session = context.get_or_create(SESSION_NAMESPACE, SessionState)
    results = []
    for hit in hits:
        index = session.cite(
            chunk_id=hit.chunk_id,
            document_id=hit.document_id,
            title=hit.title,
            uri=hit.uri,
            text=hit.text,
            headings=hit.headings,
            page=hit.page,
            limit=config.citations_limit,
            promote=False,
        )
        results.append(
            SearchResult(
                citation=index,
                title=hit.title,
                uri=hit.uri,
                location=location_of(hit),
                text=hit.text,
                context=hit.context if hit.context and hit.context != hit.text else None,
                score=round(hit.score, 4),
            )
        )
    if hits:
        context.mark_changed(SESSION_NAMESPACE)
    return results
