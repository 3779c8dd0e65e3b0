"""Ingestion as a pipeline: parsing, embedding and writing overlap, with bounded queues between them.

Three asyncio stages run at once:

1. prepare: one worker thread reads, checks, parses and chunks the sources in order
   (``ingestion.prepare``); it stops while ``PREPARED_AHEAD_CHUNKS`` chunks wait for the embedder
   (a larger document is still let through when nothing waits).
2. embed: chunk texts go to the embedder in batches of ``EMBED_BATCH``, filled across documents
   so that many small files still make full batches; a batch never waits for more input while
   the embedder would idle. A failed batch is retried document by document, so one bad document
   fails alone.
3. write: embedded documents are committed together once ``WRITE_BATCH_CHUNKS`` chunks wait, or
   ``FLUSH_SECONDS`` after the oldest of them arrived, or at the end; a document is never split
   across two commits.

Progress is reported per embedded batch and per file outcome, from the event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

from .ingestion import Known, PreparedDocument, prepare
from .models import IngestOutcome, IngestProgress
from .sources import Source

__all__ = ["EMBED_BATCH", "FLUSH_SECONDS", "PREPARED_AHEAD_CHUNKS", "WRITE_BATCH_CHUNKS", "run_pipeline"]

EMBED_BATCH = 32
PREPARED_AHEAD_CHUNKS = 256
WRITE_BATCH_CHUNKS = 2000
FLUSH_SECONDS = 2.0
_EMBEDDED_AHEAD = 256

Embed = Callable[[list[str]], Awaitable[list[list[float]]]]
Write = Callable[[list[PreparedDocument]], Awaitable[None]]
_Item = tuple[int, PreparedDocument]


class _Ahead:
    """How many prepared chunks wait for the embedder; ``admit`` waits while that is over the limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0
        self._changed = asyncio.Condition()

    async def admit(self, doc: PreparedDocument) -> None:
        size = _weight(doc)
        async with self._changed:
            await self._changed.wait_for(lambda: self.count == 0 or self.count + size <= self.limit)
            self.count += size

    async def release(self, doc: PreparedDocument) -> None:
        async with self._changed:
            self.count -= _weight(doc)
            self._changed.notify_all()


def _weight(doc: PreparedDocument) -> int:
    return max(1, len(doc.chunk_rows))


class _Run:
    """Outcomes in source order, and the progress snapshot sent to the caller."""

    def __init__(self, total: int, on_progress: Callable[[IngestProgress], None] | None) -> None:
        self.outcomes: list[IngestOutcome | None] = [None] * total
        self.progress = IngestProgress(files_total=total)
        self._on_progress = on_progress

    def emit(self, outcome: IngestOutcome | None = None) -> None:
        if self._on_progress is not None:
            self._on_progress(self.progress.model_copy(update={"outcome": outcome}))

    def finish(self, index: int, outcome: IngestOutcome) -> None:
        self.outcomes[index] = outcome
        self.progress.files_done += 1
        self.emit(outcome)


async def run_pipeline(
    sources: Sequence[Source | IngestOutcome],
    *,
    known: dict[str, Known],
    max_chars: int,
    embed: Embed,
    write: Write,
    on_progress: Callable[[IngestProgress], None] | None = None,
) -> list[IngestOutcome]:
    """Ingest ``sources`` (outcomes in place are problems found while planning); outcomes in order."""
    run = _Run(len(sources), on_progress)
    todo: list[tuple[int, Source]] = []
    for index, source in enumerate(sources):
        if isinstance(source, IngestOutcome):
            run.finish(index, source)  # reported before any work starts
        else:
            todo.append((index, source))
    prepared: asyncio.Queue[_Item | None] = asyncio.Queue()  # bounded by ``ahead``
    embedded: asyncio.Queue[_Item | None] = asyncio.Queue(_EMBEDDED_AHEAD)
    ahead = _Ahead(PREPARED_AHEAD_CHUNKS)
    tasks = [
        asyncio.create_task(_prepare_stage(todo, known, max_chars, prepared, ahead, run)),
        asyncio.create_task(_embed_stage(prepared, embedded, ahead, embed, run)),
        asyncio.create_task(_write_stage(embedded, write, run)),
    ]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return [outcome for outcome in run.outcomes if outcome is not None]


