"""The knowledge base and the thread store as the server uses them, with spans and metrics.

``ObservedKnowledgeBase`` times every search (``ragstream_search_duration_seconds`` by mode) and
traces searches and uploads' ingestion; ``ObservedThreadStore`` traces loads and saves and counts
failed operations (``ragstream_thread_store_errors_total``). Both change nothing else: the server
picks them when metrics or traces are on, the plain classes otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import Any, TypeVar

from rag_tools.config import SearchMode
from rag_tools.kb import IngestOutcome, KnowledgeBase, SearchHit
from rag_tools.state import (
    ListPosition,
    StoreError,
    ThreadInfo,
    ThreadRecord,
    ThreadStore,
    VersionConflictError,
)

from . import metrics, tracing
from .outages import outage

THREAD_STORE = outage("the thread store")

__all__ = ["ObservedKnowledgeBase", "ObservedThreadStore"]

T = TypeVar("T")


class ObservedKnowledgeBase(KnowledgeBase):
    """A ``KnowledgeBase`` whose searches are timed and traced and whose uploads are traced."""

    count_metrics: bool = True

    # Options pass through as they are, so these follow ``KnowledgeBase``'s signatures as they grow.

    async def search(self, query: str, **options: Any) -> list[SearchHit]:
        mode: SearchMode = options.get("mode", "hybrid")
        started = time.perf_counter()
        with tracing.span(
            "kb.search", **{"ragstream.search.mode": mode, "ragstream.search.limit": options.get("limit", 5)}
        ) as span:
            hits = await super().search(query, **options)
            if span is not None:
                span.set_attribute("ragstream.search.hits", len(hits))
        if self.count_metrics:
            metrics.SEARCH_DURATION.labels(mode).observe(time.perf_counter() - started)
        return hits

    async def ingest_bytes(self, data: bytes, *, name: str, **options: Any) -> IngestOutcome:
        with tracing.span(
            "kb.ingest", **{"ragstream.document.name": name, "ragstream.bytes": len(data)}
        ) as span:
            outcome = await super().ingest_bytes(data, name=name, **options)
            if span is not None:
                span.set_attribute("ragstream.ingest.status", outcome.status)
                span.set_attribute("ragstream.ingest.chunks", outcome.chunks)
        return outcome


class ObservedThreadStore(ThreadStore):
    """Another ``ThreadStore`` with a span per load and save and a count of failed operations."""

    #: The operations counted: each has its series from the start, at 0, so a rate over a window
    #: with no error yet is 0 rather than no data.
    OPERATIONS = ("open", "load", "save", "version", "delete", "list")

    def __init__(self, inner: ThreadStore, *, count_metrics: bool = True) -> None:
        self.inner = inner
        self.shared = inner.shared
        self.count_metrics = count_metrics
        if count_metrics:
            for operation in self.OPERATIONS:
                metrics.STORE_ERRORS.labels(operation)

    async def _call(self, operation: str, call: Awaitable[T]) -> T:
        try:
            result = await call
        except Exception as exc:
            if self.count_metrics:
                metrics.STORE_ERRORS.labels(operation).inc()
            if isinstance(exc, StoreError) and not isinstance(exc, VersionConflictError):
                THREAD_STORE.failed(exc)
            raise
        THREAD_STORE.recovered()
        return result

    async def load(self, thread_id: str) -> ThreadRecord | None:
        with tracing.span("thread_store.load", **{"ragstream.thread_id": thread_id}):
            return await self._call("load", self.inner.load(thread_id))

    async def save(self, record: ThreadRecord) -> ThreadRecord:
        with tracing.span("thread_store.save", **{"ragstream.thread_id": record.thread_id}):
            return await self._call("save", self.inner.save(record))

    async def version(self, thread_id: str) -> int | None:
        return await self._call("version", self.inner.version(thread_id))

    async def delete(self, thread_id: str) -> bool:
        with tracing.span("thread_store.delete", **{"ragstream.thread_id": thread_id}):
            return await self._call("delete", self.inner.delete(thread_id))

    async def list_threads(
        self, owner: str | None, *, limit: int = 100, after: ListPosition | None = None
    ) -> list[ThreadInfo]:
        return await self._call("list", self.inner.list_threads(owner, limit=limit, after=after))

    async def open(self) -> None:
        await self._call("open", self.inner.open())

    async def close(self) -> None:
        await self.inner.close()
