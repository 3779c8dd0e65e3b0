"""Ingestion as users meet it: the pipeline's failure isolation and progress, binary files refused,
display sources instead of server paths, kept originals, and knowledge bases of the older format."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import lancedb
import pyarrow as pa
import pytest
from pydantic_ai.embeddings.result import EmbedInputType

from rag_tools.kb import (
    IngestProgress,
    KnowledgeBase,
    KnowledgeBaseFormatError,
    document_id_for,
)
from rag_tools.kb.tables import CHUNKING_VERSION
from ragstream.cli import main as ragstream
from tests.embedders import HashingEmbeddingModel
from tests.test_kb import GUIDE, make_pdf


class FailingEmbedder(HashingEmbeddingModel):
    """Hashing vectors, except that any batch holding a text with ``marker`` raises."""

    def __init__(self, marker: str) -> None:
        super().__init__(64, name="hashing")
        self.marker = marker
        self.batches: list[int] = []

    async def vectors(self, texts: list[str], input_type: EmbedInputType) -> list[list[float]]:
        self.batches.append(len(texts))
        await asyncio.sleep(0.05)  # a real embedder takes time: the parser fills the next batch meanwhile
        if any(self.marker in t for t in texts):
            raise RuntimeError("the embedding service rejected the input")
        return await super().vectors(texts, input_type)


async def test_a_failing_file_in_the_middle_of_a_batch_does_not_stop_the_others(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# Alpha\n\nAlpha keeps backups for 30 days.")
    (folder / "b.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4)
    (folder / "c.txt").write_text("Gamma listens on port 9000.")
    (folder / "d.md").write_text("# Delta\n\nDelta text that EXPLODES the embedder.")
    (folder / "e.txt").write_text("Epsilon rotates keys every 90 days.")
    (folder / "f.pdf").write_bytes(b"%PDF-1.4 not really a pdf")
    events: list[IngestProgress] = []
    embedder = FailingEmbedder("EXPLODES")
    async with KnowledgeBase(tmp_path / "kb", embedder=embedder) as kb:
        report = await kb.ingest_paths([folder], on_progress=events.append)

        outcomes = {Path(o.source).name: o for o in report.outcomes}
        assert [Path(o.source).name for o in report.outcomes] == [
            "a.md",
            "b.md",
            "c.txt",
            "d.md",
            "e.txt",
            "f.pdf",
        ]
        assert {n: o.status for n, o in outcomes.items()} == {
            "a.md": "added",
            "b.md": "error",
            "c.txt": "added",
            "d.md": "error",
            "e.txt": "added",
            "f.pdf": "error",
        }
        assert outcomes["b.md"].source == str(folder / "b.md")
        assert "binary file" in (outcomes["b.md"].error or "")
        assert outcomes["d.md"].error == "embedding failed: the embedding service rejected the input"
        assert "not a readable PDF" in (outcomes["f.pdf"].error or "")
        # the failing document was embedded together with its neighbours before being isolated
        assert max(embedder.batches) > 1

        titles = {d.title for d in (await kb.list_documents()).documents}
        assert titles == {"Alpha", "c", "e"}
        assert [h.title for h in await kb.search("port 9000", mode="text", limit=1)] == ["c"]
        assert await kb.search("Delta EXPLODES", mode="text") == []

    reported = [e.outcome for e in events if e.outcome is not None]
    assert sorted(Path(o.source).name for o in reported) == sorted(outcomes)
    assert events[-1].files_done == events[-1].files_total == 6
    assert events[-1].chunks_done == events[-1].chunks_total == 3


async def test_progress_moves_per_chunk_through_a_long_pdf(tmp_path: Path) -> None:
    pages = [
        f"Page {n} of the runbook. " + "The pump needs inspection before restart. " * 6 for n in range(60)
    ]
    pdf = make_pdf(tmp_path / "runbook.pdf", pages, title="Runbook")
    small = tmp_path / "small.md"
    small.write_text("# Small\n\nA short note.")
    events: list[IngestProgress] = []
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel(), chunk_max_chars=200) as kb:
        report = await kb.ingest_paths([pdf, small], on_progress=events.append)
        chunks = await kb.count_chunks()
        pdf_id = report.outcomes[0].document_id or ""
        pdf_chunks = await kb.get_chunks(pdf_id)
        pdf_doc = await kb.get_document_by_id(pdf_id, with_content=True)
    assert [o.status for o in report.outcomes] == ["added", "added"]
    assert chunks > 100
    # parsed in steps, the PDF is still one document numbered as a whole
    assert [c.position for c in pdf_chunks] == list(range(len(pdf_chunks)))
    assert [c.page for c in pdf_chunks] == sorted(c.page or 0 for c in pdf_chunks)
    assert {c.page for c in pdf_chunks} == set(range(1, 61))
    assert pdf_doc is not None and pdf_doc.title == "Runbook" and pdf_doc.chunk_count == len(pdf_chunks)
    assert pdf_doc.content is not None and "[page 60]" in pdf_doc.content

    done = [e.chunks_done for e in events]
    assert done == sorted(done)  # never goes back
    pdf_outcome = next(i for i, e in enumerate(events) if e.outcome and e.outcome.source == str(pdf))
    moving = {e.chunks_done for e in events[:pdf_outcome] if e.chunks_done > 0}
    assert len(moving) >= chunks // 32 - 1, "the bar should move many times while the PDF is embedded"
    # its first pages were embedded while later pages were still being parsed
    first_embedded = next(i for i, e in enumerate(events) if e.chunks_done > 0)
    assert events[first_embedded].chunks_total < len(pdf_chunks)
    last = events[-1]
    assert (last.chunks_done, last.chunks_total, last.chunks_total_final) == (chunks, chunks, True)
    assert (last.files_done, last.files_total) == (2, 2)


async def test_binary_content_is_refused_and_real_text_accepted(tmp_path: Path) -> None:
    files = {
        "nul.md": b"# Title\n\x00\x01\x02\x03 binary payload",
        "nul.txt": b"plain\x00\x01\x02 binary payload",
        "empty.md": b"",
        "blank.txt": b"  \n\n  ",
        "bare.html": b"<html><head><title>Bare</title></head><body> </body></html>",
        "noise.txt": bytes(b % 32 if b % 3 else 0x41 for b in range(1, 4000)).replace(b"\x00", b"\x01"),
        "report.md": b"%PDF-1.7\n" + b"stream\n" + bytes(range(1, 200)),
        "cp1252.txt": "The \u201cquoted\u201d caf\u00e9 costs 5\u20ac.".encode("cp1252"),
        "utf16.txt": "Unicode text with BOM: na\u00efve r\u00e9sum\u00e9.".encode("utf-16"),
        "latin.md": "# Ol\u00e9\n\nSe\u00f1or Mu\u00f1oz".encode("latin-1"),
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as kb:
        report = await kb.ingest_paths([tmp_path / n for n in files])
        by_name = {Path(o.source).name: o for o in report.outcomes}
        assert by_name["nul.md"].error == "this is a binary file (it contains NUL bytes), not markdown text"
        assert by_name["nul.txt"].error == "this is a binary file (it contains NUL bytes), not text"
        for name in ("empty.md", "blank.txt", "bare.html"):  # nothing to index fails, never "0 chunks"
            assert (by_name[name].status, by_name[name].error) == ("error", "the file holds no text")
        assert "control characters" in (by_name["noise.txt"].error or "")
        assert (
            by_name["report.md"].error == "this is a PDF file, not markdown: give it a .pdf name to ingest it"
        )
        assert {n for n, o in by_name.items() if o.status == "added"} == {
            "cp1252.txt",
            "utf16.txt",
            "latin.md",
        }
        texts = " ".join(h.text for h in await kb.search("quoted cafe naive senor", mode="text", limit=10))
        assert (
            "\u201cquoted\u201d caf\u00e9" in texts and "r\u00e9sum\u00e9" in texts and "Mu\u00f1oz" in texts
        )
        # uploads get the same check
        upload = await kb.ingest_bytes(files["nul.md"], name="upload.md")
        assert upload.status == "error" and "binary" in (upload.error or "")


async def test_clients_see_display_sources_never_server_paths(tmp_path: Path) -> None:
    root = tmp_path / "server" / "secret-location"
    (root / "guides" / "deep").mkdir(parents=True)
    (root / "guides" / "widget-guide.md").write_text(GUIDE)
    (root / "guides" / "deep" / "notes.txt").write_text("Release 1.3 fixed the widget login bug.")
    other = tmp_path / "server" / "other"
    other.mkdir()
    (other / "widget-guide.md").write_text(GUIDE.replace("14 days", "21 days"))
    single = tmp_path / "server" / "single.md"
    single.write_text("# Single\n\nA lone widget file.")
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as kb:
        await kb.ingest_paths([root / "guides", str(other / "*.md"), single])
        await kb.ingest_bytes(b"Uploaded widget notes.", name="upload.txt")
        await kb.ingest_bytes(b"Widget news from the web.", name="news.html", uri="https://example.com/news")

        listing = await kb.list_documents()
        assert sorted(d.uri for d in listing.documents) == [
            "deep/notes.txt",
            "https://example.com/news",
            "single.md",
            "upload.txt",
            "widget-guide.md",
            "widget-guide.md",  # the same relative name in two folders: two documents
        ]
        hits = await kb.search("widget", limit=50)
        lookups = [await kb.get_document(q) for q in ("deep/notes.txt", "single", "news")]
        chunks = [c for d in listing.documents for c in await kb.get_chunks(d.document_id)]
        public = json.dumps(
            [m.model_dump(mode="json") for m in [*listing.documents, *hits, *chunks, *filter(None, lookups)]]
        )
        assert str(tmp_path) not in public and "file://" not in public and "secret-location" not in public
        assert {h.uri for h in hits} <= {d.uri for d in listing.documents}

        again = await kb.ingest_paths([root / "guides", single])  # identity is the file, not the display
        assert [o.status for o in again.outcomes] == ["unchanged"] * 3
        first = next(d for d in listing.documents if d.uri == "deep/notes.txt")
        assert first.document_id == document_id_for((root / "guides" / "deep" / "notes.txt").as_uri())


async def test_originals_are_kept_and_delete_removes_everything(tmp_path: Path) -> None:
    pdf = make_pdf(tmp_path / "ops.pdf", ["Backups run nightly.", "Restores are tested monthly."])
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as kb:
        (from_path,) = (await kb.ingest_paths([pdf])).outcomes
        upload = await kb.ingest_bytes(b"# Notes\n\nUploaded notes.", name="notes.md")
        assert from_path.document_id and upload.document_id

        original = await kb.get_document_file(from_path.document_id)
        assert original == (pdf.read_bytes(), "application/pdf", "ops.pdf")
        assert await kb.get_document_file(upload.document_id) == (
            b"# Notes\n\nUploaded notes.",
            "text/markdown",
            "notes.md",
        )
        assert await kb.get_document_file("no-such-document") is None

        changed = await kb.ingest_bytes(b"# Notes\n\nRewritten notes.", name="notes.md")
        assert changed.status == "updated"
        kept = await kb.get_document_file(upload.document_id)
        assert kept is not None and kept.data == b"# Notes\n\nRewritten notes."

        assert await kb.delete_document("ops.pdf")  # by display uri
        assert await kb.get_document_file(from_path.document_id) is None
        assert await kb.get_chunks(from_path.document_id) == []
        assert await kb.get_document_by_id(from_path.document_id) is None
        assert await kb.delete_document(upload.document_id)
        assert (await kb.count_documents(), await kb.count_chunks()) == (0, 0)
        assert not await kb.delete_document(upload.document_id)


def _write_format_1(path: Path, source: Path, embedder: HashingEmbeddingModel) -> str:
    """A knowledge base as format 1 wrote it: ``uri`` held the source's absolute file URI."""
    data = source.read_bytes()
    uri = source.resolve().as_uri()
    document_id = document_id_for(uri)
    content_hash = hashlib.sha256(data + f"|text|1200|{CHUNKING_VERSION}".encode()).hexdigest()
    text = data.decode()
    db = lancedb.connect(path)
    db.create_table(
        "meta",
        data=[
            {"key": "embedder", "value": "test:hashing-64"},
            {"key": "dimensions", "value": "64"},
            {"key": "format_version", "value": "1"},
        ],
    )
    db.create_table(
        "documents",
        data=pa.Table.from_pylist(
            [
                {
                    "document_id": document_id,
                    "uri": uri,
                    "title": "old notes",
                    "format": "text",
                    "content_hash": content_hash,
                    "chunk_count": 1,
                    "size_chars": len(text),
                    "updated_at": datetime.now(UTC),
                    "content": text,
                }
            ]
        ),
    )
    db.create_table(
        "chunks",
        data=pa.Table.from_pylist(
            [
                {
                    "chunk_id": f"{document_id}:{content_hash[:12]}:0",
                    "document_id": document_id,
                    "title": "old notes",
                    "uri": uri,
                    "position": 0,
                    "section": 0,
                    "headings": [],
                    "page": None,
                    "text": text,
                    "search_text": f"old notes\n{text}",
                    "vector": embedder.vector(f"old notes\n{text}"),
                }
            ],
            schema=pa.schema(
                [
                    *[
                        pa.field(n, t)
                        for n, t in [
                            ("chunk_id", pa.string()),
                            ("document_id", pa.string()),
                            ("title", pa.string()),
                            ("uri", pa.string()),
                            ("position", pa.int32()),
                            ("section", pa.int32()),
                            ("headings", pa.list_(pa.string())),
                            ("page", pa.int32()),
                            ("text", pa.string()),
                            ("search_text", pa.string()),
                        ]
                    ],
                    pa.field("vector", pa.list_(pa.float32(), 64)),
                ]
            ),
        ),
    )
    return document_id


