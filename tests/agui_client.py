"""Run the Node driver (tests/js/drive.mjs, the real @ag-ui/client) from Python tests."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

JS = Path(__file__).resolve().parent / "js"


def _require_node() -> str:
    node = shutil.which("node")
    if node is None or not (JS / "node_modules" / "@ag-ui" / "client").exists():
        pytest.fail(
            "node and tests/js/node_modules are required: run `npm ci` in tests/js (scripts/test.sh does)"
        )
    return node


async def drive(
    tmp_path: Path,
    url: str,
    thread_id: str,
    steps: list[dict[str, Any]],
    token: str | None = None,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run a plan through @ag-ui/client; returns its report (see drive.mjs). ``headers`` go with
    every request the client makes."""
    plan = tmp_path / f"plan-{thread_id}.json"
    plan.write_text(
        json.dumps(
            {"url": url, "threadId": thread_id, "token": token, "headers": headers or {}, "steps": steps}
        )
    )
    process = await asyncio.create_subprocess_exec(
        _require_node(),
        str(JS / "drive.mjs"),
        str(plan),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=JS,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()[-3000:]
    report = json.loads(out)
    assert report["unhandled"] == [], report["unhandled"]
    return report
