"""Ingestion as a pipeline: parsing, embedding and writing overlap, with bounded queues between them.

Three asyncio stages run at once:

1. prepare: one worker thread reads, checks, parses and chunks the sources in order
   (``ingestion.prepare``), a PDF ``PDF_PAGES_PER_STEP`` pages at a time so that its first pages
   are embedded while later ones parse. It pauses while ``PREPARED_AHEAD_CHUNKS`` chunks wait
   for the embedder (a larger step is still let through when nothing waits).
2. embed: chunk texts go to the embedder in batches of ``EMBED_BATCH``, filled across documents
   so that many small files still make full batches; a batch never waits for more input while
   the embedder would idle. A failed batch is retried document by document, so one bad document
   fails alone.
3. write: embedded documents are committed together once ``WRITE_BATCH_CHUNKS`` chunks wait, or
   ``FLUSH_SECONDS`` after the oldest of them arrived, or at the end; a document is published by
   one commit. A big document's chunks are committed ``PART_CHUNKS`` at a time as they are
   embedded, unpublished (invisible), so that memory is bounded by that, not by the file, and an
   interrupted ingest keeps them: the next one looks them up (``resume``) and embeds only the rest.

Progress is reported per embedded batch and per file outcome, from the event loop.

A run can be stopped (``stop`` returns true): each stage checks it before its next step (a
source, an embedding batch, a write), and what was not written by then ends ``cancelled``. A write
that has started finishes, so every document is written whole or not at all.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections.abc import Awaitable, Callable, Sequence

from pydantic_ai.embeddings import EmbeddingModel

from .documents import regroup
from .ingestion import (
    FILE_ERRORS,
    Known,
    PreparedDocument,
    file_failure,
    known_documents,
    prepare,
    stored_positions,
    write_batch,
)
from .models import IngestOutcome, IngestProgress
from .sources import Source
from .tables import Tables

__all__ = [
    "EMBED_BATCH",
    "FLUSH_SECONDS",
    "PART_CHUNKS",
    "PREPARED_AHEAD_CHUNKS",
    "WRITE_BATCH_CHUNKS",
    "ingest_sources",
    "run_pipeline",
]

EMBED_BATCH = 32
PART_CHUNKS = 1000
PREPARED_AHEAD_CHUNKS = 256
WRITE_BATCH_CHUNKS = 2000
FLUSH_SECONDS = 2.0
_EMBEDDED_AHEAD = 256
_PREPARE_STEP_SECONDS = 0.05

Embed = Callable[[list[str]], Awaitable[list[list[float]]]]
Write = Callable[[list[PreparedDocument]], Awaitable[None]]
Stop = Callable[[], bool]
Resume = Callable[[str, str], Awaitable[frozenset[int]]]
_Item = tuple[int, PreparedDocument]


class _Ahead:
    """How many parsed chunks wait for the embedder; ``admit`` waits while that is over the limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0
        self._changed = asyncio.Condition()

    async def admit(self, chunks: int) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: self.count == 0 or self.count + chunks <= self.limit)
            self.count += chunks

    async def release(self, chunks: int) -> None:
        async with self._changed:
            self.count -= chunks
            self._changed.notify_all()


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
    stop: Stop | None = None,
    resume: Resume | None = None,
    max_bytes: int | None = None,
) -> list[IngestOutcome]:
    """Ingest ``sources`` (outcomes in place are problems found while planning); outcomes in order.

    Once ``stop()`` is true, sources not written yet end ``cancelled``. ``resume(document_id,
    content_hash)`` gives the positions of a big document's chunks already committed; a file over
    ``max_bytes`` fails alone.
    """
    stopped = stop or _never
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
        asyncio.create_task(
            _prepare_stage(todo, known, (max_chars, max_bytes), prepared, ahead, run, stopped, resume)
        ),
        asyncio.create_task(_embed_stage(prepared, embedded, ahead, embed, write, run, stopped)),
        asyncio.create_task(_write_stage(embedded, write, run, stopped)),
    ]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return [outcome for outcome in run.outcomes if outcome is not None]


