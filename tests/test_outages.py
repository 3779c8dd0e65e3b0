"""A dependency that goes away under a running server is one line when it goes and one when it is
back, whatever its retry loops do in between (the stop channel each second, SAQ's upkeep, the
ingestion queue connecting, the thread store on each use): no traceback per attempt."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from .postgres_helpers import create_database, private_postgres
from .redis_helpers import private_redis
from .servers import free_port, served, wait_ready

pytestmark = pytest.mark.timeout(600)


async def test_redis_down_at_start_then_back_is_two_lines(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there yet: Redis is "down"
    data = tmp_path / "data"
    async with (
        served({}, data, ready=503, args=["--redis-url", f"redis://127.0.0.1:{port}/0"]) as url,
        httpx.AsyncClient(timeout=30) as http,
    ):
        await asyncio.sleep(6)  # every loop retries several times meanwhile
        with private_redis(port):
            assert (await wait_ready(http, url, timeout=120)).status_code == 200
            await asyncio.sleep(3)
            server_port = url.rsplit(":", 1)[1]
            text = (data / f"serve-{server_port}.log").read_text()
    lines = [line for line in text.splitlines() if line.strip() and '"GET /ready' not in line]
    assert "Traceback" not in text, text
    down = [line for line in lines if "Redis is unavailable: " in line]
    back = [line for line in lines if "Redis is back after " in line]
    assert len(down) == 1 and "Connection refused" in down[0], text
    assert len(back) == 1, text
    warnings = [line for line in lines if " WARNING " in line or " ERROR " in line]
    assert all("unavailable" in line or "is back after" in line for line in warnings), warnings
    assert len(warnings) <= 4, warnings  # Redis, and the thread store kept there: down and back each


async def test_postgres_going_away_under_a_server_and_back_is_two_lines_each(tmp_path: Path) -> None:
    """PostgreSQL keeps the threads and the ingestion queue: stopped under a ready server, then
    started again. psycopg's pool warned once per connection attempt (24 lines in the issue's 30 s)."""
    data = tmp_path / "data"
    with private_postgres() as postgres:
        url_db = create_database(postgres.url)
        async with (
            served({}, data, args=["--database-url", url_db]) as url,
            httpx.AsyncClient(timeout=30) as http,
        ):
            postgres.stop()
            for _ in range(100):  # until readiness sees it
                if (await http.get(f"{url}/ready")).status_code == 503:
                    break
                await asyncio.sleep(0.2)
            await asyncio.sleep(6)  # the queue's worker pings, psycopg's pool reconnects, meanwhile
            postgres.start()
            assert (await wait_ready(http, url, timeout=120)).status_code == 200
            await asyncio.sleep(3)
            text = (data / f"serve-{url.rsplit(':', 1)[1]}.log").read_text()
    lines = [line for line in text.splitlines() if line.strip() and '"GET /ready' not in line]
    assert "Traceback" not in text, text
    assert not [line for line in lines if "psycopg.pool" in line], text
    for name in ("PostgreSQL", "the thread store"):
        down = [line for line in lines if f"{name} is unavailable: " in line]
        back = [line for line in lines if f"{name} is back after " in line]
        assert len(down) <= 1 and len(back) == len(down), text
    assert any(" is unavailable: " in line for line in lines), text
    warnings = [line for line in lines if " WARNING " in line or " ERROR " in line]
    assert all("unavailable" in line or "is back after" in line for line in warnings), warnings
