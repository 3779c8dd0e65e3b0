"""The library snippets of the docs pages run as they stand, as a user who copies them would run them."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path

from tests.snippets import snippet

ROOT = Path(__file__).resolve().parent.parent


async def test_the_toolsets_only_snippet_answers_with_citation_cards(
    corpus_kb_template: Path, tmp_path: Path
) -> None:
    shutil.copytree(corpus_kb_template, tmp_path / ".ragstream" / "data" / "kb")
    script = tmp_path / "snippet.py"
    script.write_text(snippet("toolsets-only composition"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()[-3000:]
    text = out.decode()
    assert "35 days [" in text
    cited = text.split("35 days [")[1].split("]")[0]
    assert f"[{cited}] Kiteline Cloud Operations Handbook" in text, text
