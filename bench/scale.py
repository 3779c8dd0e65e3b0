"""Scale-out: paced token streams on one worker against two workers sharing Redis, and what the
Redis event log adds over the in-process one.

    python -m bench.scale [--levels 10,20,30,40,50,60,80,100] [--redis redis://127.0.0.1:6379/0]

Servers are ``bench/stream_servers.py ragstream`` processes (the streaming benchmark's agent: one
state-changing tool call, then 250 tokens at 50 events/s per stream). Configurations:

- one worker, in-process event log and SQLite threads (the single-process default);
- one worker on Redis (threads, run locks, event log on Redis Streams);
- two workers on Redis, streams spread round-robin over them (as behind a load balancer).

For each, the largest number of concurrent streams whose events arrive with a p99 lag under
100 ms behind schedule, the delivered events/s at that level, and at a light load (10 streams) the
median time to RUN_STARTED and to the first token: the latency the Redis log adds.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import uuid
from pathlib import Path

from ._util import median, table
from .stream import PACE_MS, PACED_TOKENS, Server, _body, _paced, _stream


async def _light(ports: list[int], trials: int = 20) -> tuple[float, float]:
    starts, tokens = [], []
    for trial in range(trials):
        result = await _stream(ports[trial % len(ports)], _body(5, 0, f"light-{trial}", f"light-{trial}"))
        assert result.ok and result.run_started and result.first_token
        starts.append((result.run_started - result.started) * 1000)
        tokens.append((result.first_token - result.started) * 1000)
    return median(starts), median(tokens)


async def _measure(
    name: str, servers: list[Server], levels: list[int]
) -> tuple[str, int, float, float, float, str]:
    ports = [s.port for s in servers]
    start_ms, token_ms = await _light(ports)
    best, lags = 0, {}
    for level in levels:
        p99, failed = await _paced(servers[0], level, level, ports)
        lags[level] = p99
        if failed or p99 >= 100:
            break
        best = level
    delivered = best * 1000 / PACE_MS
    detail = ", ".join(f"{k}: {v:.0f} ms" for k, v in lags.items())
    print(f"{name}: {best} streams (p99 lag by level: {detail})")
    return name, best, delivered, start_ms, token_ms, detail


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--levels", default="10,20,30,40,50,60,80,100")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    work = Path(tempfile.mkdtemp(prefix="ragstream-bench-scale-"))
    rows = []
    try:
        configurations = [
            ("1 worker, in-process log", 1, None),
            ("1 worker, Redis", 1, args.redis),
            ("2 workers, Redis", 2, args.redis),
        ]
        for name, count, redis_url in configurations:
            data = work / name.replace(" ", "_").replace(",", "")
            data.mkdir()
            env = (
                {"RAGSTREAM_REDIS_URL": redis_url, "RAGSTREAM_REDIS_PREFIX": f"bench-{uuid.uuid4().hex[:8]}:"}
                if redis_url
                else {}
            )
            servers = [Server("ragstream", data, env) for _ in range(count)]
            try:
                await asyncio.gather(*(s.ready() for s in servers))
                rows.append(await _measure(name, servers, levels))
            finally:
                for server in servers:
                    server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = rows[0]
    print()
    print(
        table(
            [
                "configuration",
                "paced streams, p99 lag < 100 ms",
                "events/s delivered",
                "vs 1 worker in-process",
                "ms to RUN_STARTED",
                "ms to first token",
                "added first-token latency",
            ],
            [
                (
                    name,
                    best,
                    delivered,
                    f"{best / max(base[1], 1):.2f}x",
                    start,
                    token,
                    f"{token - base[4]:+.1f} ms",
                )
                for name, best, delivered, start, token, _ in rows
            ],
        )
    )
    print(
        f"\nEach stream: {PACED_TOKENS} tokens at {1000 // PACE_MS} events/s after one state-changing tool call."
    )


if __name__ == "__main__":
    asyncio.run(main())
