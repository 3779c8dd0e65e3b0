"""Big files as they go: a big text is chunked a piece at a time and committed in parts as it is
embedded, invisible to every search until its last part publishes it; an ingest killed mid-way
(SIGKILL, a real process) keeps its parts, and a rerun embeds only the rest and leaves every chunk
present once; a file over the size cap fails alone with its size and the limit, in the library and
the CLI."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import lancedb
import pytest
from pydantic_ai.embeddings.result import EmbedInputType

from rag_tools.kb import KnowledgeBase, pipeline
from tests.embedders import HashingEmbeddingModel
from tests.test_ingest import _cli

ROOT = Path(__file__).resolve().parent.parent
PART = 200  # chunks per partial commit in these tests (the product's is pipeline.PART_CHUNKS)


def big_text(path: Path, paragraphs: int) -> Path:
    """A text of numbered paragraphs (about 1 KB each): paragraph ``n`` says ``marker n``."""
    with path.open("w") as out:
        for n in range(paragraphs):
            out.write(
                f"Paragraph {n}: the ledger line marker{n} records shipment {n * 7} to depot {n % 13}. "
            )
            out.write("Filler words about cartons pallets invoices and customs forms. " * 14 + "\n\n")
    return path


class _Counting(HashingEmbeddingModel):
    """The hashing embedder, counting the texts it embedded; ``during`` runs once after ``after`` batches."""

    def __init__(self) -> None:
        super().__init__()
        self.texts = 0
        self.batches = 0
        self.during: object = None
        self.after = 0
        self.seen: list[object] = []

    async def vectors(self, texts: list[str], input_type: EmbedInputType) -> list[list[float]]:
        self.texts += len(texts)
        self.batches += 1
        if self.during is not None and self.batches == self.after:
            self.seen.append(await self.during())  # type: ignore[operator]
        return await super().vectors(texts, input_type)


def _stored_rows(kb_path: Path) -> list[dict[str, object]]:
    table = lancedb.connect(kb_path).open_table("chunks")
    return table.to_arrow().select(["chunk_id", "position", "document_id"]).to_pylist()


async def test_a_big_text_is_committed_in_parts_and_invisible_until_published(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pipeline, "PART_CHUNKS", PART)
    path = big_text(tmp_path / "ledger.txt", 2500)  # 2.5 MB, about 2,500 chunks
    embedder = _Counting()
    async with (
        KnowledgeBase(tmp_path / "kb", embedder=embedder) as kb,
        KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as reader,
    ):

        async def look() -> tuple[int, int, int]:
            hits = await reader.search("ledger line marker5 shipment", mode="text", limit=3)
            return len(_stored_rows(tmp_path / "kb")), await reader.count_documents(), len(hits)

        embedder.during, embedder.after = look, 40  # 1,280 chunks embedded: several parts committed
        report = await kb.ingest_paths([path])
        (outcome,) = report.outcomes
        assert outcome.status == "added" and outcome.chunks > 2000, outcome
        ((stored, documents, hits),) = embedder.seen
        assert stored >= 4 * PART  # parts already in the chunks table, unpublished
        assert (documents, hits) == (0, 0)  # ... and no search, listing or count sees them
        rows = _stored_rows(tmp_path / "kb")
        assert sorted(r["position"] for r in rows) == list(range(outcome.chunks))
        (hit,) = await reader.search("ledger line marker2499 shipment", mode="text", limit=1)
        assert "marker2499 " in hit.text
        assert await reader.count_chunks() == outcome.chunks


_CHILD = """
import asyncio, sys
from rag_tools.kb import KnowledgeBase, pipeline
from tests.embedders import HashingEmbeddingModel

pipeline.PART_CHUNKS = {part}

class Slow(HashingEmbeddingModel):
    async def vectors(self, texts, input_type):
        await asyncio.sleep(0.05)
        return await super().vectors(texts, input_type)

async def main():
    async with KnowledgeBase(sys.argv[1], embedder=Slow()) as kb:
        await kb.ingest_paths([sys.argv[2]])

