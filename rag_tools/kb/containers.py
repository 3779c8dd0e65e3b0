"""Checks on an office file's container before a parser opens it: disguises, encryption, zip bombs.

``.docx``, ``.pptx``, ``.xlsx`` and ``.epub`` files are zip archives. Python's ``zipfile`` never
inflates a member past the size its directory declares (it stops there and checks the CRC), so the
declared sizes bound what any parser built on it can unpack: checking them before parsing bounds
the memory and time a hostile archive can cost. A password-protected Office file is not a zip but
an OLE2 compound file holding an ``EncryptedPackage`` stream; legacy ``.doc``/``.xls``/``.ppt``
files are OLE2 files too. Every failure is a ``ValueError`` with one line saying what is wrong.
"""

from __future__ import annotations

import io
import zipfile

__all__ = [
    "MAX_COMPRESSION_RATIO",
    "MAX_MEMBERS",
    "MAX_UNPACKED_BYTES",
    "check_container",
]

MAX_MEMBERS = 10_000
MAX_UNPACKED_BYTES = 256 * 2**20
#: A member that inflates more than this many times its packed size (once over ``_RATIO_FLOOR``) is
#: a zip bomb: real office XML packs 5-30x, pictures about 1x; deflate tops out near 1,030x.
MAX_COMPRESSION_RATIO = 200
_RATIO_FLOOR = 2**20
_OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ENCRYPTED = "EncryptedPackage".encode("utf-16-le")
#: The member every file of a format has: a zip without it is something else named like one.
_REQUIRED = {
    "docx": "word/document.xml",
    "pptx": "ppt/presentation.xml",
    "xlsx": "xl/workbook.xml",
    "epub": "META-INF/container.xml",
}
_LEGACY = {"docx": ".doc", "pptx": ".ppt", "xlsx": ".xls"}


def check_container(data: bytes, fmt: str) -> None:
    """Raise ``ValueError`` unless ``data`` is a plausible, safely sized ``fmt`` zip archive."""
    if data.startswith(_OLE2):
        if _ENCRYPTED in data:
            raise ValueError("the file is password-protected (encrypted); save a copy without a password")
        legacy = _LEGACY.get(fmt, "a legacy Office format")
        raise ValueError(f"this is a legacy binary Office file ({legacy}), not .{fmt}: save it as .{fmt}")
    if not data.startswith(b"PK"):
        raise ValueError(f"not a .{fmt} file (it is not a zip archive)")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError) as exc:
        raise ValueError(f"not a readable .{fmt} file (broken zip archive: {exc})") from None
    if len(members) > MAX_MEMBERS:
        raise ValueError(f"the archive holds {len(members):,} files; at most {MAX_MEMBERS:,} are read")
    unpacked = sum(member.file_size for member in members)
    if unpacked > MAX_UNPACKED_BYTES:
        raise ValueError(
            f"the archive unpacks to {unpacked / 2**20:,.0f} MiB, over the {MAX_UNPACKED_BYTES // 2**20} MiB "
            "limit (a zip bomb?)"
        )
    for member in members:
        ratio = member.file_size / max(member.compress_size, 1)
        if member.file_size > _RATIO_FLOOR and ratio > MAX_COMPRESSION_RATIO:
            raise ValueError(
                f"{member.filename} inflates {ratio:,.0f} times its packed size (a zip bomb?); "
                f"at most {MAX_COMPRESSION_RATIO} times is read"
            )
    required = _REQUIRED.get(fmt)
    if required is not None and required not in {member.filename for member in members}:
        raise ValueError(f"not a .{fmt} file (the archive has no {required})")
