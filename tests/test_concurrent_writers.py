"""Two knowledge-base handles writing one document at once (two processes, two hosts, or two
``KnowledgeBase`` objects in one process): they hold no common lock.

A delete used to remove every chunk and the original of the document's id: run between the other
writer's chunk commit and its ``documents`` commit, it left the new version published with no
chunks and no original, unsearchable, and a re-ingest skipped it as unchanged. Two updates at once
did the same (each removed the chunks that were not its own version's): a version is now
published only over the one its writer read, and a writer removes only chunks older than its own.
A version that lost its chunks anyway (an older writer's doing) is written again by the next ingest.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import lancedb

from rag_tools.kb import KnowledgeBase
from tests.embedders import HashingEmbeddingModel


class _PausedBuilder:
    """A LanceDB merge-insert builder whose ``execute`` waits for the test's go-ahead."""

    def __init__(self, inner: Any, reached: asyncio.Event, proceed: asyncio.Event) -> None:
        self._inner, self._reached, self._proceed = inner, reached, proceed

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._inner, name)
        if name == "execute":

            async def execute(*args: Any, **kwargs: Any) -> Any:
                self._reached.set()
                await self._proceed.wait()
                return await attribute(*args, **kwargs)

            return execute
        return lambda *args, **kwargs: _PausedBuilder(
            attribute(*args, **kwargs), self._reached, self._proceed
        )


class _PausedBeforePublishing:
    """The ``documents`` table of a writer that stops just before its publishing commit."""

    def __init__(self, table: Any, reached: asyncio.Event, proceed: asyncio.Event) -> None:
        self._table, self._reached, self._proceed = table, reached, proceed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._table, name)

    def merge_insert(self, on: str) -> _PausedBuilder:
        return _PausedBuilder(self._table.merge_insert(on), self._reached, self._proceed)


def pause_before_publishing(writer: KnowledgeBase) -> tuple[asyncio.Event, asyncio.Event]:
    """Make ``writer``'s ingests stop before their ``documents`` commit: (reached, proceed)."""
    reached, proceed = asyncio.Event(), asyncio.Event()
    ensure = writer._tables.ensure

    async def ensure_pausing(dimensions: int) -> Any:
        chunks, documents, files = await ensure(dimensions)
        return chunks, _PausedBeforePublishing(documents, reached, proceed), files

    writer._tables.ensure = ensure_pausing  # type: ignore[method-assign]
    return reached, proceed


async def test_a_delete_between_another_writers_commits_leaves_its_version_whole(tmp_path: Path) -> None:
    source = tmp_path / "handbook.md"
    source.write_text("# Handbook\n\nBackups are kept for 35 days.\n")
    async with (
        KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as deleter,
        KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as writer,
    ):
        first = await deleter.ingest_file(source)
        assert first.status == "added" and first.document_id is not None
        source.write_text("# Handbook\n\nBackups are now kept for 90 days.\n")

        reached, proceed = pause_before_publishing(writer)
        update = asyncio.create_task(writer.ingest_file(source))
        await asyncio.wait_for(reached.wait(), 30)  # its original and chunks are written
        assert await deleter.delete_document(first.document_id)
        proceed.set()
        assert (await update).status == "updated"

        # the newer version was published after the delete: it is there, whole
        document = await deleter.get_document("handbook.md")
        assert document is not None and "90 days" in (document.content or "")
        assert [c.text for c in await deleter.get_chunks(document.document_id)] == [
            "Backups are now kept for 90 days."
        ]
        assert [h.uri for h in await deleter.search("backups kept days")] == ["handbook.md"]
        original = await deleter.get_document_file(document.document_id)
        assert original is not None and b"90 days" in original.data
        assert (await deleter.ingest_file(source)).status == "unchanged"


async def test_two_updates_at_once_leave_one_of_them_published_whole(tmp_path: Path) -> None:
    async with (
        KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as first,
        KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as second,
    ):
        await first.ingest_bytes(b"# Prices\n\nThe basic plan costs 10 euros.", name="prices.md")
        reached, proceed = pause_before_publishing(second)
        late = asyncio.create_task(
            second.ingest_bytes(b"# Prices\n\nThe basic plan costs 12 euros.", name="prices.md")
        )
        await asyncio.wait_for(reached.wait(), 30)  # its chunks are written, not yet published
        await first.ingest_bytes(b"# Prices\n\nThe basic plan costs 11 euros.", name="prices.md")
        proceed.set()
        await late

        # before: 12 euros was published last, over 11, whose clean-up had removed its chunks
        document = await first.get_document("prices.md")
        assert document is not None
        chunks = [c.text for c in await first.get_chunks(document.document_id)]
        assert len(chunks) == document.chunk_count == 1
        assert [h.text for h in await first.search("basic plan costs")] == chunks
        assert chunks[0] in (document.content or "")


async def test_a_published_version_whose_chunks_are_gone_is_written_again(tmp_path: Path) -> None:
    """However it happened (an older writer's clean-up, a hand-edited table), re-ingesting the same
    bytes repairs it instead of skipping it as unchanged."""
    data = b"# Prices\n\nThe basic plan costs 12 euros."
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as kb:
        outcome = await kb.ingest_bytes(data, name="prices.md")
        db = await lancedb.connect_async(tmp_path / "kb")
        chunks = await db.open_table("chunks")
        await chunks.delete(f"document_id = '{outcome.document_id}'")
        chunks.close()
        db.close()
        assert await kb.search("basic plan costs") == []

        again = await kb.ingest_bytes(data, name="prices.md")
        assert again.status == "updated"  # before: "unchanged", and it stayed unsearchable
        assert [h.text for h in await kb.search("basic plan costs")] == ["The basic plan costs 12 euros."]


class _PausedBeforeAdding:
    """The ``files`` table of a writer that stops just before it appends a new document's original."""

    def __init__(self, table: Any, reached: asyncio.Event, proceed: asyncio.Event) -> None:
        self._table, self._reached, self._proceed = table, reached, proceed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._table, name)

    async def add(self, *args: Any, **kwargs: Any) -> Any:
        self._reached.set()
        await self._proceed.wait()
        return await self._table.add(*args, **kwargs)


async def test_two_writers_adding_one_new_document_leave_one_original(tmp_path: Path) -> None:
    async with (
        KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as first,
        KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as second,
    ):
        await first.ingest_bytes(b"# Other\n\nSomething else.", name="other.md")  # the tables exist
        reached, proceed = asyncio.Event(), asyncio.Event()
        ensure = second._tables.ensure

        async def ensure_pausing(dimensions: int) -> Any:
            chunks, documents, files = await ensure(dimensions)
            return chunks, documents, _PausedBeforeAdding(files, reached, proceed)

        second._tables.ensure = ensure_pausing  # type: ignore[method-assign]
        late = asyncio.create_task(
            second.ingest_bytes(b"# Prices\n\nThe basic plan costs 12 euros.", name="prices.md")
        )
        await asyncio.wait_for(reached.wait(), 30)  # it found no original of prices.md stored
        await first.ingest_bytes(b"# Prices\n\nThe basic plan costs 11 euros.", name="prices.md")
        proceed.set()
        await late

        document = await first.get_document("prices.md")
        assert document is not None and "11 euros" in (document.content or "")
        stored = lancedb.connect(tmp_path / "kb").open_table("files").to_arrow().to_pylist()
        assert [row["data"] for row in stored if row["document_id"] == document.document_id] == [
            b"# Prices\n\nThe basic plan costs 11 euros."
        ]
        original = await second.get_document_file(document.document_id)
        assert original is not None and b"11 euros" in original.data
