"""Limits per principal, through the real server: runs per minute, concurrent runs, upload bytes per
hour, model tokens per day; in one process and shared by two app instances through one Redis.

The counters are ragstream's own (``ragstream.quotas``) on a clock the test holds still, so a window
never turns in the middle of a test; moving that clock shows a window turning. The model is the
scenario agent (pydantic-ai ``FunctionModel``, whose usage pydantic-ai estimates from the messages).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage, UsageLimits

from rag_tools import build_chat_toolkit
from ragstream.agui.budget import TokenBudget
from ragstream.app import create_app
from ragstream.config import AppConfig
from ragstream.quotas import DAY, HOUR, Limits, MemoryQuotas, QuotaExceeded, Quotas, RedisQuotas
from ragstream.runs import RunFailure
from ragstream.runs.redis import redis_client
from tests.protocol import parse_sse, run_body
from tests.scenario import Notes, scenario_agent
from tests.servers import serve

pytestmark = pytest.mark.timeout(180)

#: 10 s into a minute, 20 minutes into an hour, 19:20:10 UTC.
NOW = 1_700_000_000.0 - 1_700_000_000.0 % DAY + 19 * HOUR + 20 * 60 + 10


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def bearer(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {name}-token"}


def limited_config(config: AppConfig, **limits: Any) -> AppConfig:
    config.tokens = {"alice": "alice-token", "bob": "bob-token"}
    config.editors = ["alice", "bob"]
    for name, value in limits.items():
        setattr(config, f"limit_{name}", value)
    return config


@asynccontextmanager
async def app_with(config: AppConfig, quotas: Quotas) -> AsyncIterator[httpx.AsyncClient]:
    toolkit = build_chat_toolkit(config)
    toolkit.namespaces["notes"] = Notes
    app = create_app(config, agent=scenario_agent(toolkit), toolkit=toolkit, quotas=quotas)
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        yield client


async def run(
    client: httpx.AsyncClient, who: str, thread: str, run_id: str, text: str = "nightly backups"
) -> Any:
    return await client.post("/agui", json=run_body(thread, run_id, text), headers=bearer(who))


def events(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    return [event for _, event in parse_sse(response.text)]


def assert_limited(response: httpx.Response, retry_after: int, fragment: str) -> None:
    assert response.status_code == 429, response.text
    error = response.json()["error"]
    assert (error["status"], error["code"]) == (429, "quota_exceeded")
    assert fragment in error["message"], error
    assert response.headers["retry-after"] == str(retry_after)


async def saved(client: httpx.AsyncClient, who: str, thread: str) -> Any:
    view = (await client.get(f"/threads/{thread}", headers=bearer(who))).json()
    return view["messages"], view["state"]


async def test_runs_per_minute(scenario_config: AppConfig) -> None:
    config = limited_config(scenario_config, runs_per_minute=2)
    clock = Clock()
    async with app_with(config, MemoryQuotas(Limits.from_config(config), clock)) as client:
        assert events(await run(client, "alice", "rpm", "r1"))[-1]["type"] == "RUN_FINISHED"
        # refused requests count against nothing: a bad state, a busy run id, a run that only restates
        bad = await client.post(
            "/agui", json=run_body("rpm", "r2", state={"document_filter": 5}), headers=bearer("alice")
        )
        assert bad.status_code == 422
        assert (await run(client, "alice", "rpm", "r1")).status_code == 409
        restate = await client.post("/agui", json=run_body("rpm", "r0", text=None), headers=bearer("alice"))
        assert events(restate)[-1]["type"] == "RUN_FINISHED"
        assert events(await run(client, "alice", "rpm", "r2"))[-1]["type"] == "RUN_FINISHED"
        before = await saved(client, "alice", "rpm")
        assert_limited(await run(client, "alice", "rpm", "r3"), 50, "started 2 runs this minute")
        assert await saved(client, "alice", "rpm") == before  # the thread is as it was
        # another principal has its own count
        assert events(await run(client, "bob", "rpm-bob", "r1"))[-1]["type"] == "RUN_FINISHED"
        # the next minute
        clock.now += 50
        assert events(await run(client, "alice", "rpm", "r3"))[-1]["type"] == "RUN_FINISHED"


async def test_concurrent_runs(scenario_config: AppConfig) -> None:
    config = limited_config(scenario_config, concurrent_runs=1)
    async with app_with(config, MemoryQuotas(Limits.from_config(config), Clock())) as client:
        body = run_body("cc-1", "r1", "slow")
        async with client.stream("POST", "/agui", json=body, headers=bearer("alice")) as slow:
            assert slow.status_code == 200
            lines = slow.aiter_lines()
            async for line in lines:
                if '"RUN_STARTED"' in line:
                    break
            refused = await run(client, "alice", "cc-2", "r1")
            assert_limited(refused, 2, "already has 1 runs going")
            assert (
                await client.get("/threads/cc-2", headers=bearer("alice"))
            ).status_code == 404  # not created
            assert events(await run(client, "bob", "cc-bob", "r1"))[-1]["type"] == "RUN_FINISHED"
            stop = await client.post("/threads/cc-1/runs/r1/stop", headers=bearer("alice"))
            assert stop.status_code == 202
            rest = [line async for line in lines]
        assert any('"RUN_FINISHED"' in line for line in rest)
        # the slot is free again once the run ended
        assert events(await run(client, "alice", "cc-2", "r1"))[-1]["type"] == "RUN_FINISHED"


async def test_upload_bytes_per_hour(scenario_config: AppConfig) -> None:
    config = limited_config(scenario_config, upload_bytes_per_hour=1000)
    clock = Clock()
    document = b"# Limits\n\n" + b"Uploads are counted per hour. " * 20  # 610 bytes

    def upload(name: str, data: bytes = document) -> dict[str, Any]:
        return {"file": (name, data, "text/markdown")}

    async with app_with(config, MemoryQuotas(Limits.from_config(config), clock)) as client:
        first = await client.post("/documents", files=upload("a.md"), headers=bearer("alice"))
        assert first.status_code == 202, first.text
        assert_limited(
            await client.post("/documents", files=upload("b.md"), headers=bearer("alice")),
            40 * 60 - 10,
            "uploaded 610 bytes this hour; 610 more would pass the limit of 1000",
        )
        too_big = await client.post("/documents", files=upload("c.md", document * 2), headers=bearer("bob"))
        assert too_big.status_code == 413
        assert too_big.json()["error"]["code"] == "quota_exceeded"
        assert (
            "more than the 1000 bytes a principal may upload per hour" in too_big.json()["error"]["message"]
        )
        assert (
            await client.post("/documents", files=upload("d.md"), headers=bearer("bob"))
        ).status_code == 202
        clock.now += 40 * 60
        assert (
            await client.post("/documents", files=upload("b.md"), headers=bearer("alice"))
        ).status_code == 202


async def tokens_of_one_run(config: AppConfig, redis_url: str, prefix: str) -> int:
    """The model tokens one first turn uses, as the server counted them from pydantic-ai's usage."""
    config.redis_url, config.redis_prefix = redis_url, prefix
    redis = redis_client(redis_url)
    quotas = RedisQuotas(Limits(tokens_per_day=10**9), redis, prefix, Clock())
    async with app_with(config, quotas) as client:
        assert events(await run(client, "alice", "measure", "r1"))[-1]["type"] == "RUN_FINISHED"
    used = int(await redis.get(f"{prefix}quota:tokens:alice:{int(NOW // DAY)}"))
    await redis.aclose()
    assert used > 0
    return used


