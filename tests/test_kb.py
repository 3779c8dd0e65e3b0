"""The knowledge base against a real LanceDB in a temporary directory."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from fpdf import FPDF
from pydantic import ValidationError

from rag_tools.kb import DocumentFilter, EmbedderMismatchError, KnowledgeBase, combine_filters
from tests.embedders import HashingEmbeddingModel

GUIDE = """# Widget Guide

Widgets are small reusable parts.

## Installing widgets

Run `widget install` to add a widget. Installation takes about 30 seconds.

## Removing widgets

Run `widget remove` to delete one. Removal is permanent.

### Backups before removal

Copy the widget folder to keep a backup; backups are kept for 14 days.
"""

HTML = """<html><head><title>Gadget Manual</title><script>var zorblat = 1;</script>
<style>.x{color:red}</style></head><body><nav>zorblat menu</nav>
<h1>Gadget Manual</h1><p>Gadgets charge in 2 hours from a USB-C port.</p>
<h2>Cleaning</h2><p>Wipe the gadget with a dry cloth once a week.</p>
<table><tr><th>Mode</th><th>Hours</th></tr><tr><td>Eco</td><td>40</td></tr></table></body></html>"""


def make_pdf(path: Path, pages: list[str], title: str = "Ops Handbook") -> Path:
    pdf = FPDF()
    pdf.set_title(title)
    pdf.set_font("Helvetica", size=12)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 8, text)
    pdf.output(str(path))
    return path


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "widget-guide.md").write_text(GUIDE)
    (root / "gadget.html").write_text(HTML)
    (root / "notes.txt").write_text("Release 1.2 added dark mode.\n\nRelease 1.3 fixed the login bug.")
    make_pdf(
        root / "ops.pdf",
        [
            "Operations handbook. Read this first.",
            "Backups run nightly at 02:00 and are retained for 35 days.",
            "Severity one incidents page the on-call engineer within 5 minutes.",
        ],
    )
    return root


async def test_ingests_each_format_with_structure(kb: KnowledgeBase, docs: Path) -> None:
    report = await kb.ingest_paths([docs])
    assert [o.status for o in report.outcomes] == ["added"] * 4, report.outcomes
    listing = await kb.list_documents()
    titles = {d.title: d for d in listing.documents}
    assert set(titles) == {"Widget Guide", "Gadget Manual", "notes", "Ops Handbook"}
    assert titles["Gadget Manual"].format == "html"

    md_chunks = await kb.get_chunks(titles["Widget Guide"].document_id)
    backup = next(c for c in md_chunks if "14 days" in c.text)
    assert backup.headings == ["Widget Guide", "Removing widgets", "Backups before removal"]
    assert [c.position for c in md_chunks] == list(range(len(md_chunks)))

    html_text = " ".join(c.text for c in await kb.get_chunks(titles["Gadget Manual"].document_id))
    assert "USB-C" in html_text and "Eco" in html_text
    assert "zorblat" not in html_text  # nav and script are not content

    pdf_chunks = await kb.get_chunks(titles["Ops Handbook"].document_id)
    assert {c.page for c in pdf_chunks} == {1, 2, 3}
    hits = await kb.search("how long are backups retained", filter=DocumentFilter(names=("ops",)))
    assert hits[0].page == 2 and "35 days" in hits[0].text


async def test_chunks_respect_the_size_bound(tmp_path: Path) -> None:
    long_text = "\n\n".join(f"Paragraph {i} " + "word " * 80 for i in range(30))
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel(), chunk_max_chars=400) as kb:
        outcome = await kb.ingest_bytes(long_text.encode(), name="long.txt")
        chunks = await kb.get_chunks(outcome.document_id or "")
    assert len(chunks) > 10
    assert all(len(c.text) <= 400 for c in chunks)


async def test_reingest_skips_unchanged_and_replaces_changed(kb: KnowledgeBase, docs: Path) -> None:
    await kb.ingest_paths([docs])
    again = await kb.ingest_paths([docs])
    assert [o.status for o in again.outcomes] == ["unchanged"] * 4
    chunks_before = await kb.count_chunks()

    (docs / "widget-guide.md").write_text(GUIDE.replace("14 days", "90 days"))
    changed = await kb.ingest_paths([docs / "widget-guide.md"])
    assert changed.outcomes[0].status == "updated"
    assert await kb.count_documents() == 4
    assert await kb.count_chunks() == chunks_before
    texts = " ".join(h.text for h in await kb.search("backup retention", limit=10, mode="text"))
    assert "90 days" in texts and "14 days" not in texts


async def test_replace_is_atomic_for_concurrent_searches(tmp_path: Path) -> None:
    embedder = HashingEmbeddingModel()
    async with KnowledgeBase(tmp_path / "kb", embedder=embedder, chunk_max_chars=200) as kb:

        def version(n: int) -> bytes:
            return "\n\n".join(f"alpha version{n} paragraph {i} " + "filler " * 20 for i in range(8)).encode()

        await kb.ingest_bytes(version(0), name="doc.txt")
        stop = asyncio.Event()
        seen: list[set[str]] = []

        async def reader() -> None:
            while not stop.is_set():
                hits = await kb.search("alpha paragraph", limit=50, mode="text")
                seen.append({h.chunk_id.split(":")[1] for h in hits})
                assert hits, "a search during a replace saw no version of the document"

        task = asyncio.create_task(reader())
        for n in range(1, 8):
            assert (await kb.ingest_bytes(version(n), name="doc.txt")).status == "updated"
        stop.set()
        await task
    assert seen and all(len(versions) == 1 for versions in seen), "a search saw two versions at once"


def _replace_once_after_lookup(
    kb: KnowledgeBase, replace: Callable[[], Awaitable[object]], *, before: bool
) -> None:
    """Make the next lookup of published versions run ``replace`` just before (``before``) or just
    after it reads: the interleaving a search or a chunk read meets when a replace lands mid-way."""
    tables = kb._tables
    original = tables.published_access
    pending = [replace]

    async def published_access(document_ids: set[str]) -> dict[str, tuple[str, list[str] | None]]:
        if pending and before:
            await pending.pop()()
        found = await original(document_ids)
        if pending:
            await pending.pop()()
        return found

    tables.published_access = published_access  # type: ignore[method-assign]


def _paragraphs(n: int) -> bytes:
    return "\n\n".join(f"alpha version{n} paragraph {i} " + "filler " * 20 for i in range(8)).encode()


async def test_a_search_that_read_chunks_just_before_a_replace_published_finds_the_new_version(
    tmp_path: Path,
) -> None:
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel(), chunk_max_chars=200) as kb:
        await kb.ingest_bytes(_paragraphs(0), name="doc.txt")
        # the search's chunk rows are of version 0; the replace publishes version 1 (and deletes
        # version 0's chunks) before the search asks which version is published
        _replace_once_after_lookup(kb, lambda: kb.ingest_bytes(_paragraphs(1), name="doc.txt"), before=True)
        hits = await kb.search("alpha paragraph", limit=50, mode="text")
    assert len(hits) == 8
    assert {h.text.split()[1] for h in hits} == {"version1"}


async def test_reading_a_document_s_chunks_while_a_replace_lands_gives_the_new_version(
    tmp_path: Path,
) -> None:
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel(), chunk_max_chars=200) as kb:
        outcome = await kb.ingest_bytes(_paragraphs(0), name="doc.txt")
        # version 0 is read as published, then version 1 replaces it before its chunks are read
        _replace_once_after_lookup(kb, lambda: kb.ingest_bytes(_paragraphs(1), name="doc.txt"), before=False)
        chunks = await kb.get_chunks(outcome.document_id)
    assert [c.position for c in chunks] == list(range(8))
    assert {c.text.split()[1] for c in chunks} == {"version1"}


async def test_delete_document(kb: KnowledgeBase, docs: Path) -> None:
    await kb.ingest_paths([docs])
    doc = await kb.get_document("gadget")
    assert doc is not None
    assert await kb.delete_document(doc.uri)
    assert await kb.get_document("gadget") is None
    assert not [h for h in await kb.search("gadget charge", limit=20) if h.document_id == doc.document_id]
    assert not await kb.delete_document(doc.document_id)


async def test_listing_pages_and_lookup_order(tmp_path: Path) -> None:
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as kb:
        for name in ["b-report.txt", "a-report.txt", "C-notes.txt", "report.txt"]:
            await kb.ingest_bytes(f"text of {name}".encode(), name=name, uri=f"mem://{name}")
        first = await kb.list_documents(page=1, page_size=3)
        second = await kb.list_documents(page=2, page_size=3)
        assert [d.title for d in first.documents] == ["a report", "b report", "C notes"]
        assert [d.title for d in second.documents] == ["report"]
        assert (first.total, first.pages, first.has_next, second.has_next) == (4, 2, True, False)
        assert all(d.content is None for d in first.documents)

        exact = await kb.get_document("mem://report.txt")
        assert exact is not None and exact.title == "report" and exact.content == "text of report.txt"
        partial_uri = await kb.get_document("REPORT")  # shortest uri containing it wins
        assert partial_uri is not None and partial_uri.uri == "mem://report.txt"
        by_title = await kb.get_document("c notes")
        assert by_title is not None and by_title.uri == "mem://C-notes.txt"
        assert await kb.get_document("nothing like this") is None
        with pytest.raises(ValueError, match="at least 1"):
            await kb.list_documents(page=0)


@pytest.mark.parametrize("mode", ["hybrid", "vector", "text"])
async def test_search_modes_rank_the_relevant_chunk_first(kb: KnowledgeBase, docs: Path, mode: str) -> None:
    await kb.ingest_paths([docs])
    hits = await kb.search("How long does it take to charge the gadget?", mode=mode, limit=3)  # type: ignore[arg-type]
    assert hits and "2 hours" in hits[0].text
    assert hits[0].title == "Gadget Manual"
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)


async def test_context_expansion_stays_in_section_and_bound(tmp_path: Path) -> None:
    text = (
        "# T\n\n## A\n\n" + "\n\n".join(f"alpha {i} " + "x " * 60 for i in range(6)) + "\n\n## B\n\nbeta only"
    )
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel(), chunk_max_chars=200) as kb:
        await kb.ingest_bytes(text.encode(), name="t.md")
        hit = (await kb.search("alpha 3", mode="text", limit=1, context_chars=650))[0]
    assert hit.context is not None and hit.text in hit.context
    assert len(hit.context) <= 650 + 10  # joins add separators only
    assert len(hit.context) > len(hit.text)
    assert "beta" not in hit.context


INJECTIONS = [
    "O'Brien",
    "100%",
    "under_score",
    "a--b",
    "' OR 1=1 --",
    "'; DROP TABLE chunks; --",
    "back\\slash",
    '"quoted"',
]


async def test_filters_match_hostile_names_literally(tmp_path: Path) -> None:
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as kb:
        for i, name in enumerate(INJECTIONS):
            await kb.ingest_bytes(
                f"shared topic text {i}".encode(), name=f"doc{i}.txt", uri=f"mem://{i}", title=name
            )
        await kb.ingest_bytes(b"shared topic text plain", name="plain.txt", uri="mem://plain", title="Plain")
        for name in INJECTIONS:
            only = DocumentFilter(names=(name,))
            hits = await kb.search("shared topic", limit=20, filter=only)
            assert {h.title for h in hits} == {name}, name
            assert (await kb.list_documents(filter=only)).total == 1
            assert (await kb.get_document(name, with_content=False)) is not None
        assert await kb.search("shared topic", filter=DocumentFilter(names=("%",))) != []
        assert await kb.search("shared topic", filter=DocumentFilter(names=("_",))) != []
        # "%" and "_" are not wildcards: a name made of them matches nothing else
        assert {
            h.title for h in await kb.search("shared", limit=20, filter=DocumentFilter(names=("1_0",)))
        } == set()
        nobody = DocumentFilter(names=("' OR '1'='1",))
        assert await kb.search("shared topic", filter=nobody) == []
        # a name of spaces would match everything once spaces are ignored: refused, not widened
        with pytest.raises(ValidationError, match="must not be blank"):
            DocumentFilter(names=("  ",))


async def test_filter_kinds_and_combination(tmp_path: Path) -> None:
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as kb:
        a = await kb.ingest_bytes(b"topic alpha", name="a.txt", uri="mem://team/a", title="User Guide")
        await kb.ingest_bytes(b"topic beta", name="b.txt", uri="mem://team/b", title="Admin Guide")
        await kb.ingest_bytes(b"topic gamma", name="c.txt", uri="mem://other/c", title="Other")

        async def titles(f: object) -> set[str]:
            return {h.title for h in await kb.search("topic", limit=10, filter=f)}  # type: ignore[arg-type]

        assert await titles(DocumentFilter(names=("userguide",))) == {"User Guide"}  # spaces ignored
        assert await titles(DocumentFilter(document_ids=(a.document_id or "",))) == {"User Guide"}
        assert await titles(DocumentFilter(uri_prefixes=("mem://team/",))) == {"User Guide", "Admin Guide"}
        assert await titles(DocumentFilter(uri_prefixes=("mem://te%",))) == set()
        both = combine_filters(
            DocumentFilter(uri_prefixes=("mem://team/",)), DocumentFilter(names=("admin",))
        )
        assert await titles(both) == {"Admin Guide"}
        assert combine_filters(None, DocumentFilter()) is None


async def test_empty_knowledge_base(kb: KnowledgeBase) -> None:
    for mode in ("hybrid", "vector", "text"):
        assert await kb.search("anything", mode=mode) == []  # type: ignore[arg-type]
    assert (await kb.list_documents()).total == 0
    assert await kb.get_document("x") is None
    assert await kb.count_chunks() == 0


async def test_missing_unreadable_and_unsupported_sources(kb: KnowledgeBase, tmp_path: Path) -> None:
    good = tmp_path / "good.md"
    good.write_text("# Good\n\nfine text")
    bad_pdf = tmp_path / "broken.pdf"
    bad_pdf.write_bytes(b"%PDF-1.4 this is not really a pdf")
    dangling = tmp_path / "dangling.txt"
    os.symlink(tmp_path / "gone.txt", dangling)
    image = tmp_path / "picture.png"
    image.write_bytes(b"\x89PNG")
    report = await kb.ingest_paths(
        [tmp_path / "missing.md", bad_pdf, dangling, image, good, str(tmp_path / "*.nothing")]
    )
    statuses = {Path(o.source).name: (o.status, o.error) for o in report.outcomes}
    assert statuses["good.md"][0] == "added"
    assert statuses["missing.md"] == ("error", "no such file or directory")
    assert statuses["broken.pdf"][0] == "error" and "PDF" in (statuses["broken.pdf"][1] or "")
    assert statuses["dangling.txt"][0] == "error"
    assert statuses["picture.png"][0] == "error" and "not a readable image" in (
        statuses["picture.png"][1] or ""
    )
    assert statuses["*.nothing"] == ("error", "no files match this pattern")
    assert (await kb.list_documents()).total == 1


async def test_embedder_mismatch_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "kb"
    async with KnowledgeBase(path, embedder=HashingEmbeddingModel(64)) as kb:
        await kb.ingest_bytes(b"some text", name="a.txt")
    with pytest.raises(EmbedderMismatchError, match="hashing-64"):
        async with KnowledgeBase(path, embedder=HashingEmbeddingModel(32)):
            pass
    with pytest.raises(EmbedderMismatchError, match="local:all-minilm-l6-v2"):
        async with KnowledgeBase(path):
            pass

    class SameNameOtherSize(HashingEmbeddingModel):
        @property
        def model_name(self) -> str:
            return "hashing-64"

    async with KnowledgeBase(path, embedder=SameNameOtherSize(16)) as kb:
        with pytest.raises(EmbedderMismatchError, match="64-dimensional"):
            await kb.search("some text", mode="vector")
        with pytest.raises(EmbedderMismatchError, match="64-dimensional"):
            await kb.ingest_bytes(b"other text", name="b.txt")


async def test_a_second_connection_sees_new_documents(tmp_path: Path) -> None:
    embedder = HashingEmbeddingModel()
    async with KnowledgeBase(tmp_path / "kb", embedder=embedder) as writer:
        await writer.ingest_bytes(b"first document", name="a.txt")
        async with KnowledgeBase(tmp_path / "kb", embedder=embedder) as reader:
            assert await reader.count_documents() == 1
            await writer.ingest_bytes(b"second document", name="b.txt")
            assert await reader.count_documents() == 2
            assert [h.text for h in await reader.search("second", mode="text")] == ["second document"]


def _open_files_under(path: Path) -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed since listed
            continue
        count += target.startswith(str(path))
    return count


async def test_a_long_lived_knowledge_base_keeps_a_bounded_number_of_files_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server ingests for weeks: the writer and a reader in another worker keep at most a bounded
    number of the knowledge base's files open, however many documents come and go (LanceDB's index
    cache holds each full-text index version it read open until the connection is replaced; LanceDB
    starts keeping them after about 50 index versions)."""
    monkeypatch.setattr("rag_tools.kb.tables.RECONNECT_AFTER_VERSIONS", 16)
    embedder = HashingEmbeddingModel()
    path = tmp_path / "kb"
    counts: list[int] = []
    async with KnowledgeBase(path, embedder=embedder) as writer:
        await writer.ingest_bytes(b"seed document", name="seed.txt")
        async with KnowledgeBase(path, embedder=embedder) as reader:
            for i in range(120):
                await writer.ingest_bytes(f"item {i} weighs {i * 7} grams".encode(), name=f"item-{i}.txt")
                hits = await reader.search(f"weighs {i * 7} grams", mode="text", limit=3)
                assert hits, f"the reader did not find item {i}"
                if i % 10 == 0:
                    assert await writer.delete_document(f"item-{i}.txt")
                counts.append(_open_files_under(path))
    assert max(counts) <= 60, f"open files of the knowledge base, every tenth ingest: {counts[::10]}"


