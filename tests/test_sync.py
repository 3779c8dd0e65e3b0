"""Syncing a folder or an S3 prefix into the knowledge base: added, changed and removed files, unchanged
ones skipped by content hash, a failing file reported while the rest land, and the sync's documents
kept apart from other syncs' and from documents ingested by hand or uploaded. The S3 prefix lives on
moto's S3 server (tests/s3_helpers.py), reached through the standard AWS variables only.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import boto3
import pytest

from rag_tools.kb import IngestProgress, KnowledgeBase, SyncPlan, SyncSourceError
from rag_tools.kb.access import Reader
from tests.conftest import ROOT
from tests.embedders import HashingEmbeddingModel
from tests.s3_helpers import S3Location
from tests.servers import RAGSTREAM

pytestmark = pytest.mark.timeout(300)

BROKEN_PDF = b"%PDF-1.4\nthis is not a PDF body"


def outcomes(report: Any) -> dict[str, str]:
    return {o.source: o.status for o in report.outcomes}


async def listed(kb: KnowledgeBase) -> dict[str, str]:
    """uri -> document id of everything the knowledge base lists."""
    page = await kb.list_documents(page_size=500)
    return {d.uri: d.document_id for d in page.documents}


class Folder:
    """A sync source that is a local folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.spec = str(root)

    def put(self, name: str, data: bytes) -> None:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    def remove(self, name: str) -> None:
        (self.root / name).unlink()


class Bucket:
    """A sync source that is an S3 prefix, written with boto3 as another tool would."""

    def __init__(self, location: S3Location, prefix: str) -> None:
        self.bucket = location.uri.removeprefix("s3://").split("/", 1)[0]
        self.prefix = prefix
        self.spec = f"s3://{self.bucket}/{prefix}"
        env = location.aws_env
        self.client = boto3.client(
            "s3",
            endpoint_url=env["AWS_ENDPOINT_URL"],
            region_name=env["AWS_REGION"],
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        )

    def put(self, name: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=f"{self.prefix}/{name}", Body=data)

    def remove(self, name: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=f"{self.prefix}/{name}")


@pytest.fixture(params=["folder", "s3"])
def source(request: pytest.FixtureRequest, tmp_path: Path) -> Folder | Bucket:
    if request.param == "folder":
        return Folder(tmp_path / "shared")
    location = request.getfixturevalue("s3_location")
    monkeypatch = request.getfixturevalue("monkeypatch")
    for name, value in location.aws_env.items():
        monkeypatch.setenv(name, value)
    return Bucket(location, "team/handbook")


async def test_sync_adds_updates_deletes_and_skips_unchanged(source: Folder | Bucket, tmp_path: Path) -> None:
    source.put("backups.md", b"# Backups\n\nNightly backups are kept for 35 days in the vault.")
    source.put("guides/ports.md", b"# Ports\n\nThe gateway listens on port 7443.")
    source.put("old.txt", b"The old intranet retires in March.")
    source.put("broken.pdf", BROKEN_PDF)
    source.put(".hidden/secret.md", b"# Hidden\n\nNot to be synced.")
    source.put("tool.exe", b"MZ\x00\x00")
    source.put("guides/~$ports.docx", b"\x05alice")  # Word's owner file while someone has it open
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as kb:
        plans: list[SyncPlan] = []
        seen: list[IngestProgress] = []
        first = await kb.sync(source.spec, on_plan=plans.append, on_progress=seen.append)
        assert outcomes(first) == {
            "backups.md": "added",
            "broken.pdf": "error",
            "guides/ports.md": "added",
            "old.txt": "added",
        }
        assert next(o for o in first.outcomes if o.status == "error").error.startswith("not a readable PDF")
        assert plans[0].names == ["backups.md", "broken.pdf", "guides/ports.md", "old.txt"]
        assert seen[-1].files_done == seen[-1].files_total == 4
        docs = await listed(kb)
        assert set(docs) == {
            "backups.md",
            "guides/ports.md",
            "old.txt",
        }  # the failing file did not stop the rest
        hits = await kb.search("how long are backups kept", limit=1)
        assert hits[0].uri == "backups.md"
        backups = await kb.get_document_by_id(docs["backups.md"])

        source.put("guides/ports.md", b"# Ports\n\nThe gateway moved to port 9443.")  # changed
        source.remove("old.txt")  # removed
        source.put("new.md", b"# New\n\nThe numbat is the mascot.")  # added
        source.put("broken.pdf", b"# Not a PDF any more?")  # still broken as a PDF
        second = await kb.sync(source.spec)
        assert outcomes(second) == {
            "backups.md": "unchanged",
            "broken.pdf": "error",
            "guides/ports.md": "updated",
            "new.md": "added",
            "old.txt": "deleted",
        }
        assert [o.source for o in second.outcomes][-1] == "old.txt"  # deletions come last
        docs = await listed(kb)
        assert set(docs) == {"backups.md", "guides/ports.md", "new.md"}
        unchanged = await kb.get_document_by_id(docs["backups.md"])
        assert unchanged is not None and backups is not None and unchanged.updated_at == backups.updated_at
        ports = await kb.get_document_by_id(docs["guides/ports.md"], with_content=True)
        assert ports is not None and "9443" in (ports.content or "")
        assert [h.uri for h in await kb.search("old intranet retires", mode="text")] == []
        original = await kb.get_document_file(docs["new.md"])
        assert original is not None and original.data == b"# New\n\nThe numbat is the mascot."

        third = await kb.sync(source.spec)
        assert {o.status for o in third.outcomes if o.source != "broken.pdf"} == {"unchanged"}
        assert len(third.outcomes) == 4