async def test_a_format_1_knowledge_base_is_migrated_in_place(tmp_path: Path) -> None:
    source = tmp_path / "my files" / "old notes.txt"
    source.parent.mkdir()
    source.write_text("Old backups were kept for 7 days.")
    embedder = HashingEmbeddingModel()
    document_id = _write_format_1(tmp_path / "kb", source, embedder)
    async with KnowledgeBase(tmp_path / "kb", embedder=embedder) as kb:
        (doc,) = (await kb.list_documents()).documents
        assert (doc.document_id, doc.uri) == (document_id, "old notes.txt")
        (hit,) = await kb.search("backups kept", limit=5)
        assert hit.uri == "old notes.txt" and "7 days" in hit.text
        assert await kb.get_document_file(document_id) is None  # format 1 kept no originals
        again = await kb.ingest_paths([source])
        assert again.outcomes[0].status == "unchanged"  # same identity, same content hash
        source.write_text("New backups are kept for 30 days.")
        assert (await kb.ingest_paths([source])).outcomes[0].status == "updated"
        assert [d.uri for d in (await kb.list_documents()).documents] == ["old notes.txt"]
        assert await kb.get_document_file(document_id) is not None
    async with KnowledgeBase(tmp_path / "kb", embedder=embedder) as kb:  # opens as the current format now
        assert await kb.count_documents() == 1