async def ingest_sources(
    tables: Tables,
    embedding_model: EmbeddingModel,
    sources: Sequence[Source | IngestOutcome],
    *,
    max_chars: int,
    embed_query: Callable[[str], Awaitable[list[float]]],
    on_progress: Callable[[IngestProgress], None] | None = None,
    stop: Stop | None = None,
    groups: tuple[str, ...] | None = None,
    max_bytes: int | None = None,
) -> list[IngestOutcome]:
    """``run_pipeline`` over a knowledge base's tables with its embedder; outcomes in order.

    ``groups`` replaces every source's groups; an unchanged document is not rewritten, only its
    groups change. ``embed_query`` gives the first write of a new knowledge base its dimension.
    A big document's chunks committed by an interrupted ingest are not embedded again
    (``stored_positions``); a file over ``max_bytes`` fails alone.
    """
    if groups is not None:
        sources = [dataclasses.replace(s, groups=groups) if isinstance(s, Source) else s for s in sources]

    async def embed(texts: list[str]) -> list[list[float]]:
        result = await embedding_model.embed(texts, input_type="document")
        if len(result.embeddings) != len(texts):
            raise ValueError(f"the embedder returned {len(result.embeddings)} vectors for {len(texts)} texts")
        return [list(v) for v in result.embeddings]

    async def write(batch: list[PreparedDocument]) -> None:
        async def probe() -> int:
            return len(await embed_query("dimension probe"))

        await write_batch(tables, batch, probe)

    outcomes = await run_pipeline(
        sources,
        known=await known_documents(tables, [s.document_id for s in sources if isinstance(s, Source)]),
        max_chars=max_chars,
        embed=embed,
        write=write,
        on_progress=on_progress,
        stop=stop,
        resume=functools.partial(stored_positions, tables),
        max_bytes=max_bytes,
    )
    if groups is not None:
        await regroup(
            tables, [o.document_id for o in outcomes if o.status == "unchanged" and o.document_id], groups
        )
    return outcomes


def _never() -> bool:
    return False


async def _prepare_stage(
    todo: list[tuple[int, Source]],
    known: dict[str, Known],
    limits: tuple[int, int | None],
    out: asyncio.Queue[_Item | None],
    ahead: _Ahead,
    run: _Run,
    stopped: Stop,
    resume: Resume | None,
) -> None:
    """Prepare each source; each put on ``out`` is a new document or more chunks of the last one.

    Small sources are prepared several to a worker-thread call (``_prepare_some``): one handoff
    per file cost more than the file's own work when there are thousands of small ones.
    """
    cursor = 0
    while cursor < len(todo):
        if stopped():
            for index, source in todo[cursor:]:
                run.finish(index, IngestOutcome(source=source.label, status="cancelled"))
            break
        prepared = await asyncio.to_thread(_prepare_some, todo[cursor:], known, limits)
        cursor += len(prepared)
        for index, doc in prepared:
            if isinstance(doc, IngestOutcome):
                run.finish(index, doc)
            else:
                await _feed(index, doc, out, ahead, run, stopped, resume)
    run.progress.chunks_total_final = True
    run.emit()
    await out.put(None)


def _prepare_some(
    todo: Sequence[tuple[int, Source]], known: dict[str, Known], limits: tuple[int, int | None]
) -> list[tuple[int, IngestOutcome | PreparedDocument]]:
    """``prepare`` the first of ``todo``, and the next ones while they are small and quick
    (``_PREPARE_STEP_SECONDS`` in all; a document that comes in steps ends the call)."""
    max_chars, max_bytes = limits
    done: list[tuple[int, IngestOutcome | PreparedDocument]] = []
    start = time.monotonic()
    for index, source in todo:
        doc = prepare(source, known.get(source.document_id), max_chars=max_chars, max_bytes=max_bytes)
        done.append((index, doc))
        if isinstance(doc, PreparedDocument) and (doc.rest is not None or doc.resumable):
            break
        if time.monotonic() - start >= _PREPARE_STEP_SECONDS:
            break
    return done


async def _feed(
    index: int,
    doc: PreparedDocument,
    out: asyncio.Queue[_Item | None],
    ahead: _Ahead,
    run: _Run,
    stopped: Stop,
    resume: Resume | None,
) -> None:
    """Pass one prepared document on, and the chunks of its next steps as they are parsed."""
    if doc.resumable and resume is not None:
        doc.stored = await resume(doc.doc_row["document_id"], doc.doc_row["content_hash"])
    rows = doc.chunk_rows
    doc.chunk_rows = []
    while True:
        skipped = doc.written
        rows = doc.skip_stored(rows)
        run.progress.chunks_total += len(rows) + doc.written - skipped
        run.progress.chunks_done += doc.written - skipped
        run.emit()
        await ahead.admit(len(rows))
        doc.chunk_rows.extend(rows)
        await out.put((index, doc))
        if doc.rest is None or doc.dropped:
            return  # complete, or its embedding failed: no use parsing further
        if stopped():
            doc.rest, doc.cancelled = None, True
            await out.put((index, doc))
            return
        try:
            more = await asyncio.to_thread(doc.next_rows)
        except FILE_ERRORS as exc:
            doc.rest, doc.error = None, file_failure(exc)
            await out.put((index, doc))
            return
        if more is None or doc.dropped:
            doc.rest = None
            await out.put((index, doc))
            return
        rows = more


