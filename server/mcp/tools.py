"""The MCP tools over the knowledge base, and who may call them.

Every tool calls the knowledge-base API the agent's toolsets call (``KnowledgeBase.search``,
``list_documents``, ``get_document``, ``get_chunks``, ``run_qa_core``) through the caller's view of
the knowledge base (``access.reader_of``, applied inside each query), so an MCP client sees exactly
the documents the same caller sees through ``/agui``: 0 passages, documents or citations of one it
may not read. Writes (``ingest_document``, ``delete_document``) exist only when allowed, and then
follow the HTTP API's editor rule (``access.check_document_change``).

Who calls: on HTTP, the principal the sign-in schemes made of the request's bearer token (the app's
authentication middleware, ``ragstream.auth``, signed it in before the request reached MCP); on stdio,
the ``operator`` the command was started as: by default the local operator, who owns the data
directory and so reads every document and is an editor (as ``ragstream search`` and ``ingest``), or
the principal of a token given with ``--token``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import datetime
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field
from pydantic_ai.models import Model

from rag_tools.filters import build_multi_document_filter
from rag_tools.kb import (
    QUERY_CHARS,
    Document,
    DocumentFilter,
    KnowledgeBase,
    SearchHit,
)
from rag_tools.kb.access import Reader, check_groups
from rag_tools.kb.sources import bytes_source
from rag_tools.kb_toolsets import documents as documents_toolset
from rag_tools.kb_toolsets import run_qa_core
from rag_tools.kb_toolsets.documents import MAX_CONTENT_CHARS, PAGE_SIZE
from rag_tools.state import SESSION_NAMESPACE, SessionState, ToolContext, prepare_context

from ..access import DocumentNotFound, check_document_change, reader_of
from ..auth import LOCAL_PRINCIPAL, Principal
from ..config import AppConfig
from ..errors import answer_for

__all__ = [
    "Answer",
    "AnswerCitation",
    "DocumentInfo",
    "DocumentList",
    "DocumentText",
    "KnowledgeBaseTools",
    "Passage",
    "SearchResults",
    "WriteOutcome",
]

#: Most passages one search returns (the agent's search tool takes as many).
MAX_SEARCH_LIMIT = 20
MAX_PAGE_SIZE = 200
MAX_DOCUMENT_NAMES = 20

_READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
_WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True)
_DELETE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True)


class Passage(BaseModel):
    """A passage of a document: ``document_id`` and ``passage_id`` cite it (``read_document``)."""

    document_id: str
    passage_id: str
    title: str
    uri: str
    location: str | None = Field(default=None, description="Heading path and page, slide or rows.")
    page: int | None = None
    text: str
    context: str | None = Field(default=None, description="The passage with its neighbouring text.")
    score: float | None = None


class SearchResults(BaseModel):
    """The passages a search found, best first."""

    query: str
    passages: list[Passage]


class DocumentInfo(documents_toolset.DocumentInfo):
    """A document as the agent's ``list_documents`` lists it, with its format, when it last changed
    and who may read it (``groups``; ``[]``: everyone)."""

    format: str
    updated_at: datetime
    groups: list[str]


class DocumentList(documents_toolset.DocumentList):
    """One page of the documents the caller may read."""

    documents: list[DocumentInfo]  # type: ignore[assignment]


class DocumentText(BaseModel):
    """A document's text from ``offset`` (``next_offset``: where the rest starts), or one passage of
    it with the ids of the passages before and after."""

    document: DocumentInfo
    content: str | None = None
    offset: int = 0
    next_offset: int | None = None
    passage: Passage | None = None
    previous_passage_id: str | None = None
    next_passage_id: str | None = None


class AnswerCitation(BaseModel):
    """A passage an answer cites as ``[index]``."""

    index: int
    document_id: str
    passage_id: str | None
    title: str
    uri: str
    location: str | None = None
    text: str


class Answer(BaseModel):
    """An answer from the documents, citing passages as ``[n]``."""

    question: str
    answer: str
    confidence: float
    citations: list[AnswerCitation]


class WriteOutcome(BaseModel):
    """What an ingest or a delete did."""

    status: str
    document_id: str | None = None
    title: str | None = None
    chunks: int = 0


def _info(document: Document) -> DocumentInfo:
    return DocumentInfo(
        document_id=document.document_id,
        title=document.title,
        uri=document.uri,
        format=document.format,
        chunks=document.chunk_count,
        updated_at=document.updated_at,
        groups=document.groups,
    )


def _passage(hit: SearchHit, *, score: bool = True) -> Passage:
    return Passage(
        document_id=hit.document_id,
        passage_id=hit.chunk_id,
        title=hit.title,
        uri=hit.uri,
        location=hit.location or None,
        page=hit.page,
        text=hit.text,
        context=hit.context if hit.context and hit.context != hit.text else None,
        score=round(hit.score, 4) if score else None,
    )


@contextlib.contextmanager
def _tool_errors() -> Iterator[None]:
    """Domain errors become the tool's error result with the message the HTTP API gives them
    (``errors.answer_for``); anything else stays the SDK's generic one, its text never shown."""
    try:
        yield
    except ToolError:
        raise
    except Exception as exc:
        answer = answer_for(exc)
        if answer is None:
            if isinstance(exc, ValueError | TypeError):  # a bad argument the knowledge base named
                raise ToolError(str(exc)) from exc
            raise
        raise ToolError(f"{answer.code}: {answer.message}") from exc