asyncio.run(main())
"""


async def test_an_ingest_killed_mid_way_continues_where_it_stopped_and_keeps_every_chunk_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pipeline, "PART_CHUNKS", PART)
    path = big_text(tmp_path / "ledger.txt", 3000)
    kb_path = tmp_path / "kb"
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_CHILD.format(part=PART)), str(kb_path), str(path)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and child.poll() is None:
            if (kb_path / "chunks.lance").exists() and len(_stored_rows(kb_path)) >= 3 * PART:
                break
            await asyncio.sleep(0.2)
        assert child.poll() is None, "the ingest ended before it could be killed"
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(timeout=60)
    kept = _stored_rows(kb_path)
    assert len(kept) >= 3 * PART

    embedder = _Counting()
    async with KnowledgeBase(kb_path, embedder=embedder) as kb:
        assert await kb.count_documents() == 0  # nothing published by the killed run
        (outcome,) = (await kb.ingest_paths([path])).outcomes
        assert outcome.status == "added"
        assert embedder.texts == outcome.chunks - len(kept)  # only what the killed run had not committed
        rows = _stored_rows(kb_path)
        assert len({r["chunk_id"] for r in rows}) == len(rows) == outcome.chunks
        assert sorted(r["position"] for r in rows) == list(range(outcome.chunks))
        for marker in ("marker0 ", "marker1500 ", "marker2999 "):
            (hit,) = await kb.search(f"ledger line {marker.strip()} shipment", mode="text", limit=1)
            assert marker in hit.text
        again = await kb.ingest_paths([path])
        assert again.outcomes[0].status == "unchanged"


CAPPED = "the file is 1.5 MB, over the limit of 1 MB per file (RAGSTREAM_MAX_FILE_MB)"


async def test_a_file_over_the_size_cap_fails_alone_with_its_size_and_the_limit(tmp_path: Path) -> None:
    big = big_text(tmp_path / "big.txt", 1600)  # 1.5 MiB
    small = tmp_path / "small.md"
    small.write_text("# Small\n\nFits easily.")
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel(), max_file_mb=1) as kb:
        outcomes = {Path(o.source).name: o for o in (await kb.ingest_paths([big, small])).outcomes}
        assert (outcomes["big.txt"].status, outcomes["big.txt"].error) == ("error", CAPPED)
        assert outcomes["small.md"].status == "added"


def test_the_cli_takes_the_size_cap_from_its_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    big = big_text(tmp_path / "big.txt", 1600)
    monkeypatch.setenv("RAGSTREAM_MAX_FILE_MB", "1")
    status = _cli(["ingest", "--no-progress", str(big)], tmp_path / "data")
    assert status == 1
    assert capsys.readouterr().err.splitlines() == [f"error: {big}: {CAPPED}"]


async def test_a_big_texts_text_is_stored_once_as_its_original(tmp_path: Path) -> None:
    """The documents row of a big text kept the whole text again beside its original, which cost
    a copy of the file at the write that publishes it (~200 MB for a 50 MB file): the row keeps
    none, and the text is read from the original when asked for."""
    path = big_text(tmp_path / "ledger.txt", 1500)  # 1.4 MiB: a streamed text
    kb_path = tmp_path / "kb"
    async with KnowledgeBase(kb_path, embedder=HashingEmbeddingModel()) as kb:
        (outcome,) = (await kb.ingest_paths([path])).outcomes
        assert outcome.status == "added" and outcome.document_id is not None
        stored = lancedb.connect(kb_path).open_table("documents").to_arrow().to_pylist()
        assert [row["content"] for row in stored] == [""]
        document = await kb.get_document("ledger.txt")
        assert document is not None and document.content == path.read_text()
        assert document.size_chars == len(path.read_text())
        (listed,) = (await kb.list_documents()).documents
        assert listed.content is None  # a listing does not read it
        original = await kb.get_document_file(outcome.document_id)
        assert original is not None and original.data == path.read_bytes()
