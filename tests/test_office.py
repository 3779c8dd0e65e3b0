"""Office formats as users meet them: the sample files rebuild byte for byte, each format keeps its
structure (headings, tables, slides, sheets and rows) into chunks and citations, a table is never cut
inside a row, facts from a docx table, a pptx slide and an xlsx row are answered through an AG-UI
run and cited with their locator, and bad files (corrupt, password-protected, zip bombs, sparse
sheets, picture-only decks, scanned PDFs) fail alone with one line, in the library, the CLI and
an upload job, leaving nothing behind."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import lancedb
import pytest
from fpdf import FPDF

from rag_tools.kb import KnowledgeBase
from rag_tools.kb.chunking import chunk_document
from rag_tools.kb.readers import ParsedDocument, parse_document
from ragstream.app import create_app
from tests.embedders import HashingEmbeddingModel
from tests.office_files import BAD_FILES, CORPUS, OFFICE_SAMPLES, sample
from tests.protocol import check_stream, parse_sse, run_body
from tests.servers import serve
from tests.test_documents_api import finished_job
from tests.test_ingest import _cli

ROOT = Path(__file__).resolve().parent.parent


def parsed(name: str) -> ParsedDocument:
    return parse_document(sample(name), name=name)


def test_the_script_rebuilds_the_office_files_of_the_corpus_byte_for_byte(tmp_path: Path) -> None:
    script = ROOT / "examples" / "make_corpus_office.py"
    subprocess.run([sys.executable, str(script), str(tmp_path)], check=True, capture_output=True)
    for name in OFFICE_SAMPLES:
        assert (tmp_path / name).read_bytes() == (CORPUS / name).read_bytes(), name


# -- structure per format ---------------------------------------------------------------------


def test_docx_keeps_its_heading_paths_lists_and_tables() -> None:
    doc = parsed("support-onboarding.docx")
    assert doc.title == "Tessel Maps Support Team Onboarding"
    by_heading = {tuple(s.headings): s for s in doc.sections}
    equipment = by_heading["Tessel Maps Support Team Onboarding", "Equipment and accounts"]
    assert (
        "| Role | Laptop | Monitor budget | Headset |\n"
        "| --- | --- | --- | --- |\n"
        "| Support engineer | 14-inch Linux laptop | 450 EUR | noise-cancelling headset |"
    ) in equipment.text
    week = by_heading["Tessel Maps Support Team Onboarding", "Your first week"]
    assert (
        "- Day 1: accounts, equipment and a tour of the support queue with your buddy.\n- Day 2:" in week.text
    )
    assert ("Tessel Maps Support Team Onboarding", "Support tiers", "Who handles what") in by_heading
    chunks = chunk_document(doc, max_chars=1200)
    located = {c.locator for c in chunks if "450 EUR" in c.text} | {
        c.locator for c in chunks if "8 business hours" in c.text
    }
    assert located == {"table 1", "table 2"}
    assert all(c.locator == "" for c in chunks if "|" not in c.text)


def test_pptx_sections_are_slides_under_their_titles_with_tables_and_notes() -> None:
    doc = parsed("roadmap-2025.pptx")
    assert doc.title == "Tessel Maps Roadmap 2025"
    assert [s.locator for s in doc.sections] == [f"slide {n}" for n in range(1, 6)]
    offline = doc.sections[2]
    assert offline.headings == ["Offline maps"]
    assert offline.text.startswith(
        "- Offline maps ship in Tessel Maps 4.0, planned for April 2025\n- Any area"
    )
    assert "Notes: Offline maps depend on the new tile format" in offline.text
    assert "| us-east | Q3 2025 | customers in North America |" in doc.sections[3].text
    assert [c.locator for c in chunk_document(doc, max_chars=1200)] == [f"slide {n}" for n in range(1, 6)]


def test_xlsx_sheets_are_tables_located_by_sheet_and_rows() -> None:
    doc = parsed("price-list.xlsx")
    assert doc.title == "Kiteline Price List"
    plans, add_ons = doc.sections
    assert (plans.headings, plans.rows) == (["Plans"], [2, 3, 4, 5])
    assert (add_ons.headings, add_ons.rows) == (["Add-ons"], [2, 3, 4, 5, 6, 7, 8])
    assert "| Advanced audit log | 3 EUR per user per month | Business, Enterprise |" in add_ons.text
    assert [c.locator for c in chunk_document(doc, max_chars=1200)] == [
        "Plans, rows 2-5",
        "Add-ons, rows 2-8",
    ]
    small = chunk_document(doc, max_chars=300)
    audit = next(c for c in small if "Advanced audit log" in c.text)
    assert audit.locator in ("Add-ons, row 6", "Add-ons, rows 5-6", "Add-ons, rows 6-7")
    assert audit.text.startswith("| Add-on | Price | Available on | Notes |\n| --- |")


def test_csv_rows_are_located_by_number_and_the_dialect_is_sniffed() -> None:
    doc = parsed("status-history.csv")
    (section,) = doc.sections
    assert section.rows == list(range(2, 11))
    assert [c.locator for c in chunk_document(doc, max_chars=1200)] == ["rows 2-10"]
    semicolons = parse_document(b"name;price\nTea;2,50\n\nCake;3,10\n", name="menu.csv")
    assert semicolons.sections[0].text.endswith("| Tea | 2,50 |\n| Cake | 3,10 |")
    assert semicolons.sections[0].rows == [2, 4]  # the empty line keeps its number


def test_epub_reads_the_spine_in_reading_order_without_the_table_of_contents() -> None:
    doc = parsed("admin-guide.epub")
    assert doc.title == "Driftwood Files Administrator's Guide"
    assert [s.headings for s in doc.sections] == [
        ["Installing Driftwood", "Requirements"],
        ["Installing Driftwood", "First start"],
        ["User quotas"],
        ["User quotas", "When a quota is full"],
        ["Email notifications"],
    ]
    assert "chapter-1.xhtml" not in doc.content
    assert "The default storage quota of a new user is 50 GiB" in doc.sections[2].text


# -- tables are never cut ---------------------------------------------------------------------


def _workbook(rows: list[list[Any]]) -> bytes:
    from openpyxl import Workbook

    workbook = Workbook()
    sheet = workbook.active
    sheet.title = "Log"
    for row in rows:
        sheet.append(row)
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


def test_a_long_sheet_is_split_between_rows_each_chunk_under_the_header() -> None:
    rows: list[list[Any]] = [["id", "when", "what"]]
    for n in range(2, 202):
        rows.append([f"R{n}", f"2024-01-{n % 28 + 1:02d}", "word " * (n % 17)])
    rows.append([])  # row 202 stays empty: left out, its number skipped
    rows.append(["R203", "2024-02-01", "a row far longer than a chunk " * 30])
    rows.append(["R204", "2024-02-02", "the last row"])
    doc = parse_document(_workbook(rows), name="log.xlsx")
    chunks = chunk_document(doc, max_chars=400)
    assert len(chunks) > 10
    header = "| id | when | what |\n| --- | --- | --- |"
    seen: list[str] = []
    for chunk in chunks:
        assert chunk.text.startswith(header + "\n"), chunk.text[:80]
        body = chunk.text.split("\n")[2:]
        ids = [re.match(r"^\| (R\d+) \|", line).group(1) for line in body]  # type: ignore[union-attr]
        assert all(line.endswith(" |") for line in body)  # whole rows only
        first, last = int(ids[0][1:]), int(ids[-1][1:])
        assert chunk.locator == (f"Log, row {first}" if first == last else f"Log, rows {first}-{last}")
        assert len(chunk.text) <= 400 or len(body) == 1  # only a row longer than a chunk goes over
        seen += ids
    assert seen == [f"R{n}" for n in (*range(2, 202), 203, 204)]  # every row once, in order
    long = next(c for c in chunks if "R203" in c.text)
    assert long.locator == "Log, row 203" and len(long.text) > 400


def test_a_markdown_table_between_paragraphs_is_cut_between_rows_only() -> None:
    table = "\n".join(["| Item | Price |", "|---|---:|", *(f"| item {n} | {n}.00 EUR |" for n in range(80))])
    text = f"# Menu\n\nPrices include tax.\n\n{table}\n\nPrices change every spring.\n"
    doc = parse_document(text.encode(), name="menu.md")
    chunks = chunk_document(doc, max_chars=300)
    rows = [line for c in chunks for line in c.text.split("\n") if line.startswith("| item")]
    assert rows == [f"| item {n} | {n}.00 EUR |" for n in range(80)]
    for chunk in chunks:
        if "| item" in chunk.text:
            assert "| Item | Price |\n|---|---:|\n| item" in chunk.text
    assert chunks[0].text.startswith("Prices include tax.")
    assert chunks[-1].text.endswith("Prices change every spring.")


# -- into the knowledge base ------------------------------------------------------------------


async def test_every_format_ingests_and_its_locators_reach_hits_and_chunks(tmp_path: Path) -> None:
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as kb:
        paths = [CORPUS / name for name in (*OFFICE_SAMPLES, "operations-handbook.pdf")]
        report = await kb.ingest_paths(paths)
        assert [o.status for o in report.outcomes] == ["added"] * len(paths), report.errors
        located = {}
        for outcome in report.outcomes:
            assert outcome.document_id is not None
            chunks = await kb.get_chunks(outcome.document_id)
            located[outcome.source.rsplit("/", 1)[-1]] = [c.locator for c in chunks]
        assert located["roadmap-2025.pptx"] == [f"slide {n}" for n in range(1, 6)]
        assert located["price-list.xlsx"] == ["Plans, rows 2-5", "Add-ons, rows 2-8"]
        assert located["status-history.csv"] == ["rows 2-10"]
        assert set(located["operations-handbook.pdf"]) == {f"page {n}" for n in range(1, 6)}
        assert "table 1" in located["support-onboarding.docx"]
        assert set(located["admin-guide.epub"]) == {""}
        (hit,) = await kb.search("advanced audit log add-on price", limit=1)
        assert (hit.uri, hit.locator, hit.page, hit.location) == (
            "price-list.xlsx",
            "Add-ons, rows 2-8",
            None,
            "Add-ons, rows 2-8",
        )
        document = await kb.get_document_by_id(report.outcomes[1].document_id or "", with_content=True)
        assert document is not None and document.format == "pptx"
        assert "## Slide 3: Offline maps" in (document.content or "")
        original = await kb.get_document_file(document.document_id)
        assert original is not None and original.data == sample("roadmap-2025.pptx")
        assert original.media_type.endswith("presentationml.presentation")


async def _ask(client: httpx.AsyncClient, thread: str, question: str) -> tuple[str, dict[str, Any]]:
    response = await client.post("/agui", json=run_body(thread, f"{thread}-r1", question))
    assert response.status_code == 200, response.text
    events = [event for _, event in parse_sse(response.text)]
    state = check_stream(events, {})
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    answer = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    return answer, state


@pytest.mark.parametrize(
    ("question", "fact", "uri", "locator", "headings"),
    [
        (
            "What monitor budget does a support engineer get?",
            "Monitor budget: 450 EUR",
            "support-onboarding.docx",
            "table 1",
            ["Equipment and accounts"],
        ),
        (
            "When will offline maps ship in Tessel Maps?",
            "planned for April 2025",
            "roadmap-2025.pptx",
            "slide 3",
            None,
        ),
        (
            "How much does the advanced audit log add-on cost?",
            "3 EUR per user per month",
            "price-list.xlsx",
            "Add-ons, rows 2-8",
            [],  # the sheet the locator names is not repeated as a heading
        ),
    ],
)
async def test_office_facts_are_answered_and_cited_with_their_locator(
    scenario_config: Any, question: str, fact: str, uri: str, locator: str, headings: list[str] | None
) -> None:
    """The product's offline model answers over AG-UI; the card behind the quoted [n] names the place."""
    async with (
        serve(create_app(scenario_config)) as url,
        httpx.AsyncClient(base_url=url, timeout=120) as client,
    ):
        answer, state = await _ask(client, "office", question)
        quoted = next(s for s in re.split(r"(?<=\]) ", answer) if fact in s)
        card = state["citations"][re.search(r"\[(\d+)\]", quoted).group(1)]  # type: ignore[union-attr]
        assert (card["uri"], card["locator"]) == (uri, locator), card
        assert card["page"] is None  # not a PDF: no page to open at
        if headings is not None:
            assert card["headings"] == headings
        view = (await client.get("/threads/office")).json()
        assert view["state"]["citations"] == state["citations"]  # the thread keeps what was streamed


