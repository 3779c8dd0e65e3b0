"""Scale-out: two server processes sharing one Redis and one data directory."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agui_client import drive
from tests.protocol import check_stream, parse_sse, run_body
from tests.redis_helpers import Worker, private_redis, worker_env
from tests.test_metrics import samples, value


@pytest.fixture
async def workers(
    scenario_config: Any, redis_url: str, redis_prefix: str
) -> AsyncIterator[tuple[Worker, Worker]]:
    env = worker_env(scenario_config, redis_url, redis_prefix, RAGSTREAM_RUN_LOCK_TTL_SECONDS="2")
    a, b = Worker(env), Worker(env)
    try:
        await asyncio.gather(a.ready(), b.ready())
        yield a, b
    finally:
        a.stop()
        b.stop()


async def test_a_thread_continues_on_another_worker_with_the_same_state(
    workers: tuple[Worker, Worker], tmp_path: Path
) -> None:
    a, b = workers
    first = await drive(tmp_path, a.url, "shared", [{"op": "user", "text": "nightly backups"}, {"op": "run"}])
    second = await drive(
        tmp_path, b.url, "shared", [{"op": "hydrate"}, {"op": "user", "text": "opening hours"}, {"op": "run"}]
    )
    run = second["steps"][-1]
    assert second["steps"][0]["view"]["state"] == first["steps"][-1]["state"]
    assert run["warnings"] == []
    assert run["finished"]["outcome"] == "success"
    async with httpx.AsyncClient() as http:
        on_a = (await http.get(f"{a.url}/threads/shared")).json()
        on_b = (await http.get(f"{b.url}/threads/shared")).json()
    assert on_a["state"] == on_b["state"] == run["state"]
    assert on_a["messages"] == on_b["messages"]
    async with httpx.AsyncClient() as http:  # both searches are kept; the state carries the latest
        searches = (await http.get(f"{b.url}/threads/shared/state/searches")).json()["value"]
    assert list(searches) == ["s1", "s2"]
    assert list(on_a["state"]["searches"]) == ["s2"]


async def test_simultaneous_runs_across_workers_get_exactly_one_409(workers: tuple[Worker, Worker]) -> None:
    a, b = workers
    async with httpx.AsyncClient(timeout=60) as http:
        for round_ in range(3):
            thread = f"race-{round_}"
            responses = await asyncio.gather(
                http.post(f"{a.url}/agui", json=run_body(thread, f"{thread}-a", "slow race")),
                http.post(f"{b.url}/agui", json=run_body(thread, f"{thread}-b", "slow race")),
            )
            assert sorted(r.status_code for r in responses) == [200, 409], [r.text[:200] for r in responses]
            ok = next(r for r in responses if r.status_code == 200)
            check_stream([e for _, e in parse_sse(ok.text)], {})


async def test_a_stream_cut_on_one_worker_resumes_on_the_other(
    workers: tuple[Worker, Worker], tmp_path: Path
) -> None:
    a, b = workers
    report = await drive(
        tmp_path,
        a.url,
        "resume",
        [{"op": "user", "text": "slow then resume"}, {"op": "run", "cutAfter": 40, "resumeUrl": b.url}],
    )
    run = report["steps"][-1]
    assert run["resumeLog"]["resumeStatus"] == 200
    assert run["resumeLog"]["cutAt"] == 40
    assert run["warnings"] == []
    assert run["errors"] == []
    assert run["finished"]["outcome"] == "success"
    tokens = run["messages"][-1]["content"].split()
    assert tokens == [f"tok{i}" for i in range(300)]  # every token exactly once, in order
    async with httpx.AsyncClient() as http:
        view = (await http.get(f"{b.url}/threads/resume")).json()
        replay = parse_sse((await http.get(f"{b.url}/threads/resume/runs/{run['runId']}/events")).text)
    assert run["state"] == view["state"]
    assert [i for i, _ in replay] == list(range(1, len(replay) + 1))
    assert [e["type"] for _, e in replay] == run["types"]


async def test_stop_on_one_worker_reaches_a_run_on_the_other(workers: tuple[Worker, Worker]) -> None:
    a, b = workers
    async with httpx.AsyncClient(timeout=60) as http:
        frames: list[str] = []

        async def follow() -> None:
            async with http.stream(
                "POST", f"{a.url}/agui", json=run_body("stopme", "r1", "slow")
            ) as response:
                async for line in response.aiter_lines():
                    frames.append(line)

        running = asyncio.create_task(follow())
        while sum(line.startswith("id:") for line in frames) < 10:  # the run is streaming on A
            await asyncio.sleep(0.02)
        stopped = await http.post(f"{b.url}/threads/stopme/runs/r1/stop")
        assert stopped.status_code == 202
        await asyncio.wait_for(running, 30)
        events = [e for _, e in parse_sse("\n".join(frames) + "\n\n")]
    check_stream(events, {})
    assert events[-1]["type"] == "RUN_FINISHED"
    assert events[-1]["outcome"] == {"type": "cancelled"}


async def test_a_new_thread_streaming_on_one_worker_cannot_be_deleted_on_the_other(
    workers: tuple[Worker, Worker],
) -> None:
    """A thread's first run saves it when it ends; until then worker B has no stored thread, but a
    delete there must still say "busy" (409), not "not found" (which a client reads as deleted,
    and the thread would then appear when the run saves it)."""
    a, b = workers
    async with httpx.AsyncClient(timeout=60) as http:
        frames: list[str] = []

        async def follow() -> None:
            async with http.stream("POST", f"{a.url}/agui", json=run_body("fresh", "r1", "slow")) as response:
                async for line in response.aiter_lines():
                    frames.append(line)

        running = asyncio.create_task(follow())
        while sum(line.startswith("id:") for line in frames) < 10:  # the first run is streaming on A
            await asyncio.sleep(0.02)
        busy = await http.delete(f"{b.url}/threads/fresh")
        assert busy.status_code == 409, busy.text
        assert busy.json()["error"]["code"] == "thread_busy"
        switched = await http.post(f"{b.url}/threads/fresh/switch", json={"messageId": "nope"})
        assert switched.status_code == 409, switched.text
        assert (await http.delete(f"{b.url}/threads/never-made")).status_code == 404
        await asyncio.wait_for(running, 30)
        assert (await http.get(f"{b.url}/threads/fresh")).status_code == 200
        assert (await http.delete(f"{b.url}/threads/fresh")).status_code == 204
        assert (await http.get(f"{a.url}/threads/fresh")).status_code == 404


async def test_a_follower_whose_run_log_vanished_is_told_to_reconnect(
    workers: tuple[Worker, Worker], redis_url: str, redis_prefix: str
) -> None:
    """Redis loses a run's log while the run is quiet (a long model call): a follower on another
    worker ends with RUN_ERROR ``event_log_unavailable`` ("reconnect later"), not a silent end of
    stream that a client cannot tell from a finished run."""
    import redis.asyncio as aioredis

    a, b = workers
    async with httpx.AsyncClient(timeout=60) as http:
        own: list[str] = []
        run = asyncio.create_task(_follow(http, f"{a.url}/agui", own, json=run_body("quiet", "r1", "hang")))
        while not any(line.startswith("id:") for line in own):
            await asyncio.sleep(0.02)
        frames: list[str] = []
        follower = asyncio.create_task(_follow(http, f"{b.url}/threads/quiet/runs/r1/events", frames))
        while not any(line.startswith("id:") for line in frames):
            await asyncio.sleep(0.02)
        client = aioredis.from_url(redis_url)
        try:
            assert (
                await client.delete(f"{redis_prefix}run:quiet/r1:info", f"{redis_prefix}run:quiet/r1:events")
                == 2
            )
        finally:
            await client.aclose()
        await asyncio.wait_for(follower, 15)
        events = [e for _, e in parse_sse("\n".join(frames) + "\n\n")]
        assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "event_log_unavailable", events[-1]
        assert (await http.post(f"{a.url}/threads/quiet/runs/r1/stop")).status_code == 202
        await asyncio.wait_for(run, 15)


async def _follow(http: httpx.AsyncClient, url: str, frames: list[str], **body: Any) -> None:
    async with http.stream("POST" if body else "GET", url, **body) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            frames.append(line)


async def test_a_killed_worker_leaves_a_lock_that_expires_and_a_run_closed_with_run_error(
    scenario_config: Any, redis_url: str, redis_prefix: str
) -> None:
    env = worker_env(scenario_config, redis_url, redis_prefix, RAGSTREAM_RUN_LOCK_TTL_SECONDS="2")
    a, b = Worker(env), Worker(env)
    try:
        await asyncio.gather(a.ready(), b.ready())
        async with httpx.AsyncClient(timeout=60) as http:
            seen: list[int] = []

            async def follow() -> None:
                async with http.stream(
                    "POST", f"{a.url}/agui", json=run_body("doomed", "r1", "slow doomed")
                ) as response:
                    async for line in response.aiter_lines():
                        if line.startswith("id:"):
                            seen.append(int(line[3:]))

            reader = asyncio.create_task(follow())
            while len(seen) < 20:
                await asyncio.sleep(0.02)
            a.kill()
            with pytest.raises(httpx.HTTPError):
                await reader
            assert (await http.post(f"{b.url}/agui", json=run_body("doomed", "r2", "hi"))).status_code == 409
            tail = await http.get(
                f"{b.url}/threads/doomed/runs/r1/events", headers={"Last-Event-ID": str(seen[-1])}
            )
            frames = parse_sse(tail.text)
            assert [i for i, _ in frames] == list(range(seen[-1] + 1, seen[-1] + 1 + len(frames)))
            assert frames[-1][1]["type"] == "RUN_ERROR"
            assert frames[-1][1]["code"] == "worker_lost"
            # the run that closed it counts the lost run, so error-rate dashboards see host crashes
            counted = samples((await http.get(f"{b.url}/metrics")).text)
            assert value(counted, "ragstream_runs_total", outcome="error", code="worker_lost") == 1
            again = await http.post(f"{b.url}/agui", json=run_body("doomed", "r3", "nightly backups"))
            assert again.status_code == 200  # the lock expired: the thread is usable again
            check_stream([e for _, e in parse_sse(again.text)], {})
    finally:
        a.stop()
        b.stop()


async def test_redis_down_at_start_and_mid_run_then_back(scenario_config: Any, redis_prefix: str) -> None:
    with private_redis() as (port, _):
        pass  # find a port and leave it free: Redis is down when the worker starts
    url = f"redis://127.0.0.1:{port}/0"
    worker = Worker(worker_env(scenario_config, url, redis_prefix))
    try:
        await worker.ready()
        async with httpx.AsyncClient(timeout=30) as http:
            refused = await http.post(f"{worker.url}/agui", json=run_body("t", "r1", "hi"))
            assert refused.status_code == 503
            assert refused.json()["error"]["code"] == "redis_unavailable"
            assert refused.headers["retry-after"] == "5"
            assert (await http.get(f"{worker.url}/ready")).status_code == 503
            assert (await http.get(f"{worker.url}/health")).status_code == 200
            assert (await http.get(f"{worker.url}/threads")).status_code == 503
            with private_redis(port):
                ok = await http.post(f"{worker.url}/agui", json=run_body("t", "r2", "nightly backups"))
                assert ok.status_code == 200  # recovered without a restart
                state = check_stream([e for _, e in parse_sse(ok.text)], {})
                lines: list[str] = []

                async def follow() -> None:
                    async with http.stream(
                        "POST", f"{worker.url}/agui", json=run_body("t", "r3", "slow", state)
                    ) as response:
                        async for line in response.aiter_lines():
                            lines.append(line)

                reader = asyncio.create_task(follow())
                while sum(line.startswith("id:") for line in lines) < 10:
                    await asyncio.sleep(0.02)
            # Redis is gone mid-run: the stream ends with RUN_ERROR instead of hanging
            await asyncio.wait_for(reader, 30)
            events = [e for _, e in parse_sse("\n".join(lines) + "\n\n")]
            assert events[0]["type"] == "RUN_STARTED"
            assert events[-1]["type"] == "RUN_ERROR"
            assert sum(e["type"] in ("RUN_FINISHED", "RUN_ERROR") for e in events) == 1
            assert (await http.post(f"{worker.url}/agui", json=run_body("t", "r4", "hi"))).status_code == 503
            with private_redis(port):  # back again, empty: everything it had is gone, but runs work
                again = await http.post(f"{worker.url}/agui", json=run_body("t2", "r5", "nightly backups"))
                assert again.status_code == 200
                check_stream([e for _, e in parse_sse(again.text)], {})
    finally:
        worker.stop()


async def test_a_killed_workers_run_stops_counting_against_its_principal_once_its_lock_expired(
    scenario_config: Any, redis_url: str, redis_prefix: str
) -> None:
    """One run at a time per principal: a run whose worker died frees the principal's slot when it
    frees its thread (its lock expired), not minutes later, on every worker."""
    env = worker_env(
        scenario_config,
        redis_url,
        redis_prefix,
        RAGSTREAM_RUN_LOCK_TTL_SECONDS="2",
        RAGSTREAM_LIMIT_CONCURRENT_RUNS="1",
    )
    a, b = Worker(env), Worker(env)
    try:
        await asyncio.gather(a.ready(), b.ready())
        async with httpx.AsyncClient(timeout=60) as http:
            lines: list[str] = []

            async def follow() -> None:
                async with http.stream(
                    "POST", f"{a.url}/agui", json=run_body("one", "r1", "slow")
                ) as response:
                    async for line in response.aiter_lines():
                        lines.append(line)

            reader = asyncio.create_task(follow())
            while sum(line.startswith("id:") for line in lines) < 10:
                await asyncio.sleep(0.02)
            busy = await http.post(f"{b.url}/agui", json=run_body("two", "r1", "nightly backups"))
            assert busy.status_code == 429, busy.text  # the run on A holds the one slot
            a.kill()
            with pytest.raises(httpx.HTTPError):
                await reader
            deadline = asyncio.get_running_loop().time() + 20  # the lock expires in 2 s
            while True:
                again = await http.post(f"{b.url}/agui", json=run_body("two", "r2", "nightly backups"))
                if again.status_code != 429 or asyncio.get_running_loop().time() > deadline:
                    break
                await asyncio.sleep(0.5)
            assert again.status_code == 200, again.text
            check_stream([e for _, e in parse_sse(again.text)], {})
    finally:
        a.stop()
        b.stop()


async def test_a_quiet_run_holds_its_thread_again_as_soon_as_redis_is_back(
    scenario_config: Any, redis_prefix: str
) -> None:
    """Redis restarts empty under a run that writes nothing for a while (a long model call): its
    worker takes the thread's lock and writes the run's log again as soon as it reconnects, not at
    its next heartbeat (10 s away with the default lock lifetime), so meanwhile the other worker
    neither starts a second run on the thread nor loses sight of the run."""
    import redis.asyncio as aioredis

    with private_redis() as (port, _):
        pass  # a free port for a Redis of our own
    url = f"redis://127.0.0.1:{port}/0"
    env = worker_env(scenario_config, url, redis_prefix, RAGSTREAM_RUN_LOCK_TTL_SECONDS="30")
    a, b = Worker(env), Worker(env)
    try:
        async with httpx.AsyncClient(timeout=60) as http:
            with private_redis(port):
                await asyncio.gather(a.ready(), b.ready())
                own: list[str] = []
                run = asyncio.create_task(
                    _follow(http, f"{a.url}/agui", own, json=run_body("calm", "r1", "hang"))
                )
                while not any(line.startswith("id:") for line in own):
                    await asyncio.sleep(0.02)
            with private_redis(port):  # back, empty
                client = aioredis.from_url(url)
                try:
                    for _ in range(100):  # the stop channel resubscribes within about a second
                        if await client.get(f"{redis_prefix}lock:calm") == b"r1":
                            break
                        await asyncio.sleep(0.05)
                    assert await client.get(f"{redis_prefix}lock:calm") == b"r1"
                finally:
                    await client.aclose()
                second = await http.post(f"{b.url}/agui", json=run_body("calm", "r2", "hello"))
                assert second.status_code == 409 and second.json()["error"]["code"] == "thread_busy"
                assert (await http.post(f"{b.url}/threads/calm/runs/r1/stop")).status_code == 202
                await asyncio.wait_for(run, 30)
        events = [e for _, e in parse_sse("\n".join(own) + "\n\n")]
        assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "cancelled"}
    finally:
        a.stop()
        b.stop()


@pytest.mark.parametrize("down", [0.0, 1.0])
async def test_a_run_cut_by_a_redis_restart_is_replayed_whole(
    scenario_config: Any, redis_prefix: str, down: float
) -> None:
    """Redis restarts empty under a run, at once or after a second: the run's log, written again by
    its worker, replays whole on any worker, and a follower on the other worker told to reconnect
    later gets, from its last event id, exactly the events it had not seen. Back at once, the run
    finishes (its worker writes its thread lock again with its log)."""
    with private_redis() as (port, _):
        pass  # a free port for a Redis of our own
    env = worker_env(scenario_config, f"redis://127.0.0.1:{port}/0", redis_prefix)
    a, b = Worker(env), Worker(env)
    lines: dict[str, list[str]] = {"a": [], "b": []}
    try:
        async with httpx.AsyncClient(timeout=60) as http:

            async def follow(name: str, method: str, url: str, **kwargs: Any) -> None:
                async with http.stream(method, url, **kwargs) as response:
                    async for line in response.aiter_lines():
                        lines[name].append(line)

            with private_redis(port):
                await asyncio.gather(a.ready(), b.ready())
                run = asyncio.create_task(
                    follow("a", "POST", f"{a.url}/agui", json=run_body("cut", "r1", "slow"))
                )
                while sum(line.startswith("id:") for line in lines["a"]) < 10:
                    await asyncio.sleep(0.02)
                other = asyncio.create_task(follow("b", "GET", f"{b.url}/threads/cut/runs/r1/events"))
                while sum(line.startswith("id:") for line in lines["b"]) < 15:
                    await asyncio.sleep(0.02)
            await asyncio.sleep(down)
            with private_redis(port):  # back, empty
                await asyncio.wait_for(asyncio.gather(run, other), 30)
                seen = parse_sse("\n".join(lines["a"]) + "\n\n")  # A streams from memory: the whole run
                assert seen[0][1]["type"] == "RUN_STARTED"
                replay = parse_sse((await http.get(f"{b.url}/threads/cut/runs/r1/events")).text)
                followed = parse_sse("\n".join(lines["b"]) + "\n\n")
                if followed[-1][1].get("code") == "event_log_unavailable":  # told to reconnect later
                    cursor = {"Last-Event-ID": str(followed[-1][0])}
                    followed = followed[:-1] + parse_sse(
                        (await http.get(f"{b.url}/threads/cut/runs/r1/events", headers=cursor)).text
                    )
        assert [i for i, _ in replay] == list(range(1, len(replay) + 1))
        assert replay[0][1]["type"] == "RUN_STARTED" and replay[-1][1]["type"] in (
            "RUN_FINISHED",
            "RUN_ERROR",
        )
        assert followed == replay  # every event once, in order, as the log holds it
        if down:  # the run was stopped while Redis was away: the log is what its own client saw
            assert replay == seen
        else:  # Redis came back at once: the run wrote its log and its lock again and went on
            assert replay[-1][1]["type"] == "RUN_FINISHED", replay[-1]
    finally:
        a.stop()
        b.stop()
