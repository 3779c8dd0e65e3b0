"""Liveness and readiness: ``/health`` answers while the process serves, ``/ready`` names what is down.

A real server with its own redis-server (so the test can stop it): every dependency answers, then
Redis goes away, taking the thread store and the ingestion queue that live in it, while the
knowledge base stays. The other outages (PostgreSQL, the knowledge base on S3 or on disk, a
read-only store) are in tests/test_postgres.py, tests/test_kb_s3.py and tests/test_faults.py.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import scenario_app
from tests.redis_helpers import private_redis
from tests.servers import RAGSTREAM, ROOT, serve, wait_ready

pytestmark = pytest.mark.timeout(120)


async def test_ready_names_what_is_down_and_health_stays_up(scenario_config: Any, redis_prefix: str) -> None:
    with private_redis() as (port, redis_server):
        scenario_config.redis_url = f"redis://127.0.0.1:{port}/0"
        scenario_config.redis_prefix = redis_prefix
        scenario_config.tokens = {"alice": "alice-token"}
        async with (
            serve(scenario_app(scenario_config)) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as http,
        ):
            readiness = await wait_ready(http)  # the ingestion queue connects in the background
            assert readiness.json() == {
                "status": "ready",
                "checks": {"knowledgeBase": "ok", "threadStore": "ok", "redis": "ok", "jobQueue": "ok"},
            }
            alice = {"Authorization": "Bearer alice-token"}
            signed_in = await http.get("/ready", headers=alice)
            assert (
                signed_in.json()["documents"]
                == (await http.get("/documents", headers=alice)).json()["total"]
                > 0
            )

            redis_server.kill()
            redis_server.wait(10)
            down = await http.get("/ready")
            assert down.status_code == 503
            error = down.json()["error"]
            assert error["code"] == "store_unavailable"
            assert error["message"] == (
                "not ready: the thread store, Redis and the ingestion queue are unavailable"
            )
            assert error["details"] == {
                "checks": {"knowledgeBase": "ok", "threadStore": "down", "redis": "down", "jobQueue": "down"}
            }
            live = await http.get("/health")
            assert (live.status_code, live.json()) == (200, {"status": "ok"})
            # every failed use of the thread store is counted, the listing's and readiness's too
            failed = {op: _store_errors(op) for op in ("list", "version")}
            assert (await http.get("/threads", headers=alice)).status_code == 503
            assert (await http.get("/ready")).status_code == 503
            assert {op: _store_errors(op) - failed[op] for op in failed} == {"list": 1, "version": 1}


def _store_errors(operation: str) -> float:
    """``ragstream_thread_store_errors_total`` for ``operation``, in this process (the served app's)."""
    from ragstream.observe import metrics

    found = metrics.registry().get_sample_value(
        "ragstream_thread_store_errors_total", {"operation": operation}
    )
    return found or 0.0


@pytest.mark.timeout(600)
async def test_a_damaged_knowledge_base_is_not_ready_and_says_why(
    scenario_config: Any, tmp_path: Path
) -> None:
    """One truncated data file (the chunks table's largest): counting still works (it reads the
    manifest only), so /ready used to say 200 while every run failed. It reads the data now."""
    chunks = sorted((scenario_config.data_dir / "kb" / "chunks.lance" / "data").glob("*.lance"), key=_size)
    largest = chunks[-1]
    with largest.open("r+b") as data:
        data.truncate(_size(largest) // 2)
    async with (
        serve(scenario_app(scenario_config)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        for _ in range(2):  # and stays so: it is not an outage that passes
            damaged = await http.get("/ready")
            assert damaged.status_code == 503
            error = damaged.json()["error"]
            assert error["code"] == "knowledge_base_unavailable"
            assert error["details"]["checks"]["knowledgeBase"] == "damaged"
            assert error["message"].startswith(
                "not ready: the knowledge base is damaged (a data file cannot be"
            )
            assert (
                "failed to fill whole buffer" in error["message"]
                and "Rebuilding a damaged" in error["message"]
            )
            assert str(tmp_path) not in damaged.text  # no server path for anyone
            assert (await http.get("/health")).status_code == 200

    cli = subprocess.run(
        [*RAGSTREAM, "search", "backups", "--data-dir", str(scenario_config.data_dir)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert cli.returncode == 1
    (line,) = cli.stderr.strip().splitlines()
    assert "is damaged (a data file cannot be read" in line and "unavailable" not in line, line


def _size(path: Path) -> int:
    return path.stat().st_size
