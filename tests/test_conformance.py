"""``ag-ui-validate`` (the AG-UI conformance validator from PyPI) against the live server.

Two streams are checked with ``--fail-on warning``: the validator's own request to ``/agui``, and a
recorded second turn of a thread (a search with its ``ragstream.progress`` events, state baseline
and deltas, a streamed cited answer). Neither may carry a warning or an error, and none of
ragstream's own CUSTOM events may be reported as un-namespaced (pydantic-ai's own
``pydantic_ai_conversation_saved`` is pydantic-ai's to name).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ragstream.app import create_app
from tests.protocol import parse_sse, run_body
from tests.servers import serve

VALIDATOR = shutil.which("ag-ui-validate", path=str(Path(sys.executable).parent))
UPSTREAM_EVENTS = ("pydantic_ai_",)


@pytest.fixture
async def product_server(scenario_config: Any) -> AsyncIterator[str]:
    async with serve(create_app(scenario_config)) as url:
        yield url


async def validate(target: str) -> dict[str, Any]:
    """The validator's JSON report (it runs beside this test's event loop, which serves the app)."""
    assert VALIDATOR, "ag-ui-validate is part of the test extra: bash scripts/setup.sh test"
    process = await asyncio.create_subprocess_exec(
        VALIDATOR,
        target,
        *("--fail-on", "warning", "--json", "--features", "shared-state"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, _ = await asyncio.wait_for(process.communicate(), 120)
    report = json.loads(stdout)
    assert process.returncode == 0, report["diagnostics"]
    assert report["summary"]["errors"] == report["summary"]["warnings"] == 0
    ours = [
        d
        for d in report["diagnostics"]
        if d["rule"] == "AGUI903" and not any(f"'{prefix}" in d["message"] for prefix in UPSTREAM_EVENTS)
    ]
    assert ours == [], "ragstream's own CUSTOM events must be namespaced"
    return report


async def test_the_live_endpoint_conforms(product_server: str) -> None:
    report = await validate(f"{product_server}/agui")
    assert report["eventCount"] > 3


async def test_a_recorded_second_turn_conforms(product_server: str, tmp_path: Path) -> None:
    async with httpx.AsyncClient(base_url=product_server, timeout=120) as client:
        first = await client.post("/agui", json=run_body("conform", "r1", "How long are backups kept?"))
        state = next(e for _, e in parse_sse(first.text) if e["type"] == "STATE_SNAPSHOT")["snapshot"]
        second = await client.post(
            "/agui", json=run_body("conform", "r2", "Who approves production database changes?", state)
        )
    events = [e for _, e in parse_sse(second.text)]
    assert any(e["type"] == "CUSTOM" and e["name"] == "ragstream.progress" for e in events)
    assert any(e["type"] == "STATE_DELTA" for e in events)
    capture = tmp_path / "turn-2.sse"
    capture.write_text(second.text)
    report = await validate(str(capture))
    assert report["features"]["shared-state"] == "exercised"
