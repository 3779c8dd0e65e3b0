"""The document toolset: list documents, read one, summarise one."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic_ai import Agent, FunctionToolset, RunContext
from pydantic_ai.models import Model

from ..config import RagConfig
from ..extractive import extractive_summary
from ..filters import get_session_filter
from ..kb import FilterLike, as_filter
from ..models import model_run_options
from ..progress import report_progress
from ._common import deps_of

__all__ = ["DocumentContent", "DocumentInfo", "DocumentList", "create_document_toolset"]

PAGE_SIZE = 50
MAX_CONTENT_CHARS = 20_000


class DocumentInfo(BaseModel):
    """A listed document. ``document_id`` names it where its ``uri`` (a display source) may not:
    another document may show as the same one (``rag_tools.readable.DocumentNames``)."""

    document_id: str
    title: str
    uri: str
    chunks: int


class DocumentList(BaseModel):
    """One page of the documents the session can see."""

    documents: list[DocumentInfo]
    page: int
    pages: int
    total: int
    has_next: bool


class DocumentContent(BaseModel):
    """A document's text (possibly cut), or ``found=False``; ``document_id`` as in ``DocumentInfo``."""

    found: bool
    document_id: str | None = None
    title: str | None = None
    uri: str | None = None
    content: str | None = None
    truncated: bool = False
    summary: str | None = None


def create_document_toolset(
    config: RagConfig, base_filter: FilterLike | None = None, *, model: Model | str | None = None
) -> FunctionToolset[Any]:
    """``list_documents(page)``, ``get_document(query)`` and ``summarize_document(query)``.

    Lookup is by exact uri, then partial uri, then partial title. Summaries come from ``model``
    (default ``config.model``); with no model configured they are extractive.
    """
    base_filter = as_filter(base_filter)  # a bad one fails here, not at the model's first call
    toolset: FunctionToolset[Any] = FunctionToolset(id="rag-documents")
    summary_model = model if model is not None else config.model

    @toolset.tool
    async def list_documents(ctx: RunContext[Any], page: int = 1) -> DocumentList:
        """List the available documents, 50 per page.

        Args:
            page: Which page of the listing (from 1).
        """
        deps = deps_of(ctx)
        listing = await deps.client.list_documents(
            page=max(1, page), page_size=PAGE_SIZE, filter=get_session_filter(deps.tool_context, base_filter)
        )
        return DocumentList(
            documents=[
                DocumentInfo(document_id=d.document_id, title=d.title, uri=d.uri, chunks=d.chunk_count)
                for d in listing.documents
            ],
            page=listing.page,
            pages=listing.pages,
            total=listing.total,
            has_next=listing.has_next,
        )

    async def _find(ctx: RunContext[Any], query: str) -> DocumentContent:
        deps = deps_of(ctx)
        doc = await deps.client.get_document(query, filter=get_session_filter(deps.tool_context, base_filter))
        if doc is None or doc.content is None:
            return DocumentContent(found=False)
        content = doc.content
        return DocumentContent(
            found=True,
            document_id=doc.document_id,
            title=doc.title,
            uri=doc.uri,
            content=content[:MAX_CONTENT_CHARS],
            truncated=len(content) > MAX_CONTENT_CHARS,
        )

    @toolset.tool
    async def get_document(ctx: RunContext[Any], query: str) -> DocumentContent:
        """Read a document by its uri or (part of) its title.

        Args:
            query: An exact uri, part of a uri, or part of a title.
        """
        return await _find(ctx, query)

    @toolset.tool
    async def summarize_document(ctx: RunContext[Any], query: str) -> DocumentContent:
        """Summarise a document found by uri or (part of) its title.

        Args:
            query: An exact uri, part of a uri, or part of a title.
        """
        found = await _find(ctx, query)
        if not found.found or not found.content:
            return found
        await report_progress(ctx, f"Summarising “{found.title}”")
        if summary_model is None:
            summary = await extractive_summary(deps_of(ctx).client.embedding_model, found.content)
        else:
            agent = Agent(summary_model, instructions="Summarise the document in at most 6 sentences.")
            summary = (await agent.run(found.content, **model_run_options(ctx.deps, ctx))).output
        return found.model_copy(update={"content": None, "summary": summary})

    return toolset