async def test_pdf_citations_keep_their_page_beside_the_locator(scenario_config: Any) -> None:
    async with (
        serve(create_app(scenario_config)) as url,
        httpx.AsyncClient(base_url=url, timeout=120) as client,
    ):
        answer, state = await _ask(client, "pdf", "How long are nightly database backups retained?")
        cited = [state["citations"][n] for n in re.findall(r"\[(\d+)\]", answer)]
        pdf = [c for c in cited if c["uri"] == "operations-handbook.pdf"]
        assert pdf and all(c["locator"] == f"page {c['page']}" for c in pdf)
        assert all("locator" in c and "page" in c for c in state["citations"].values())


# -- bad input ----------------------------------------------------------------------------------


def make_scanned_pdf(path: Path) -> Path:
    """A PDF whose pages are pictures only, as a scanner makes them."""
    from PIL import Image

    picture = io.BytesIO()
    Image.new("L", (200, 260), 235).save(picture, "PNG")
    pdf = FPDF()
    for _ in range(2):
        pdf.add_page()
        pdf.image(io.BytesIO(picture.getvalue()), x=10, y=10, w=190)
    pdf.output(str(path))
    return path


@pytest.fixture
def bad_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "bad"
    folder.mkdir()
    for name, (build, _reason) in BAD_FILES.items():
        (folder / name).write_bytes(build())
    make_scanned_pdf(folder / "scanned.pdf")
    return folder