async def test_model_tokens_per_day(scenario_config: AppConfig, redis_url: str, redis_prefix: str) -> None:
    config = limited_config(scenario_config)
    one_turn = await tokens_of_one_run(config, redis_url, f"{redis_prefix}measure:")
    config.limit_tokens_per_day = one_turn + 1
    clock = Clock()
    redis = redis_client(redis_url)
    quotas = RedisQuotas(Limits.from_config(config), redis, redis_prefix, clock)
    try:
        async with app_with(config, quotas) as client:
            # the first turn fits; it leaves one token of the day
            assert events(await run(client, "alice", "tpd", "r1"))[-1]["type"] == "RUN_FINISHED"
            before = await saved(client, "alice", "tpd")
            # the second starts (a token is left) and is stopped by pydantic-ai's UsageLimits
            stopped = events(await run(client, "alice", "tpd", "r2", "backup schedule"))
            assert stopped[-1]["type"] == "RUN_ERROR"
            assert stopped[-1]["code"] == "quota_exceeded"
            assert "Today's model tokens ran out" in stopped[-1]["message"]
            assert await saved(client, "alice", "tpd") == before  # the thread is as it was
            # now the day is spent: refused before the run, until midnight UTC
            assert_limited(await run(client, "alice", "tpd", "r3"), 4 * HOUR + 39 * 60 + 50, "model tokens")
            assert events(await run(client, "bob", "tpd-bob", "r1"))[-1]["type"] == "RUN_FINISHED"
            clock.now += 4 * HOUR + 39 * 60 + 50
            assert events(await run(client, "alice", "tpd", "r3"))[-1]["type"] == "RUN_FINISHED"
    finally:
        with contextlib.suppress(Exception):
            await redis.aclose()