async def test_a_newer_format_is_a_clear_error(tmp_path: Path) -> None:
    embedder = HashingEmbeddingModel()
    async with KnowledgeBase(tmp_path / "kb", embedder=embedder) as kb:
        await kb.ingest_bytes(b"text", name="a.txt")
    db = lancedb.connect(tmp_path / "kb")
    db.create_table(
        "meta",
        data=[
            {"key": "embedder", "value": "test:hashing-64"},
            {"key": "dimensions", "value": "64"},
            {"key": "format_version", "value": "99"},
        ],
        mode="overwrite",
    )
    with pytest.raises(KnowledgeBaseFormatError, match=r"storage format 99.*upgrade ragstream, or re-ingest"):
        async with KnowledgeBase(tmp_path / "kb", embedder=embedder):
            pass


def _cli(argv: Sequence[str], data: Path) -> int:
    return ragstream([argv[0], "--data-dir", str(data), *argv[1:]])


def test_cli_names_each_failed_path_with_its_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "image.gif").write_bytes(b"GIF89a")
    binary = tmp_path / "notes.md"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00" * 50)
    status = _cli(["ingest", "--no-progress", "/nope/x.md", str(binary), str(empty)], tmp_path / "data")
    out, err = capsys.readouterr()
    assert status == 1
    assert err.splitlines() == [
        "error: /nope/x.md: no such file or directory",
        f"error: {empty}: no files to ingest in this folder (supported: .csv, .docx, .epub, .htm, .html, .jpeg, .jpg, .markdown, .md, .pdf, .png, .pptx, .text, .tif, .tiff, .txt, .xlsx)",
        f"error: {binary}: this is a binary file (it contains NUL bytes), not markdown text",
    ]
    assert out.strip() == "0 added, 0 updated, 0 unchanged, 3 failed; 0 chunks written"
