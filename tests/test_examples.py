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


async def test_custom_agent_agui_example_with_the_real_client(
    corpus_kb_template: Path, tmp_path: Path
) -> None:
    from tests.agui_client import drive
    from tests.protocol import check_stream
    from tests.servers import free_port

    data = tmp_path / "data"
    shutil.copytree(corpus_kb_template, data / "kb")
    port = free_port()
    env = {**os.environ, "RAGSTREAM_DATA_DIR": str(data), "PYTHONPATH": str(ROOT)}
    env.pop("RAGSTREAM_MODEL", None)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "examples" / "custom_agent_agui.py"),
        "--port",
        str(port),
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        import httpx

        async with httpx.AsyncClient() as http:
            for _ in range(600):
                try:
                    await http.post(
                        f"{url}/agui", content=b"{}", headers={"content-type": "application/json"}
                    )
                    break
                except httpx.HTTPError:
                    await asyncio.sleep(0.1)
        report = await drive(
            tmp_path,
            url,
            "example",
            [
                {"op": "user", "text": "How long are nightly database backups retained?"},
                {"op": "run"},
                {"op": "user", "text": "and the monthly ones?"},
                {"op": "run"},
            ],
        )
    finally:
        process.terminate()
        await process.wait()
    first, second = [s for s in report["steps"] if s["op"] == "run"]
    for run in (first, second):
        assert run["warnings"] == []
        assert run["errors"] == []
        assert run["finished"]["outcome"] == "success"
    assert "35 days [" in first["messages"][-1]["content"]
    assert check_stream(first["events"], {}) == first["state"]
    assert any(
        c["title"] == "Kiteline Cloud Operations Handbook" for c in first["state"]["citations"].values()
    )
    assert "12 months" in second["messages"][-1]["content"]
    # the second run's search is the one the state carries (its window holds the latest)
    assert list(second["state"]["searches"]) == ["s2"]
