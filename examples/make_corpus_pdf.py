"""Generate ``examples/corpus/operations-handbook.pdf``, the PDF of the sample corpus.

The handbook belongs to the fictional Kiteline Cloud service (see ``release-notes.txt``). Its
facts live on specific pages so that tests can check page numbers reach the chunks:

- page 1: purpose, scope, service overview, contacts
- page 2: backup policy (nightly backups kept 35 days, monthly backups kept 12 months)
- page 3: incident severity levels (SEV1 to SEV4)
- page 4: on-call rotation
- page 5: change management and maintenance windows

The output is deterministic: a fixed creation date and no other timestamps, so running the
script again produces byte-identical output. Only core PDF fonts and Latin-1 text are used, so
``pypdf`` extracts the text cleanly page by page.

Usage: ``python examples/make_corpus_pdf.py [OUTPUT]`` (needs ``fpdf2``).
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

from fpdf import FPDF

TITLE = "Kiteline Cloud Operations Handbook"
SUBJECT = "Backups, incident severity levels, on-call rotation and change management"
CREATION_DATE = datetime(2024, 6, 3, 9, 0, 0, tzinfo=UTC)
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "corpus" / "operations-handbook.pdf"

# Each page is a list of blocks: ("h1" | "h2" | "p" | "li", text). One entry per page, so a
# section always starts on its own page and page numbers are stable.
PAGES: list[list[tuple[str, str]]] = [
    [
        ("h1", "Kiteline Cloud Operations Handbook"),
        (
            "p",
            "Revision 4.2. Owner: Platform Operations team. Applies to the production and staging "
            "environments of Kiteline Cloud, the hosted edition of the Kiteline Sync Server.",
        ),
        ("h2", "Purpose of this handbook"),
        (
            "p",
            "This handbook describes how the Platform Operations team keeps Kiteline Cloud running: "
            "how customer data is backed up and restored, how incidents are classified and handled, "
            "who is on call and how changes reach production. It is written for engineers joining the "
            "on-call rotation and for anyone who needs to know what the team has promised to do. Where "
            "this handbook and a runbook disagree, the handbook wins until the runbook is corrected.",
        ),
        ("h2", "Service overview"),
        (
            "p",
            "Kiteline Cloud runs in two regions. The primary region, eu-central, serves all customer "
            "traffic. The secondary region, eu-north, holds backup copies and a warm standby of the "
            "database that can be promoted if the primary region is lost. Each region runs the "
            "Kiteline application servers behind a load balancer, a PostgreSQL cluster of three "
            "nodes, and an object store for file blocks. Customer files are stored as deduplicated, "
            "encrypted blocks; the database holds the file index, sharing settings and audit logs.",
        ),
        (
            "p",
            "The service level objective for availability is 99.9 percent per calendar month, "
            "measured as the share of successful requests to the sync API. This allows roughly "
            "43 minutes of full downtime per month. Planned maintenance inside an announced window "
            "does not count against the objective.",
        ),
        ("h2", "Contacts"),
        ("li", "Operations duty phone (routes to the primary on-call engineer): +44 20 7946 0815"),
        ("li", "Team chat channel: #kiteline-ops. Incident channels are named #inc-<date>-<topic>."),
        ("li", "Head of Platform Operations: Priya Raman."),
        ("li", "Security incidents: security@kiteline.example, in addition to the duty phone."),
        ("h2", "Conventions"),
        (
            "p",
            "All times in this handbook are UTC unless a local time is stated. Must means a rule "
            "that may only be broken with written approval from the Head of Platform Operations; "
            "should means a strong default that an engineer may depart from with a good reason, "
            "which they record in the incident or change ticket.",
        ),
    ],
    [
        ("h1", "Backup policy"),
        (
            "p",
            "Backups protect customer data against deletion, corruption and the loss of a whole "
            "region. Every backup is encrypted with AES-256 before it leaves the primary region and "
            "is written to object storage in eu-north, so that no single region holds both the live "
            "data and its backups.",
        ),
        ("h2", "What is backed up and when"),
        (
            "li",
            "Database: a full backup of the PostgreSQL cluster every night at 02:00 UTC, plus "
            "continuous archiving of the write-ahead log, shipped at least every 5 minutes.",
        ),
        (
            "li",
            "File blocks: the object store is replicated to eu-north continuously; deleted blocks "
            "are kept for 35 days before they are purged.",
        ),
        (
            "li",
            "Configuration: the infrastructure repository and the secrets vault are backed up "
            "nightly at 03:00 UTC.",
        ),
        ("h2", "Retention"),
        (
            "p",
            "Nightly database backups are retained for 35 days. The backup taken on the first "
            "night of each month is kept as a monthly backup and retained for 12 months. "
            "Write-ahead log archives are retained for 7 days, which allows a point-in-time "
            "restore to any moment in the last week. Backups older than their retention period are "
            "deleted automatically by a lifecycle rule; nobody deletes backups by hand.",
        ),
        (
            "p",
            "Customers who delete their account are removed from the live database at once. Their "
            "data disappears from backups as those backups expire, so after at most 12 months no "
            "copy remains. This is stated in the customer data processing agreement.",
        ),
        ("h2", "Recovery objectives"),
        (
            "p",
            "The recovery point objective (RPO) is 5 minutes for the database and the recovery "
            "time objective (RTO) is 4 hours for a full regional failover. For the restore of a "
            "single customer's data from a nightly backup the target is one working day.",
        ),
        ("h2", "Restore tests"),
        (
            "p",
            "A restore test is carried out every quarter, in the first week of January, April, "
            "July and October. The on-call secondary engineer restores the latest nightly backup "
            "and the write-ahead log into an isolated environment, runs the consistency checker "
            "and records the elapsed time in the restore log. A test that fails, or that takes "
            "longer than the RTO, is treated as a SEV3 incident.",
        ),
        (
            "p",
            "Backup monitoring pages the on-call engineer if a nightly backup has not completed by "
            "05:00 UTC, or if no write-ahead log segment has been archived for 15 minutes.",
        ),
    ],
    [
        ("h1", "Incident severity levels"),
        (
            "p",
            "Every incident is given a severity level as soon as it is declared. The level decides "
            "how fast we respond, who is involved and how we communicate. When in doubt, choose the "
            "higher severity; downgrading later is cheap, responding too slowly is not.",
        ),
        ("h2", "SEV1 - critical"),
        (
            "p",
            "The service is unavailable or customer data is at risk for many customers: sync fails "
            "for more than 25 percent of requests, data loss or corruption is suspected, or a "
            "security breach is confirmed. The on-call engineer must acknowledge within 5 minutes "
            "and an incident commander is appointed at once. The status page is updated within "
            "15 minutes and then at least every 30 minutes. The Head of Platform Operations is "
            "informed immediately, day or night.",
        ),
        ("h2", "SEV2 - major"),
        (
            "p",
            "A core feature is broken or badly degraded for many customers, or the service is down "
            "for a single large customer: uploads slow to a crawl, share links fail, or the web "
            "interface is unavailable while the sync clients still work. Acknowledge within 15 "
            "minutes; update the status page within 30 minutes and then every hour.",
        ),
        ("h2", "SEV3 - minor"),
        (
            "p",
            "A problem with a workaround, or affecting a small number of customers: a failed "
            "restore test, delayed thumbnails, a degraded admin console. Handled during working "
            "hours, with a first response within 4 working hours. No status page update is "
            "required.",
        ),
        ("h2", "SEV4 - low"),
        (
            "p",
            "A cosmetic defect or an internal issue without customer impact, such as a noisy alert "
            "or a dashboard showing wrong units. Tracked as an ordinary ticket and fixed in the "
            "normal course of work.",
        ),
        ("h2", "After the incident"),
        (
            "p",
            "Every SEV1 and SEV2 incident gets a blameless postmortem. The incident commander "
            "writes it within 5 working days and presents it at the weekly operations review. The "
            "postmortem states the timeline, the customer impact, the contributing causes and the "
            "follow-up actions, each with an owner and a due date. SEV3 incidents get a short "
            "written summary in the ticket instead.",
        ),
    ],
    [
        ("h1", "On-call rotation"),
        (
            "p",
            "Six engineers share the on-call rotation. At any time two of them are on call: a "
            "primary, who receives every page first, and a secondary, who backs up the primary and "
            "takes over if they cannot respond.",
        ),
        ("h2", "Shifts and handover"),
        (
            "p",
            "A shift lasts one week. Handover happens every Monday at 10:00 local time in a "
            "15-minute call between the outgoing and incoming engineers, who go through open "
            "incidents, alerts that fired during the week and any changes planned for the coming "
            "week. The outgoing primary becomes the incoming secondary, so every engineer serves "
            "one week as primary followed by one week as secondary.",
        ),
        (
            "p",
            "Nobody is on call for more than one week in three, counting primary and secondary weeks "
            "separately. Swaps are allowed when both engineers agree and the swap is entered in the "
            "rota tool at least 48 hours in advance.",
        ),
        ("h2", "Paging and escalation"),
        ("li", "The primary must acknowledge a page within 5 minutes and be at a laptop within 15 minutes."),
        (
            "li",
            "If the primary does not acknowledge within 10 minutes, the page escalates to the "
            "secondary automatically.",
        ),
        (
            "li",
            "If neither acknowledges within 20 minutes, the page escalates to the Head of Platform "
            "Operations.",
        ),
        (
            "li",
            "The primary may escalate to the secondary at any time, for any reason, without "
            "having to justify it.",
        ),
        ("h2", "Compensation and rest"),
        (
            "p",
            "Engineers receive an on-call allowance for every week on the rotation, as a primary or "
            "a secondary. An engineer who is paged between 22:00 and 07:00 local time starts work "
            "late the next day, by as many hours as the night's incident took, and at least two "
            "hours. After a SEV1 incident at night the engineer takes the following day off and the "
            "secondary covers the primary role.",
        ),
        ("h2", "Before your first shift"),
        (
            "p",
            "New engineers shadow one full primary week before joining the rotation. During that "
            "week they receive every page alongside the primary but are not expected to act. "
            "They must also have completed a restore test and read this handbook.",
        ),
    ],
    [
        ("h1", "Change management and maintenance windows"),
        (
            "p",
            "Most incidents start with a change. The rules on this page make changes small, "
            "reviewed, reversible and well timed.",
        ),
        ("h2", "Types of change"),
        (
            "li",
            "Standard change: a routine, pre-approved change with a runbook, such as adding "
            "storage or rotating a certificate. No further approval is needed.",
        ),
        (
            "li",
            "Normal change: any other change to production. It needs a ticket with a rollback "
            "plan and approval from two engineers, one of whom must be on the Platform "
            "Operations team.",
        ),
        (
            "li",
            "Emergency change: a change needed to resolve an ongoing SEV1 or SEV2 incident. The "
            "incident commander approves it; the ticket is written afterwards, within one working "
            "day.",
        ),
        ("h2", "Maintenance windows"),
        (
            "p",
            "Changes that may interrupt customers are made only in the weekly maintenance windows, "
            "on Tuesdays and Thursdays from 05:00 to 07:00 UTC, when traffic is lowest. Customers "
            "are notified on the status page at least 72 hours before a window is used. Work that "
            "is not finished by the end of the window is rolled back, not rushed.",
        ),
        ("h2", "Change freeze"),
        (
            "p",
            "No normal changes are made to production from 18 December to 3 January, and during "
            "the 48 hours before a major customer-facing launch. Standard and emergency changes "
            "remain possible during a freeze.",
        ),
        ("h2", "Deploying new releases"),
        (
            "p",
            "New Kiteline releases are deployed to Kiteline Cloud within two weeks of their "
            "publication. A release goes to staging first and then to production in three steps: "
            "5 percent of customers, then 50 percent after 24 hours, then everyone after another 24 "
            "hours. Each step is stopped and rolled back if the error rate of the sync API rises "
            "above 0.5 percent.",
        ),
        ("h2", "Review of this handbook"),
        (
            "p",
            "The Platform Operations team reviews this handbook every six months and after every "
            "SEV1 incident. Proposed changes go through the same review as a normal change.",
        ),
    ],
]


class HandbookPDF(FPDF):
    def header(self) -> None:
        self.set_font("Helvetica", "I", 8)
        self.set_text_color(110, 110, 110)
        self.cell(0, 6, f"{TITLE} - revision 4.2", align="R", new_x="LMARGIN", new_y="NEXT")
        self.ln(2)
        self.set_text_color(0, 0, 0)

    def footer(self) -> None:
        self.set_y(-15)
        self.set_font("Helvetica", "I", 8)
        self.set_text_color(110, 110, 110)
        self.cell(0, 10, f"Page {self.page_no()} of {len(PAGES)}", align="C")
        self.set_text_color(0, 0, 0)


def build() -> bytes:
    pdf = HandbookPDF(format="A4")
    pdf.set_margins(20, 18, 20)
    pdf.set_auto_page_break(auto=True, margin=20)
    pdf.set_title(TITLE)
    pdf.set_author("Kiteline Platform Operations")
    pdf.set_subject(SUBJECT)
    pdf.set_creator("ragstream examples/make_corpus_pdf.py")
    pdf.set_creation_date(CREATION_DATE)
    for blocks in PAGES:
        pdf.add_page()
        for kind, text in blocks:
            if kind == "h1":
                pdf.set_font("Helvetica", "B", 17)
                pdf.multi_cell(0, 9, text, new_x="LMARGIN", new_y="NEXT")
                pdf.ln(2)
            elif kind == "h2":
                pdf.ln(2)
                pdf.set_font("Helvetica", "B", 12)
                pdf.multi_cell(0, 7, text, new_x="LMARGIN", new_y="NEXT")
                pdf.ln(1)
            elif kind == "li":
                pdf.set_font("Helvetica", "", 10.5)
                pdf.set_x(pdf.l_margin + 4)
                pdf.multi_cell(0, 5.5, f"- {text}", new_x="LMARGIN", new_y="NEXT")
                pdf.ln(1)
            else:
                pdf.set_font("Helvetica", "", 10.5)
                pdf.multi_cell(0, 5.5, text, new_x="LMARGIN", new_y="NEXT")
                pdf.ln(2)
    if pdf.page_no() != len(PAGES):
        raise RuntimeError(f"content overflowed: {pdf.page_no()} pages instead of {len(PAGES)}")
    return bytes(pdf.output())


def main(argv: list[str]) -> int:
    output = Path(argv[1]) if len(argv) > 1 else DEFAULT_OUTPUT
    data = build()
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_bytes(data)
    print(f"wrote {output} ({len(data)} bytes, {len(PAGES)} pages)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
