"""The code blocks of the README and of the docs pages (``docs/``), for the tests that run them as
they stand.

A block is found by the marker on the line before its fence, ``<!-- snippet: NAME -->`` (an HTML
comment: neither GitHub nor the site shows it), wherever it sits: a block moved to another page
keeps its test. Names are unique across the pages.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"

_MARKER = re.compile(r"^\s*<!-- snippet: (?P<name>[^>]+?) -->\s*$")
_FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w+-]*)")


@dataclass(frozen=True)
class Block:
    """One fenced code block: where it is, its language, its text and its marker's name."""

    page: Path
    line: int
    lang: str
    code: str
    name: str | None


def pages() -> list[Path]:
    """The README and every page of the site."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def page(name: str) -> str:
    """The text of the docs page ``docs/<name>.md``."""
    return (DOCS / f"{name}.md").read_text()


def blocks() -> list[Block]:
    """Every fenced code block of every page, in order."""
    found: list[Block] = []
    for path in pages():
        lines = path.read_text().splitlines()
        index = 0
        while index < len(lines):
            opening = _FENCE.match(lines[index])
            if opening is None:
                index += 1
                continue
            indent = opening["indent"]
            end = next(
                (n for n in range(index + 1, len(lines)) if lines[n].strip() == "```"),
                len(lines),
            )
            before = next((lines[n] for n in range(index - 1, -1, -1) if lines[n].strip()), "")
            marker = _MARKER.match(before)
            code = "".join(line.removeprefix(indent) + "\n" for line in lines[index + 1 : end])
            found.append(Block(path, index + 1, opening["lang"], code, marker["name"] if marker else None))
            index = end + 1
    return found


def snippet(name: str) -> str:
    """The text of the one block marked ``<!-- snippet: NAME -->``."""
    found = [block for block in blocks() if block.name == name]
    assert len(found) == 1, f"expected one block marked '<!-- snippet: {name} -->', got {len(found)}"
    return found[0].code


def snippet_json(name: str) -> Any:
    """The marked block, parsed as JSON."""
    return json.loads(snippet(name))


def snippet_env(name: str) -> dict[str, str]:
    """The variables the marked shell block exports (``export A=1 B=2`` lines), as the shell reads
    them (quotes removed, comments dropped)."""
    env: dict[str, str] = {}
    for line in snippet(name).splitlines():
        words = shlex.split(line, comments=True)
        if words[:1] == ["export"]:
            for word in words[1:]:
                key, _, value = word.partition("=")
                env[key] = value
    return env


def shell(name: str, replace: dict[str, str] | None = None) -> str:
    """The marked shell block with each text of ``replace`` swapped for its value (a test's address
    for ``127.0.0.1:8000``, its services for the placeholders); each must occur in the block."""
    code = snippet(name)
    for old, new in (replace or {}).items():
        assert old in code, f"{old!r} is not in the block '{name}'"
        code = code.replace(old, new)
    return code


def bash(code: str) -> list[str]:
    """The command line that runs ``code`` as a user's shell would, stopping at the first failure."""
    return ["bash", "-e", "-o", "pipefail", "-c", code]


def shell_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment with this install's ``ragstream`` first on ``PATH``, plus ``extra``."""
    scripts = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": f"{scripts}{os.pathsep}{os.environ.get('PATH', '')}", **(extra or {})}


def settings(name: str, **values: str) -> dict[str, Any]:
    """The server settings the marked block exports (its ``RAGSTREAM_*`` variables), read as
    ``ragstream`` reads them (``AppConfig``), by field name; ``values`` replace the block's
    placeholders by variable name (each must be one the block sets)."""
    from unittest import mock

    from ragstream.config import AppConfig

    exported = snippet_env(name)
    assert set(values) <= set(exported), sorted(set(values) - set(exported))
    ours = {key: value for key, value in {**exported, **values}.items() if key.startswith("RAGSTREAM_")}
    kept = {key: value for key, value in os.environ.items() if not key.startswith("RAGSTREAM_")}
    with mock.patch.dict(os.environ, {**kept, **ours}, clear=True):
        config = AppConfig()
    return {
        key.removeprefix("RAGSTREAM_").lower(): getattr(config, key.removeprefix("RAGSTREAM_").lower())
        for key in ours
    }