async def test_runs_of_one_principal_stop_at_their_next_model_request_once_the_day_is_spent() -> None:
    """Two runs of alice start with the whole day left. While one waits on its tool, the other's
    answer spends the day: neither asks the model again (``quota_exceeded``), so together they pass
    the limit by what the model had already answered, not by a run's whole usage each."""
    quotas = MemoryQuotas(Limits(tokens_per_day=100), Clock())
    tool_waits, tool_go = asyncio.Event(), asyncio.Event()
    requests: list[str] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        run = "slow" if "slow" in str(messages[0]) else "fast"
        requests.append(run)
        if len(messages) == 1:
            call = ToolCallPart("wait" if run == "slow" else "quick", {}, tool_call_id=f"{run}-1")
            tokens = 30 if run == "slow" else 80
            return ModelResponse(parts=[call], usage=RequestUsage(input_tokens=tokens))
        return ModelResponse(parts=[TextPart("done")], usage=RequestUsage(input_tokens=10))

    agent = Agent(FunctionModel(model))

    @agent.tool_plain
    async def wait() -> str:
        tool_waits.set()
        await tool_go.wait()
        return "waited"

    @agent.tool_plain
    def quick() -> str:
        return "quick"

    admitted = [await quotas.admit_run("alice", prompt, hold_seconds=60) for prompt in ("slow", "fast")]
    assert [a.tokens_left for a in admitted] == [100, 100]  # started together: the same remainder

    async def run(prompt: str) -> str:
        budget = TokenBudget(quotas, "alice", 100)
        try:
            await agent.run(prompt, capabilities=[budget], usage_limits=UsageLimits(total_tokens_limit=100))
        except RunFailure as failure:
            return failure.code.value
        return "finished"

    slow = asyncio.create_task(run("slow"))
    await tool_waits.wait()  # the slow run's first answer (30) is counted; its tool is running
    assert await run("fast") == "quota_exceeded"  # its first answer (80) spent the day
    tool_go.set()
    assert await slow == "quota_exceeded"  # the day is spent: no second request
    assert requests == ["slow", "fast"]
    assert await quotas.spend_tokens("alice", 0) == 110
    with pytest.raises(QuotaExceeded, match="model tokens"):
        await quotas.admit_run("alice", "later", hold_seconds=60)