async def test_lookups_cached_per_version_survive_a_concurrent_lookup_at_a_newer_version(
    tmp_path: Path,
) -> None:
    """Searches share the per-version lookup of published documents; one that waits for its rows
    while another, after a write, starts the next version's lookup still gets its own answer
    (it raised ``KeyError`` for a key it had found cached)."""
    import lancedb
    import pyarrow as pa

    from rag_tools.kb.tables import _RowsPerVersion

    db = await lancedb.connect_async(tmp_path / "db")
    table = await db.create_table("t", pa.table({"id": ["a", "b", "c"], "n": [1, 2, 3]}))

    def read(rows: list[dict[str, object]]) -> dict[str, object]:
        return {str(row["id"]): row["n"] for row in rows}

    cache: _RowsPerVersion[object] = _RowsPerVersion()
    assert await cache.get(table, 1, "id", {"a"}, ["id", "n"], read) == {"a": 1}
    waiting = asyncio.create_task(cache.get(table, 1, "id", {"a", "b"}, ["id", "n"], read))
    await asyncio.sleep(0)  # it asks the table for "b" ("a" is cached) and waits
    newer = asyncio.create_task(cache.get(table, 2, "id", {"c"}, ["id", "n"], read))
    assert await asyncio.gather(waiting, newer) == [{"a": 1, "b": 2}, {"c": 3}]