EXPECTED = {
    **{name: reason for name, (_, reason) in BAD_FILES.items()},
    "scanned.pdf": "no text layer (scanned document?)",
}


async def test_bad_files_fail_alone_with_one_line_and_leave_nothing(tmp_path: Path, bad_folder: Path) -> None:
    good = bad_folder / "roadmap-2025.pptx"
    good.write_bytes(sample("roadmap-2025.pptx"))
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as kb:
        report = await kb.ingest_paths([bad_folder])
        outcomes = {o.source.rsplit("/", 1)[-1]: o for o in report.outcomes}
        assert outcomes.pop("roadmap-2025.pptx").status == "added"
        for name, outcome in outcomes.items():
            assert outcome.status == "error", name
            assert EXPECTED[name] in (outcome.error or ""), (name, outcome.error)
            assert "\n" not in (outcome.error or "")
        assert set(outcomes) == set(EXPECTED)
        assert await kb.count_documents() == 1
        assert await kb.count_chunks() == 5  # the deck's slides, nothing of the failed files
        (listed,) = (await kb.list_documents()).documents
        assert listed.uri == "roadmap-2025.pptx"
    files = lancedb.connect(tmp_path / "kb").open_table("files").to_arrow()
    assert files.column("filename").to_pylist() == ["roadmap-2025.pptx"]  # no original kept either


