"""Generate the office files of the sample corpus: a .docx, a .pptx, a .xlsx, a .csv and an .epub.

The document and the deck belong to a second fictional product, Tessel Maps, and the book to a
third, Driftwood Files (Kiteline-branded ones outranked the release notes on questions about
Kiteline's releases); the rest to the fictional Kiteline service, like ``release-notes.txt`` and
the PDF handbook
(``make_corpus_pdf.py``). Each holds facts the tests and ``bench/rag_eval.py`` ask about, at a known
place, so that answers can be checked for their locator:

- ``support-onboarding.docx``: headings, a bulleted list and two tables; the equipment table
  says a support engineer's monitor budget is 450 EUR (heading path "Equipment and accounts").
- ``roadmap-2025.pptx``: five slides; slide 3 says offline
  maps ship in Tessel Maps 4.0 in April 2025, slide 4 has a table of regions.
- ``price-list.xlsx``: sheets "Plans" and "Add-ons"; row 6 of "Add-ons" prices the advanced
  audit log at 3 EUR per user per month.
- ``status-history.csv``: one incident per row; row 8 is the expired certificate of 21 August 2024.
- ``admin-guide.epub``: three chapters; the default storage quota of a new user is 50 GiB.

Only well-kept writer libraries are used (python-docx, python-pptx, openpyxl, EbookLib, the
standard library's csv). The output is deterministic: fixed document dates, and every zip member
rewritten with one fixed timestamp, so running the script again produces byte-identical files
(``tests/test_office.py`` checks it).

Usage: ``python examples/make_corpus_office.py [OUTPUT_DIR]`` (needs the ``test`` extra).
"""

from __future__ import annotations

import csv
import io
import sys
import zipfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "corpus"
DATE = datetime(2024, 11, 4, 9, 0, 0)
ZIP_DATE = (2024, 11, 4, 9, 0, 0)

ONBOARDING: list[tuple[str, object]] = [
    ("title", "Tessel Maps Support Team Onboarding"),
    (
        "p",
        "This guide is for engineers joining the Tessel Maps customer support team. It covers the first "
        "week, the equipment and accounts you receive, and how support tiers share the work.",
    ),
    ("h1", "Your first week"),
    (
        "p",
        "On your first day your buddy walks you through the support queue and the escalation "
        "rules. You answer your first tickets on day three, always with your buddy reviewing them "
        "before they are sent.",
    ),
    ("li", "Day 1: accounts, equipment and a tour of the support queue with your buddy."),
    ("li", "Day 2: shadow a tier 1 shift and read the operations handbook."),
    ("li", "Day 3: answer your first tickets, reviewed by your buddy before sending."),
    ("li", "Day 5: a 30-minute review with the support team lead."),
    ("h1", "Equipment and accounts"),
    (
        "p",
        "Equipment is ordered before your first day. The table lists what each role receives; "
        "anything else is requested through the equipment form.",
    ),
    (
        "table",
        [
            ["Role", "Laptop", "Monitor budget", "Headset"],
            ["Support engineer", "14-inch Linux laptop", "450 EUR", "noise-cancelling headset"],
            ["Support team lead", "14-inch Linux laptop", "600 EUR", "noise-cancelling headset"],
            ["Technical writer", "16-inch laptop of their choice", "450 EUR", "none"],
        ],
    ),
    (
        "p",
        "Accounts for the ticket system, the team chat and the status page are created by the "
        "support team lead. Access to customer data needs a signed confidentiality agreement.",
    ),
    ("h1", "Support tiers"),
    ("h2", "Who handles what"),
    (
        "table",
        [
            ["Tier", "Handles", "First response target"],
            ["Tier 1", "account questions, billing, how-to questions", "2 business hours"],
            ["Tier 2", "sync errors, client crashes, share link problems", "8 business hours"],
            ["Tier 3", "data recovery and bugs confirmed in the server", "1 business day"],
        ],
    ),
    ("h2", "Moving a ticket up"),
    (
        "p",
        "A ticket moves up a tier when its tier cannot solve it within twice the response target. "
        "Anything that looks like data loss goes straight to tier 3.",
    ),
]

SLIDES: list[tuple[str, list[str]]] = [
    ("Tessel Maps Roadmap 2025", ["Product planning, November 2024"]),
    (
        "Where we are",
        [
            "Tessel Maps 3.2 added cycling routes",
            "The app serves 4,800 towns from two data regions",
            "The most requested feature is using maps offline",
        ],
    ),
    (
        "Offline maps",
        [
            "Offline maps ship in Tessel Maps 4.0, planned for April 2025",
            "Any area can be downloaded for offline use on phones and tablets",
            "Downloaded areas update when the device reconnects",
        ],
    ),
    ("New Tessel Maps data regions", []),
    ("Questions", ["Product team: roadmap@tessel.example"]),
]
REGIONS = [
    ["Region", "Opens", "Purpose"],
    ["us-east", "Q3 2025", "customers in North America"],
    ["ap-southeast", "Q4 2025", "customers in Asia and Oceania"],
]
SLIDE_NOTES = {3: "Offline maps depend on the new tile format; the date moves if its beta slips."}