@pytest.mark.parametrize("seconds", [0.0, 3600.0])
async def test_read_consistency_bounds_how_old_a_view_of_other_writers_gets(
    tmp_path: Path, seconds: float
) -> None:
    """0 (the default): a reader sees another process's ingest on its next call; a long interval
    keeps serving the view it has (fewer round trips on object storage) until the interval ends."""
    from rag_tools.config import RagConfig

    path = tmp_path / "kb"
    (tmp_path / "a.md").write_text("# Alpha\n\nAlpha ships on Tuesdays.")
    (tmp_path / "b.md").write_text("# Beta\n\nBeta ships on Fridays.")
    config = RagConfig(kb_uri=str(path), kb_read_consistency_seconds=seconds)  # the default embedder
    async with KnowledgeBase(path) as writer:
        await writer.ingest_paths([tmp_path / "a.md"])
        async with KnowledgeBase.from_config(config) as reader:
            assert [d.title for d in (await reader.list_documents()).documents] == ["Alpha"]
            await writer.ingest_paths([tmp_path / "b.md"])
            titles = {d.title for d in (await reader.list_documents()).documents}
            hits = {h.title for h in await reader.search("Beta ships on Fridays", limit=2)}
    if seconds == 0:
        assert titles == {"Alpha", "Beta"} and "Beta" in hits
    else:
        assert titles == {"Alpha"} and "Beta" not in hits