async def _prepare_stage(
    todo: list[tuple[int, Source]],
    known: dict[str, Known],
    max_chars: int,
    out: asyncio.Queue[_Item | None],
    ahead: _Ahead,
    run: _Run,
) -> None:
    for index, source in todo:
        result = await asyncio.to_thread(prepare, source, known.get(source.document_id), max_chars=max_chars)
        if isinstance(result, IngestOutcome):
            run.finish(index, result)
            continue
        run.progress.chunks_total += len(result.chunk_rows)
        run.emit()
        await ahead.admit(result)
        await out.put((index, result))
    run.progress.chunks_total_final = True
    run.emit()
    await out.put(None)


async def _embed_stage(
    inbox: asyncio.Queue[_Item | None],
    out: asyncio.Queue[_Item | None],
    ahead: _Ahead,
    embed: Embed,
    run: _Run,
) -> None:
    waiting: deque[_Item] = deque()  # documents whose chunks are not all embedded, in order
    queued = 0  # chunks in ``waiting`` still to embed
    ended = False
    while True:
        while not ended and queued < EMBED_BATCH:
            if queued == 0 and not waiting:
                item = await inbox.get()
            else:
                try:
                    item = inbox.get_nowait()
                except asyncio.QueueEmpty:
                    break  # embed what there is rather than let the embedder idle
            if item is None:
                ended = True
            else:
                waiting.append(item)
                queued += len(item[1].chunk_rows)
        while waiting and waiting[0][1].embedded:
            await ahead.release(waiting[0][1])
            await out.put(waiting.popleft())
        if not waiting:
            if ended:
                break
            continue
        segments = _take(waiting, EMBED_BATCH)
        texts = [text for doc, start, stop in segments for text in doc.texts[start:stop]]
        try:
            vectors = await embed(texts)
        except Exception:
            vectors = None
        if vectors is not None:
            offset = 0
            for doc, start, stop in segments:
                doc.vectors.extend(vectors[offset : offset + stop - start])
                offset += stop - start
        else:
            for doc, start, stop in segments:
                try:
                    doc.vectors.extend(await embed(doc.texts[start:stop]))
                except Exception as exc:
                    failed = next(item for item in waiting if item[1] is doc)
                    waiting.remove(failed)
                    await ahead.release(doc)
                    queued -= len(doc.chunk_rows) - start
                    run.progress.chunks_total -= len(doc.chunk_rows)
                    run.progress.chunks_done -= start
                    run.finish(failed[0], _failure(doc, f"embedding failed: {exc}"))
                    continue
        done = sum(stop - start for doc, start, stop in segments if any(item[1] is doc for item in waiting))
        queued -= done
        run.progress.chunks_done += done
        run.emit()
    await out.put(None)


def _take(waiting: deque[_Item], size: int) -> list[tuple[PreparedDocument, int, int]]:
    """Up to ``size`` chunk positions still to embed, from the front documents: (doc, start, stop)."""
    segments: list[tuple[PreparedDocument, int, int]] = []
    for _, doc in waiting:
        start = len(doc.vectors)
        stop = min(len(doc.chunk_rows), start + size)
        if stop > start:
            segments.append((doc, start, stop))
            size -= stop - start
        if size == 0:
            break
    return segments


def _failure(doc: PreparedDocument, message: str) -> IngestOutcome:
    return IngestOutcome(source=doc.source.label, status="error", error=message)


async def _write_stage(inbox: asyncio.Queue[_Item | None], write: Write, run: _Run) -> None:
    pending: list[_Item] = []
    chunks = 0
    oldest = 0.0
    ended = False
    getter: asyncio.Task[_Item | None] | None = None
    try:
        while not ended:
            if getter is None:
                getter = asyncio.ensure_future(inbox.get())
            timeout = max(0.0, FLUSH_SECONDS - (time.monotonic() - oldest)) if pending else None
            done, _ = await asyncio.wait({getter}, timeout=timeout)
            if getter in done:
                item: _Item | None = getter.result()
                getter = None
                while True:
                    if item is None:
                        ended = True
                        break
                    if not pending:
                        oldest = time.monotonic()
                    pending.append(item)
                    chunks += len(item[1].chunk_rows)
                    try:
                        item = inbox.get_nowait()
                    except asyncio.QueueEmpty:
                        break
            due = time.monotonic() - oldest >= FLUSH_SECONDS
            if pending and (ended or due or chunks >= WRITE_BATCH_CHUNKS):
                await write([doc for _, doc in pending])
                for index, doc in pending:
                    run.finish(index, doc.outcome())
                pending, chunks = [], 0
    finally:
        if getter is not None:
            getter.cancel()