PLANS = [
    ["Plan", "Monthly price per user (EUR)", "Storage per user", "Maximum users", "Support"],
    ["Free", 0, "5 GiB", 3, "community forum"],
    ["Team", 6, "1 TiB", 50, "email, 8 business hours"],
    ["Business", 12, "5 TiB", 500, "email and phone, 2 business hours"],
    ["Enterprise", 20, "unlimited", "unlimited", "dedicated manager, 1 hour"],
]
ADD_ONS = [
    ["Add-on", "Price", "Available on", "Notes"],
    ["Extra storage", "5 EUR per TiB per month", "Team, Business", "bought in steps of 1 TiB"],
    ["Email digest branding", "2 EUR per month", "Business", "your logo on notification emails"],
    ["Data residency", "included", "Enterprise", "choose the region that stores your files"],
    ["Priority restore", "150 EUR per restore", "Team, Business", "restore within 4 hours"],
    [
        "Advanced audit log",
        "3 EUR per user per month",
        "Business, Enterprise",
        "keeps audit events for 7 years",
    ],
    ["Ransomware protection", "1 EUR per user per month", "all paid plans", "locks versions for 30 days"],
    ["Custom domain", "10 EUR per month", "Business, Enterprise", "share links on your own domain"],
]

INCIDENTS = [
    ["date", "component", "severity", "duration (minutes)", "summary"],
    ["2024-02-06", "Sync API", "SEV3", "35", "Slow uploads from the desktop client after a config change"],
    [
        "2024-03-14",
        "Web interface",
        "SEV2",
        "58",
        "Web interface unavailable after a failed deploy; rolled back",
    ],
    ["2024-04-02", "Database", "SEV3", "20", "Failover test took longer than planned"],
    ["2024-05-23", "Share links", "SEV2", "41", "Share links returned errors for customers in eu-north"],
    ["2024-06-11", "Thumbnails", "SEV4", "180", "Thumbnails delayed by a full job queue"],
    ["2024-07-09", "Sync API", "SEV3", "15", "Rate limiter rejected requests from large teams"],
    [
        "2024-08-21",
        "Object storage",
        "SEV1",
        "47",
        "Uploads failed in eu-central because a storage certificate expired",
    ],
    ["2024-09-30", "Admin console", "SEV4", "90", "Quota charts showed bytes instead of GiB"],
    ["2024-10-17", "Sync API", "SEV2", "26", "Clients looped on conflict resolution after a bad release"],
]

ADMIN_CHAPTERS: list[tuple[str, list[tuple[str, str]]]] = [
    (
        "Installing Driftwood",
        [
            ("h2", "Requirements"),
            (
                "p",
                "Driftwood Files Server runs on Linux with PostgreSQL 14 or newer and an S3-compatible "
                "object store. A server for up to 200 users needs 4 CPU cores and 8 GB of memory.",
            ),
            ("h2", "First start"),
            (
                "p",
                "The first start creates the database schema and prints a one-time link for the "
                "first administrator account. The link expires after 24 hours.",
            ),
        ],
    ),
    (
        "User quotas",
        [
            (
                "p",
                "Every user has a storage quota. The default storage quota of a new user is 50 GiB; "
                "administrators change it per user or per group in the admin console.",
            ),
            ("h2", "When a quota is full"),
            (
                "p",
                "A user whose quota is full can still download and delete files, but new uploads "
                "fail with a clear message until space is freed or the quota is raised.",
            ),
        ],
    ),
    (
        "Email notifications",
        [
            (
                "p",
                "Driftwood sends its email through the SMTP relay set in the admin console. "
                "Notifications about shared folders are collected and sent as one digest every "
                "30 minutes, so a busy folder does not flood anyone's inbox.",
            ),
        ],
    ),
]