class KnowledgeBaseTools:
    """The tools, bound to a knowledge base (``kb``, set once it is open) and the configuration.

    ``operator`` is the caller of requests that carry no HTTP request (stdio): ``None`` for the
    local operator (every document, an editor), or a signed-in principal. ``model`` answers ``ask``
    (default ``config.model``; unset: the offline extractive answer).
    """

    def __init__(
        self,
        config: AppConfig,
        *,
        allow_writes: bool = False,
        operator: Principal | None = None,
        model: Model | str | None = None,
    ) -> None:
        self.config = config
        self.allow_writes = allow_writes
        self.operator = operator
        self.model = model if model is not None else config.model
        self.kb: KnowledgeBase | None = None

    def register(self, server: MCPServer) -> None:
        """Add the tools to ``server``: the read tools always, the writes only when allowed."""
        server.add_tool(self.search, annotations=_READ)
        server.add_tool(self.list_documents, annotations=_READ)
        server.add_tool(self.read_document, annotations=_READ)
        server.add_tool(self.ask, annotations=_READ)
        if self.allow_writes:
            server.add_tool(self.ingest_document, annotations=_WRITE)
            server.add_tool(self.delete_document, annotations=_DELETE)

    # -- who calls -----------------------------------------------------------------------------

    def _caller(self, ctx: Context) -> tuple[Principal, bool]:
        """The caller and whether it signed in (the local operator did not: no rule restricts it)."""
        request = ctx.request_context.request
        if request is None:  # stdio: the operator the command runs as
            if self.operator is None:
                return Principal(LOCAL_PRINCIPAL), False
            return self.operator, True
        user = getattr(request, "scope", {}).get("user")
        if not isinstance(user, Principal):  # served without the sign-in middleware: fail closed
            raise ToolError("not signed in")
        return user, True

    def _base(self) -> KnowledgeBase:
        if self.kb is None:
            raise ToolError("the knowledge base is not open yet; retry shortly")
        return self.kb

    def _sign_in_required(self, signed_in: bool) -> bool:
        return signed_in and self.config.sign_in_required

    def _view(self, ctx: Context) -> KnowledgeBase:
        """The knowledge base as the caller may read it."""
        principal, signed_in = self._caller(ctx)
        reader: Reader = reader_of(
            principal.name,
            principal.groups,
            editors=self.config.editors,
            sign_in_required=self._sign_in_required(signed_in),
        )
        return self._base().restricted(reader)

    async def _find(self, kb: KnowledgeBase, document: str) -> Document:
        """A readable document by id, else by exact uri, partial uri or partial title."""
        found = await kb.get_document_by_id(document, with_content=True) or await kb.get_document(document)
        if found is None:
            raise DocumentNotFound(document)
        return found

    # -- read tools ----------------------------------------------------------------------------

    async def search(
        self,
        ctx: Context,
        query: Annotated[str, Field(min_length=1, max_length=QUERY_CHARS, description="What to look for.")],
        limit: Annotated[
            int | None, Field(ge=1, le=MAX_SEARCH_LIMIT, description="How many passages (default 5).")
        ] = None,
        mode: Annotated[
            Literal["hybrid", "vector", "text"] | None,
            Field(description="hybrid (default): meaning and keywords; vector: meaning; text: keywords."),
        ] = None,
        documents: Annotated[
            list[str] | None,
            Field(
                max_length=MAX_DOCUMENT_NAMES,
                description="Search only documents whose title or uri contains one of these names.",
            ),
        ] = None,
    ) -> SearchResults:
        """Search the knowledge base for passages relevant to a query.

        Each passage names its document (document_id) and itself (passage_id); read_document reads
        either in full.
        """
        with _tool_errors():
            hits = await self._view(ctx).search(
                query,
                limit=limit or self.config.search_limit,
                mode=mode or self.config.search_mode,
                filter=build_multi_document_filter(documents or []),
                context_chars=self.config.context_chars,
            )
        return SearchResults(query=query, passages=[_passage(hit) for hit in hits])

    async def list_documents(
        self,
        ctx: Context,
        query: Annotated[
            str | None,
            Field(max_length=500, description="Only documents whose title or uri contains this."),
        ] = None,
        page: Annotated[int, Field(ge=1, le=10**6, description="Which page, from 1.")] = 1,
        page_size: Annotated[
            int, Field(ge=1, le=MAX_PAGE_SIZE, description="Documents per page.")
        ] = PAGE_SIZE,
    ) -> DocumentList:
        """List or find the documents of the knowledge base, by title then uri, a page at a time."""
        with _tool_errors():
            restriction = DocumentFilter(names=(query.strip(),)) if query and query.strip() else None
            listing = await self._view(ctx).list_documents(page=page, page_size=page_size, filter=restriction)
        return DocumentList(
            documents=[_info(d) for d in listing.documents],
            page=listing.page,
            pages=listing.pages,
            total=listing.total,
            has_next=listing.has_next,
        )

    async def read_document(
        self,
        ctx: Context,
        document: Annotated[
            str,
            Field(
                min_length=1,
                max_length=500,
                description="A document_id, or the document's uri (or part of its uri or title).",
            ),
        ],
        passage_id: Annotated[
            str | None, Field(max_length=500, description="Read only this passage (a search's passage_id).")
        ] = None,
        offset: Annotated[int, Field(ge=0, description="Where to start reading the text.")] = 0,
        max_chars: Annotated[
            int, Field(ge=1, le=MAX_CONTENT_CHARS, description="Most characters to return.")
        ] = MAX_CONTENT_CHARS,
    ) -> DocumentText:
        """Read a document, or one passage of it by citation (document_id and passage_id)."""
        with _tool_errors():
            kb = self._view(ctx)
            found = await self._find(kb, document)
            if passage_id is not None:
                chunks = await kb.get_chunks(found.document_id)
                at = next((i for i, c in enumerate(chunks) if c.chunk_id == passage_id), None)
                if at is None:
                    raise ToolError(f"document {found.document_id!r} has no passage {passage_id!r}")
                return DocumentText(
                    document=_info(found),
                    passage=_passage(chunks[at], score=False),
                    previous_passage_id=chunks[at - 1].chunk_id if at > 0 else None,
                    next_passage_id=chunks[at + 1].chunk_id if at + 1 < len(chunks) else None,
                )
        content = found.content or ""
        end = offset + max_chars
        return DocumentText(
            document=_info(found),
            content=content[offset:end],
            offset=offset,
            next_offset=end if end < len(content) else None,
        )

    async def ask(
        self,
        ctx: Context,
        question: Annotated[str, Field(min_length=1, max_length=QUERY_CHARS, description="The question.")],
        document: Annotated[
            str | None,
            Field(max_length=500, description="Answer from this document only (part of its title or uri)."),
        ] = None,
    ) -> Answer:
        """Answer a question from the documents, citing the passages it rests on as [n]."""
        context = prepare_context(ToolContext(), ["qa"])
        with _tool_errors():
            result = await run_qa_core(
                client=self._view(ctx),
                config=self.config,
                question=question,
                document_name=(document or "").strip() or None,
                context=context,
                model=self.model,
            )
        session = context.get_or_create(SESSION_NAMESPACE, SessionState)
        passages = {index: chunk for chunk, index in session.citation_registry.items()}
        return Answer(
            question=result.question,
            answer=result.answer,
            confidence=result.confidence,
            citations=[
                AnswerCitation(
                    index=c.index,
                    document_id=c.document_id,
                    passage_id=passages.get(c.index),
                    title=c.document_title,
                    uri=c.uri,
                    location=", ".join([*c.headings, *([c.locator] if c.locator else [])]) or None,
                    text=c.passage,
                )
                for c in result.citations
            ],
        )

    # -- writes (allowed with --allow-writes / RAGSTREAM_MCP_ALLOW_WRITES, for editors) --------

    async def _check(self, ctx: Context, document_id: str, *, new: Any, must_exist: bool) -> Document | None:
        principal, signed_in = self._caller(ctx)
        return await check_document_change(
            self._base(),
            principal.name,
            principal.groups,
            document_id,
            new=new,
            must_exist=must_exist,
            editors=self.config.editors,
            editor_groups=self.config.editor_groups,
            sign_in_required=self._sign_in_required(signed_in),
        )

    async def ingest_document(
        self,
        ctx: Context,
        name: Annotated[
            str,
            Field(
                min_length=1,
                max_length=255,
                description="A file name whose suffix gives the format: notes.md, page.html, a.txt.",
            ),
        ],
        content: Annotated[str, Field(min_length=1, description="The document's text.")],
        uri: Annotated[
            str | None, Field(max_length=2000, description="Where it comes from (shown as its source).")
        ] = None,
        title: Annotated[str | None, Field(max_length=500)] = None,
        groups: Annotated[
            list[str] | None,
            Field(description="Only these groups may read it ([]: everyone; unset: a known one keeps its)."),
        ] = None,
    ) -> WriteOutcome:
        """Add a document to the knowledge base, or replace the one of the same name or uri (editors only)."""
        with _tool_errors():
            checked = None if groups is None else check_groups(groups)
            data = content.encode()
            document_id = bytes_source(data, name=name, uri=uri, title=title).document_id
            try:
                await self._check(ctx, document_id, new=checked, must_exist=False)
            except DocumentNotFound:  # held by a document the caller may not read: say no more
                raise ToolError(
                    f"the name {uri or name!r} is taken by a document you may not change; use another"
                ) from None
            outcome = await self._base().ingest_bytes(data, name=name, uri=uri, title=title, groups=checked)
        if outcome.status == "error":
            raise ToolError(f"{name} could not be ingested: {outcome.error}")
        return WriteOutcome(
            status=outcome.status, document_id=outcome.document_id, title=outcome.title, chunks=outcome.chunks
        )

    async def delete_document(
        self,
        ctx: Context,
        document_id: Annotated[
            str, Field(min_length=1, max_length=200, description="The document's document_id.")
        ],
    ) -> WriteOutcome:
        """Remove a document from the knowledge base: its passages, original file and listing (editors only)."""
        with _tool_errors():
            checked = await self._check(ctx, document_id, new=None, must_exist=True)
            if not await self._base().delete_document(document_id, expected=checked):
                raise DocumentNotFound(document_id)  # deleted meanwhile
        return WriteOutcome(status="deleted", document_id=document_id)
