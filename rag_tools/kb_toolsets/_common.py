"""Helpers shared by the toolsets: reaching the deps, citing hits, describing where a hit is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field
from pydantic_ai import ModelRetry, RunContext

from ..arguments import NAME_CHARS
from ..config import RagConfig
from ..deps import CITATIONS_CAPABILITY_ID, RAGDeps
from ..kb import KnowledgeBase, SearchHit
from ..state import FEATURE_NAMESPACES, SESSION_NAMESPACE, SessionState, ToolContext, prepare_context

__all__ = [
    "SearchResult",
    "ToolDeps",
    "cite_hits",
    "deps_of",
    "document_name_argument",
    "location_of",
    "shows_cards_at_once",
]


@dataclass
class ToolDeps:
    """The run's deps as the tools use them: a knowledge base and a context (never ``None``)."""

    client: KnowledgeBase
    tool_context: ToolContext
    deps: Any


def deps_of(ctx: RunContext[Any]) -> ToolDeps:
    """The run's deps (anything satisfying ``RAGDeps``); a clear error when they do not.

    Deps with ``tool_context=None`` get a fresh context for the call: the tools work, nothing is kept.
    """
    deps = ctx.deps
    if not isinstance(deps, RAGDeps) or not isinstance(deps.client, KnowledgeBase):
        raise TypeError(
            "rag_tools toolsets need deps with `client` (a KnowledgeBase) and `tool_context` "
            f"(the RAGDeps protocol, e.g. AgentDeps), got {type(deps).__name__}"
        )
    context = deps.tool_context
    if context is None:
        context = prepare_context(ToolContext(), FEATURE_NAMESPACES)
    elif not isinstance(context, ToolContext):
        raise TypeError(f"deps.tool_context must be a ToolContext or None, got {type(context).__name__}")
    return ToolDeps(deps.client, context, deps)


def document_name_argument(name: str | None) -> str | None:
    """A model's ``document_name`` argument: stripped, ``None`` when blank (no restriction).

    A name no filter can take is a ``ModelRetry`` saying why, so the model asks again rather than
    the run failing on its argument.
    """
    name = (name or "").strip()
    if len(name) > NAME_CHARS:
        raise ModelRetry(
            f"document_name is {len(name)} characters long; give part of a title in at most {NAME_CHARS}"
        )
    return name or None


def shows_cards_at_once(ctx: RunContext[Any]) -> bool:
    """Whether a search shows its hits' cards now: yes, unless ``citation_hooks`` shows the cited ones."""
    return CITATIONS_CAPABILITY_ID not in ctx.capabilities


def kb_of(ctx: RunContext[Any]) -> KnowledgeBase:
    return deps_of(ctx).client


def location_of(hit: SearchHit) -> str | None:
    """Where a hit sits in its document: its heading path and locator (page, slide, sheet rows)."""
    return hit.location or None


class SearchResult(BaseModel):
    """A passage as the model sees it: cite it as ``[citation]``.

    ``document_id`` names its document where the number cannot: the number is the thread's (and
    its branch's), while a run's replayed events are checked for their reader without the thread
    (``rag_tools.readable.DocumentNames``).
    """

    citation: int
    document_id: str
    title: str
    uri: str
    location: str | None = None
    text: str
    context: str | None = Field(
        default=None, description="The passage with its neighbouring text, when expanded."
    )
    score: float


def cite_hits(
    context: ToolContext, hits: list[SearchHit], config: RagConfig, *, show: bool = False
) -> list[SearchResult]:
    """Give each hit its stable citation number in the session and return them model-ready.

    With ``show`` the cards are shown at once; otherwise they stay server-side until an answer
    cites them (``SessionState.promote``).
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
            locator=hit.locator,
            limit=config.citations_limit,
            promote=show,
        )
        results.append(
            SearchResult(
                citation=index,
                document_id=hit.document_id,
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