async def test_two_app_instances_share_the_limits_through_redis(
    scenario_config: AppConfig, redis_url: str, redis_prefix: str, tmp_path: Any
) -> None:
    """Two servers on one Redis and prefix (as two hosts): runs and uploads count once for both."""
    config = limited_config(scenario_config, runs_per_minute=3, upload_bytes_per_hour=100)
    config.redis_url, config.redis_prefix = redis_url, redis_prefix
    clock = Clock()
    clients: list[Callable[[], Any]] = []

    def quotas() -> RedisQuotas:
        client = redis_client(redis_url)
        clients.append(client.aclose)
        return RedisQuotas(Limits.from_config(config), client, redis_prefix, clock)

    other = config.model_copy(update={"data_dir": config.data_dir})
    try:
        async with app_with(config, quotas()) as a, app_with(other, quotas()) as b:
            assert events(await run(a, "alice", "two-1", "r1"))[-1]["type"] == "RUN_FINISHED"
            assert events(await run(b, "alice", "two-2", "r1"))[-1]["type"] == "RUN_FINISHED"
            assert events(await run(a, "alice", "two-3", "r1"))[-1]["type"] == "RUN_FINISHED"
            assert_limited(await run(b, "alice", "two-4", "r1"), 50, "started 3 runs this minute")
            assert_limited(await run(a, "alice", "two-4", "r1"), 50, "started 3 runs this minute")
            small = {"file": ("s.md", b"# S\n\n" + b"x" * 55, "text/markdown")}
            assert (await a.post("/documents", files=small, headers=bearer("bob"))).status_code == 202
            assert_limited(
                await b.post("/documents", files=small, headers=bearer("bob")), 40 * 60 - 10, "60 bytes"
            )
    finally:
        for close in clients:
            with contextlib.suppress(Exception):
                await close()


async def test_redis_concurrent_slots_free_themselves(redis_url: str, redis_prefix: str) -> None:
    """A slot taken on Redis is freed by ``release`` and, if its worker died, by its expiry."""
    clock = Clock()
    redis = redis_client(redis_url)
    quotas = RedisQuotas(Limits(concurrent_runs=1), redis, redis_prefix, clock)
    try:
        first = await quotas.admit_run("alice", "t/r1", hold_seconds=30)
        with pytest.raises(Exception, match="already has 1 runs going"):
            await quotas.admit_run("alice", "t/r2", hold_seconds=30)
        first.release()
        await quotas.aclose()
        await quotas.admit_run("alice", "t/r2", hold_seconds=30)  # never released: its worker "died"
        clock.now += 31
        await quotas.admit_run("alice", "t/r3", hold_seconds=30)
    finally:
        await redis.aclose()


async def test_memory_counters_forget_past_windows_but_not_the_current_ones() -> None:
    """A long-lived one-worker server meets thousands of principals, most of them once: their
    counters go once their windows have passed, while today's token count still holds."""
    clock = Clock()
    quotas = MemoryQuotas(
        Limits(runs_per_minute=5, concurrent_runs=2, tokens_per_day=100, upload_bytes_per_hour=1000), clock
    )
    for i in range(1000):
        admission = await quotas.admit_run(f"user-{i}", f"t{i}/r1", hold_seconds=30)
        await quotas.admit_upload(f"user-{i}", 10)
        admission.release()
    await quotas.spend_tokens("alice", 100)
    assert len(quotas._counts) == 2001  # runs and uploads of each, alice's tokens
    clock.now += 2 * HOUR  # the minute and the hour have turned; the day has not
    await quotas.admit_upload("bob", 10)
    assert set(quotas._counts) == {("tokens", "alice"), ("upload", "bob")}
    assert quotas._active == {}
    with pytest.raises(QuotaExceeded, match="used today's 100 model tokens"):
        await quotas.admit_run("alice", "a/r1", hold_seconds=30)
    clock.now += DAY
    await quotas.admit_run("alice", "a/r2", hold_seconds=30)


def test_limits_are_off_by_default() -> None:
    assert Limits.from_config(AppConfig()) == Limits()
    assert not Limits().on_runs