def test_the_cli_names_each_bad_file_with_its_reason(
    tmp_path: Path, bad_folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = _cli(["ingest", "--no-progress", str(bad_folder)], tmp_path / "data")
    out, err = capsys.readouterr()
    assert status == 1
    lines = err.splitlines()
    assert len(lines) == len(EXPECTED)
    for name, reason in EXPECTED.items():
        (line,) = [line for line in lines if line.startswith(f"error: {bad_folder / name}: ")]
        assert reason in line, line
    assert out.strip() == f"0 added, 0 updated, 0 unchanged, {len(EXPECTED)} failed; 0 chunks written"


async def test_uploaded_bad_files_fail_in_the_job_and_the_server_stays_healthy(
    scenario_config: Any, bad_folder: Path
) -> None:
    scenario_config.max_upload_bytes = 50_000_000
    async with (
        serve(create_app(scenario_config)) as url,
        httpx.AsyncClient(base_url=url, timeout=120) as client,
    ):
        before = (await client.get("/documents")).json()["total"]
        files = [("file", (path.name, path.read_bytes())) for path in sorted(bad_folder.iterdir())]
        response = await client.post("/documents", files=files)
        assert response.status_code == 202, response.text
        job = await finished_job(client, response.json()["jobId"], deadline=120)
        assert job["state"] == "done"
        for outcome in job["files"]:
            assert outcome["status"] == "error", outcome
            assert EXPECTED[outcome["name"]] in outcome["error"], outcome
        assert (await client.get("/documents")).json()["total"] == before
        assert (await client.get("/health")).json()["status"] == "ok"
        answer, _ = await _ask(client, "after", "When will offline maps ship in Tessel Maps?")
        assert "April 2025" in answer  # still answering from what it held


# -- knowledge bases of the previous format -------------------------------------------------


async def test_a_format_2_knowledge_base_gains_locators_when_opened(tmp_path: Path) -> None:
    from tests.test_kb import make_pdf

    embedder = HashingEmbeddingModel()
    pdf = make_pdf(tmp_path / "ops.pdf", ["Backups run nightly.", "Incidents page the on-call engineer."])
    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\n\nBackups are kept for 35 days.")
    async with KnowledgeBase(tmp_path / "kb", embedder=embedder) as kb:
        await kb.ingest_paths([pdf, notes])
    db = lancedb.connect(tmp_path / "kb")  # as format 2 left it: no locator column
    db.open_table("chunks").drop_columns(["locator"])
    meta = db.open_table("meta")
    meta.update(where="key = 'format_version'", values={"value": "2"})
    async with KnowledgeBase(tmp_path / "kb", embedder=embedder) as kb:
        hits = await kb.search("incidents on-call engineer", limit=10)
        assert {(h.uri, h.page, h.locator) for h in hits} == {
            ("ops.pdf", 1, "page 1"),
            ("ops.pdf", 2, "page 2"),
            ("notes.md", None, ""),
        }
        notes.write_text("# Notes\n\nBackups are kept for 30 days.")  # a write into the migrated table
        assert (await kb.ingest_paths([notes])).outcomes[0].status == "updated"
        (hit,) = await kb.search("backups kept 30 days", limit=1)
        assert (hit.uri, hit.locator) == ("notes.md", "")
    versions = {
        r["key"]: r["value"]
        for r in lancedb.connect(tmp_path / "kb").open_table("meta").to_arrow().to_pylist()
    }
    assert versions["format_version"] == "4"