def normalised_zip(data: bytes) -> bytes:
    """``data`` (a zip file) with every member's timestamp and attributes fixed, order and compression kept."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            member = zipfile.ZipInfo(info.filename, date_time=ZIP_DATE)
            member.compress_type = info.compress_type
            member.external_attr = 0o644 << 16
            target.writestr(member, source.read(info))
    return out.getvalue()


def _saved(document: Any, title: str, author: str) -> bytes:
    """A python-docx or python-pptx document with fixed properties, saved and normalised."""
    properties = document.core_properties
    properties.title = title
    properties.author = author
    properties.created = properties.modified = DATE
    properties.revision = 1
    buffer = io.BytesIO()
    document.save(buffer)
    return normalised_zip(buffer.getvalue())


def build_docx() -> bytes:
    from docx import Document

    document = Document()
    for kind, content in ONBOARDING:
        if kind == "title":
            document.add_heading(str(content), level=0)
        elif kind in ("h1", "h2"):
            document.add_heading(str(content), level=int(kind[1]))
        elif kind == "li":
            document.add_paragraph(str(content), style="List Bullet")
        elif kind == "table":
            rows = content
            assert isinstance(rows, list)
            table = document.add_table(rows=len(rows), cols=len(rows[0]))
            table.style = "Table Grid"
            for r, values in enumerate(rows):
                for c, value in enumerate(values):
                    table.cell(r, c).text = value
        else:
            document.add_paragraph(str(content))
    return _saved(document, "Tessel Maps Support Team Onboarding", "Tessel Support")


def build_pptx() -> bytes:
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    for number, (title, bullets) in enumerate(SLIDES, 1):
        layout = deck.slide_layouts[0 if number == 1 else 5 if number == 4 else 1]
        slide = deck.slides.add_slide(layout)
        slide.shapes.title.text = title
        if number == 1:
            slide.placeholders[1].text = bullets[0]
        elif number == 4:
            shape = slide.shapes.add_table(
                len(REGIONS), len(REGIONS[0]), Inches(0.8), Inches(2), Inches(8.4), Inches(1.5)
            )
            for r, values in enumerate(REGIONS):
                for c, value in enumerate(values):
                    shape.table.cell(r, c).text = value
        else:
            body = slide.placeholders[1].text_frame
            body.text = bullets[0]
            for bullet in bullets[1:]:
                body.add_paragraph().text = bullet
        if number in SLIDE_NOTES:
            slide.notes_slide.notes_text_frame.text = SLIDE_NOTES[number]
    return _saved(deck, "Tessel Maps Roadmap 2025", "Tessel Product")


def build_xlsx() -> bytes:
    from openpyxl import Workbook
    from openpyxl.writer.excel import ExcelWriter

    workbook = Workbook()
    plans = workbook.active
    plans.title = "Plans"
    for row in PLANS:
        plans.append(row)
    add_ons = workbook.create_sheet("Add-ons")
    for row in ADD_ONS:
        add_ons.append(row)
    workbook.properties.title = "Kiteline Price List"
    workbook.properties.creator = "Kiteline Sales"
    workbook.properties.created = workbook.properties.modified = DATE
    buffer = io.BytesIO()
    # ExcelWriter rather than Workbook.save, which stamps the time of saving into the file
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        ExcelWriter(workbook, archive).save()
    return normalised_zip(buffer.getvalue())


def build_csv() -> bytes:
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows(INCIDENTS)
    return text.getvalue().encode()


def build_epub() -> bytes:
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("urn:uuid:6f1d2a8e-driftwood-admin-guide")
    book.set_title("Driftwood Files Administrator's Guide")
    book.set_language("en")
    book.add_author("Driftwood Documentation Team")
    chapters = []
    for number, (title, blocks) in enumerate(ADMIN_CHAPTERS, 1):
        body = [f"<h1>{title}</h1>"]
        body += [
            f"<{'h2' if kind == 'h2' else 'p'}>{text}</{'h2' if kind == 'h2' else 'p'}>"
            for kind, text in blocks
        ]
        chapter = epub.EpubHtml(title=title, file_name=f"chapter-{number}.xhtml", lang="en")
        chapter.content = "<html><body>" + "".join(body) + "</body></html>"
        book.add_item(chapter)
        chapters.append(chapter)
    book.toc = chapters
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", *chapters]
    buffer = io.BytesIO()
    epub.write_epub(buffer, book, {"mtime": DATE.replace(tzinfo=UTC)})
    return normalised_zip(buffer.getvalue())


FILES: dict[str, Callable[[], bytes]] = {
    "support-onboarding.docx": build_docx,
    "roadmap-2025.pptx": build_pptx,
    "price-list.xlsx": build_xlsx,
    "status-history.csv": build_csv,
    "admin-guide.epub": build_epub,
}


def main(argv: list[str]) -> int:
    output = Path(argv[1]) if len(argv) > 1 else DEFAULT_OUTPUT
    output.mkdir(parents=True, exist_ok=True)
    for name, build in FILES.items():
        data = build()
        (output / name).write_bytes(data)
        print(f"wrote {output / name} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