async def test_a_sync_deletes_only_its_own_documents(tmp_path: Path) -> None:
    """Two syncs (one of a subfolder of the other), a hand ingest and an upload of the same files:
    removing the files deletes each sync's own documents only."""
    shared = Folder(tmp_path / "shared")
    shared.put("a.md", b"# A\n\nAlpha.")
    shared.put("sub/b.md", b"# B\n\nBeta.")
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as kb:
        await kb.ingest_paths([shared.root])  # by hand: file:// origins
        await kb.ingest_bytes(b"# A\n\nAlpha.", name="a.md")  # an upload of the same name
        whole = await kb.sync(str(shared.root))
        sub = await kb.sync(str(shared.root / "sub"))
        assert outcomes(whole) == {"a.md": "added", "sub/b.md": "added"}  # its own documents, not adopted
        assert outcomes(sub) == {"b.md": "added"}
        assert await kb.count_documents() == 2 + 1 + 2 + 1

        shared.remove("sub/b.md")
        shared.put("sub/c.md", b"# C\n\nGamma.")
        assert outcomes(await kb.sync(str(shared.root / "sub"))) == {"c.md": "added", "b.md": "deleted"}
        # the other sync, the hand-ingested and the uploaded documents are untouched
        page = await kb.list_documents(page_size=500)
        assert sorted(d.uri for d in page.documents) == ["a.md"] * 3 + ["c.md"] + ["sub/b.md"] * 2
        assert outcomes(await kb.sync(str(shared.root))) == {
            "a.md": "unchanged",
            "sub/c.md": "added",
            "sub/b.md": "deleted",
        }
        page = await kb.list_documents(page_size=500)
        assert sorted(d.uri for d in page.documents) == ["a.md"] * 3 + ["c.md", "sub/b.md", "sub/c.md"]


