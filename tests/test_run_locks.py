"""A run's thread lock over the run's whole life: renewed while it runs (however long it runs past
the lock's expiry), and a run whose lock another run took is stopped, saving nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from ragstream.runs.locks import MemoryRunLocks
from tests.conftest import scenario_app
from tests.protocol import check_stream, parse_sse, run_body
from tests.servers import serve

TTL = 0.6  # seconds: the slow scenario streams for ~6 s, ten lock lifetimes


async def test_a_long_run_keeps_its_thread_and_one_whose_lock_was_taken_stops(scenario_config: Any) -> None:
    scenario_config.run_lock_ttl_seconds = TTL
    app = scenario_app(scenario_config)
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        locks = app.state.services.runs.locks
        frames: list[str] = []

        async def follow(thread: str) -> list[dict[str, Any]]:
            async with http.stream("POST", "/agui", json=run_body(thread, "r1", "slow")) as response:
                assert response.status_code == 200
                async for line in response.aiter_lines():
                    frames.append(line)
            return [e for _, e in parse_sse("\n".join(frames) + "\n")]

        async def streaming(count: int) -> None:
            for _ in range(500):
                if sum(line.startswith("id:") for line in frames) >= count:
                    return
                await asyncio.sleep(0.01)
            raise AssertionError("the run did not stream")

        # a run three lock lifetimes in still holds its thread
        whole = asyncio.create_task(follow("long"))
        await streaming(10)
        await asyncio.sleep(3 * TTL)
        busy = await http.post("/agui", json=run_body("long", "r2", "hello"))
        assert busy.status_code == 409, busy.text
        assert busy.json()["error"]["code"] == "thread_busy"
        events = await whole
        assert events[-1]["type"] == "RUN_FINISHED"
        assert events[-1].get("outcome", {}).get("type") in (None, "success")
        assert (await http.get("/threads/long")).json()["messages"][-1]["content"].split()[-1] == "tok299"

        # its lock expired and another run took the thread (a stalled worker, say): the run stops
        frames.clear()
        taken = asyncio.create_task(follow("taken"))
        await streaming(10)
        await locks.release("taken", "r1")
        assert await locks.acquire("taken", "elsewhere", 60)
        events = await asyncio.wait_for(taken, timeout=5 * TTL)  # within a renewal, not at the end
        check_stream(events, {})
        assert events[-1]["type"] == "RUN_FINISHED"
        assert events[-1]["outcome"] == {"type": "cancelled"}
        assert len([e for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"]) < 300
        assert (await http.get("/threads/taken")).status_code == 404  # nothing of it was saved

        # its lock vanished and no other run took the thread (Redis restarted empty, say): the run
        # takes it again at its next renewal and finishes
        frames.clear()
        lost = asyncio.create_task(follow("lost"))
        await streaming(10)
        await locks.release("lost", "r1")
        for _ in range(500):
            if await locks.holder("lost") == "r1":
                break
            await asyncio.sleep(0.01)
        assert await locks.holder("lost") == "r1", "the run did not take its lock again"
        events = await lost
        check_stream(events, {})
        assert events[-1]["type"] == "RUN_FINISHED"
        assert events[-1].get("outcome", {}).get("type") in (None, "success")
        assert await locks.holder("lost") is None


class SlowRenewals(MemoryRunLocks):
    """Run locks whose renewals take a while to arrive (a Redis round trip under load)."""

    async def renew(self, thread_id: str, run_id: str, ttl_seconds: float) -> bool:
        await asyncio.sleep(0.15)
        return await super().renew(thread_id, run_id, ttl_seconds)


async def test_a_renewal_under_way_when_a_run_ends_does_not_take_its_lock_back(scenario_config: Any) -> None:
    """A renewal sent just before a run ends arrives after the release would: the thread must still
    be free once the run's stream has ended (a renewal takes a free lock again, so it must not
    arrive after the release, or the next run gets 409 for a lock lifetime)."""
    from rag_tools import build_chat_toolkit
    from ragstream.app import create_app
    from tests.scenario import Notes, scenario_agent

    scenario_config.run_lock_ttl_seconds = TTL  # a renewal every 0.2 s, each 0.15 s on its way
    toolkit = build_chat_toolkit(scenario_config)
    toolkit.namespaces["notes"] = Notes
    locks = SlowRenewals()
    app = create_app(scenario_config, agent=scenario_agent(toolkit), toolkit=toolkit, locks=locks)
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        # a long run on another thread keeps the process renewing while the short ones end
        other = asyncio.create_task(http.post("/agui", json=run_body("other", "r0", "slow")))
        for i in range(12):
            response = await http.post("/agui", json=run_body("quick", f"r{i}", "hello"))
            assert response.status_code == 200
            await asyncio.sleep(0.2)  # any renewal still on its way has arrived; a lock it took lives on
            assert await locks.holder("quick") is None, f"run r{i} ended but its lock was taken again"
        assert (await other).status_code == 200