async def _embed_stage(
    inbox: asyncio.Queue[_Item | None],
    out: asyncio.Queue[_Item | None],
    ahead: _Ahead,
    embed: Embed,
    write: Write,
    run: _Run,
    stopped: Stop,
) -> None:
    waiting: list[_Item] = []  # documents not passed on yet, in source order
    gone: set[int] = set()  # documents passed on or dropped: later puts of them are ignored
    ended = False
    while True:
        # what waits, counted once per batch and kept up to date per item (not summed per item)
        pending = sum(doc.pending for _, doc in waiting)
        ready = any(doc.embedded or doc.dropped for _, doc in waiting)
        held = {index for index, _ in waiting}
        while not ended and pending < EMBED_BATCH:
            if not pending and not ready:
                item = await inbox.get()  # nothing to do until a document or its next pages arrive
            else:
                try:
                    item = inbox.get_nowait()
                except asyncio.QueueEmpty:
                    break  # embed what there is rather than let the embedder idle
            if item is None:
                ended = True
                continue
            index, doc = item
            if index in gone:
                continue
            if index in held:  # more chunks (or the end) of a document already waiting
                pending = sum(d.pending for _, d in waiting)
            else:
                waiting.append(item)
                held.add(index)
                pending += doc.pending
            ready = ready or doc.embedded or doc.dropped
        if stopped():
            for _, doc in waiting:
                doc.cancelled = True
        for item in [item for item in waiting if item[1].dropped]:
            waiting.remove(item)
            gone.add(item[0])
            await _drop(item, ahead, run)
        for item in [item for item in waiting if item[1].embedded]:
            waiting.remove(item)
            gone.add(item[0])
            await out.put(item)
        if not any(doc.pending for _, doc in waiting):
            if ended and not waiting:
                break
            continue
        segments = _take(waiting, EMBED_BATCH)
        texts = [text for doc, start, stop in segments for text in doc.texts[start:stop]]
        try:
            vectors: list[list[float]] | None = await embed(texts)
        except Exception:
            vectors = None
        done = 0
        for doc, start, stop in segments:
            if vectors is not None:
                doc.vectors.extend(vectors[done : done + stop - start])
            else:
                try:
                    doc.vectors.extend(await embed(doc.texts[start:stop]))
                except Exception as exc:
                    doc.error = f"embedding failed: {exc}"
                    continue  # dropped (with its pending chunks) on the next round
            done += stop - start
        await ahead.release(done)
        run.progress.chunks_done += done
        run.emit()
        for _, doc in waiting:
            if len(doc.vectors) >= PART_CHUNKS and not doc.dropped and not stopped():
                await _commit_part(doc, write)
    await out.put(None)


async def _commit_part(doc: PreparedDocument, write: Write) -> None:
    """Commit the embedded chunks a big document holds, unpublished, and let them go."""
    doc.partial = True
    try:
        await write([doc])  # a store lost here fails the run, as any write does
    finally:
        doc.partial = False
    doc.committed(len(doc.vectors))


async def _drop(item: _Item, ahead: _Ahead, run: _Run) -> None:
    """Report a document that failed (or was cancelled) after it was parsed; its chunks leave the counts."""
    index, doc = item
    await ahead.release(doc.pending)
    run.progress.chunks_total -= len(doc.chunk_rows) + doc.written
    run.progress.chunks_done -= len(doc.vectors) + doc.written
    run.finish(index, doc.outcome())


def _take(waiting: list[_Item], size: int) -> list[tuple[PreparedDocument, int, int]]:
    """Up to ``size`` chunk positions still to embed, from the first documents: (doc, start, stop)."""
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


async def _write_stage(inbox: asyncio.Queue[_Item | None], write: Write, run: _Run, stopped: Stop) -> None:
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
                if stopped():
                    for _, doc in pending:
                        doc.cancelled = True
                else:
                    await write([doc for _, doc in pending])
                for index, doc in pending:
                    run.finish(index, doc.outcome())
                pending, chunks = [], 0
    finally:
        if getter is not None:
            getter.cancel()