async def test_a_source_that_cannot_be_listed_changes_nothing(
    tmp_path: Path, s3_location: S3Location, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = Folder(tmp_path / "docs")
    folder.put("a.md", b"# A\n\nAlpha.")
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as kb:
        await kb.sync(str(folder.root))
        folder.remove("a.md")
        folder.put("notes.exe", b"MZ")
        with pytest.raises(SyncSourceError, match="holds no file to ingest"):
            await kb.sync(str(folder.root))  # empty: taken for a wrong source, nothing deleted
        with pytest.raises(SyncSourceError, match="no such folder"):
            await kb.sync(str(tmp_path / "missing"))
        with pytest.raises(SyncSourceError, match="only local folders and s3://"):
            await kb.sync("ftp://example.org/docs")
        assert list(await listed(kb)) == ["a.md"]

        for name, value in s3_location.aws_env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("AWS_ALLOW_HTTP")
        with pytest.raises(SyncSourceError, match="plain http"):
            await kb.sync(s3_location.uri.rsplit("/", 1)[0] + "/docs")
        monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
        with pytest.raises(SyncSourceError, match="answered NoSuchBucket"):
            await kb.sync("s3://no-such-bucket-here/docs")
        with pytest.raises(SyncSourceError, match="holds no file to ingest"):
            await kb.sync(s3_location.uri.rsplit("/", 1)[0] + "/empty-prefix")
        assert list(await listed(kb)) == ["a.md"]


def test_the_sync_command_prints_one_line_per_file(tmp_path: Path) -> None:
    docs = Folder(tmp_path / "docs")
    docs.put("a.md", b"# Alpha\n\nAlpha keeps backups for 30 days.")
    docs.put("b.txt", b"Beta listens on port 9000.")
    docs.put("c.pdf", BROKEN_PDF)
    env = {**os.environ, "RAGSTREAM_DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": str(ROOT)}

    def sync(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*RAGSTREAM, "sync", str(docs.root), *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=300,
        )

    first = sync()
    assert first.returncode == 1  # a file failed
    assert first.stdout.splitlines() == [
        "added: a.md (1 chunks)",
        "added: b.txt (1 chunks)",
        "2 added, 0 updated, 0 unchanged, 1 failed; 2 chunks written",
    ]
    assert "error: c.pdf: not a readable PDF" in first.stderr
    assert "ingesting (3/3 files)" in first.stderr  # the progress bar

    docs.remove("c.pdf")
    docs.remove("b.txt")
    docs.put("a.md", b"# Alpha\n\nAlpha keeps backups for 60 days.")
    second = sync("--no-progress")
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines() == [
        "updated: a.md (1 chunks)",
        "deleted: b.txt",
        "0 added, 1 updated, 0 unchanged, 1 deleted, 0 failed; 1 chunks written",
    ]
    assert second.stderr == ""

    missing = subprocess.run(
        [*RAGSTREAM, "sync", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert missing.returncode == 1
    assert missing.stderr.strip().endswith(f"cannot sync {tmp_path / 'nope'}: no such folder")


async def test_a_sync_with_groups_makes_its_documents_readable_by_those_groups_only(tmp_path: Path) -> None:
    """``sync --groups``: every synced document gets the groups; a later sync without them keeps
    them, one with other groups changes them without re-embedding the unchanged files."""
    folder = Folder(tmp_path / "hr")
    folder.put("pay.md", b"# Pay\n\nSalaries are paid on the 25th.")
    folder.put("leave.md", b"# Leave\n\nThirty days of leave a year.")
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as kb:
        assert outcomes(await kb.sync(str(folder.root), groups=["hr"])) == {
            "pay.md": "added",
            "leave.md": "added",
        }
        page = await kb.list_documents(page_size=50)
        assert {d.uri: d.groups for d in page.documents} == {"pay.md": ["hr"], "leave.md": ["hr"]}
        hr, eng = kb.restricted(Reader.member_of(["hr"])), kb.restricted(Reader.member_of(["eng"]))
        assert [h.uri for h in await hr.search("When are salaries paid?", limit=5)][:1] == ["pay.md"]
        assert await eng.search("When are salaries paid?", limit=5) == []
        assert (await eng.list_documents(page_size=50)).documents == []

        assert set(outcomes(await kb.sync(str(folder.root))).values()) == {"unchanged"}
        page = await kb.list_documents(page_size=50)
        assert {d.groups[0] for d in page.documents} == {"hr"}  # kept without --groups

        await kb.sync(str(folder.root), groups=[])  # everyone's again, nothing re-embedded
        page = await kb.list_documents(page_size=50)
        assert {tuple(d.groups) for d in page.documents} == {()}
        assert [h.uri for h in await eng.search("When are salaries paid?", limit=5)][:1] == ["pay.md"]


def test_a_file_is_ingestible_by_its_suffix_only() -> None:
    """A file named like a suffix (``txt``, ``md``) has none: a folder's ingestion and a sync pass it by."""
    from rag_tools.kb.sources import is_ingestible

    assert is_ingestible("guide.MD") and is_ingestible("docs/notes.txt")
    assert not is_ingestible("txt") and not is_ingestible("docs/md") and not is_ingestible("docs/pdf")
    assert not is_ingestible(".hidden/guide.md") and not is_ingestible("docs/.draft.md")
    assert not is_ingestible("docs/~$report.docx") and is_ingestible("docs/report~$.docx")
