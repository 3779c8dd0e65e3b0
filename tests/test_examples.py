"""The example programs run as a user would run them."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


async def test_custom_agent_example_answers_offline(corpus_kb_template: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(corpus_kb_template, data / "kb")
    env = {**os.environ, "RAGSTREAM_DATA_DIR": str(data), "PYTHONPATH": str(ROOT)}
    env.pop("RAGSTREAM_MODEL", None)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "examples" / "custom_agent.py"),
        "How long are nightly database backups retained?",
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()
    text = out.decode()
    assert "35 days [" in text
    assert "Kiteline Cloud Operations Handbook (page 2)" in text
    assert '"citations"' in text
    assert "Searches:" in text
