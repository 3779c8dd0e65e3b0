"""A registered tool's options hold wherever it runs (issue 29, part 1), and pygents' subtool shape
(part 2): real pydantic-ai agents driven by scripted models.

Part 1 runs the same ``lock=True`` tool from three concurrent agent runs, once with only the
toolsets ``ToolRegistry.resolve()`` returns and once through ``ToolSystem`` with its capability;
each call records how many calls of the tool were inside it at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, DeferredToolRequests, RunContext, ToolApproved
from pydantic_ai.messages import ModelRequest, ToolReturnPart
from pydantic_ai.tools import DeferredToolResults

from rag_tools import AgentDeps, ToolContext
from rag_tools.kb import KnowledgeBase
from rag_tools.tools import (
    ApprovalInfo,
    LocalToolLocks,
    RetryPolicy,
    ToolRegistry,
    ToolResult,
    ToolSystem,
)
from rag_tools.tools.locks import OnWait
from rag_tools.tools.timing import TIMING_KEY
from tests.agents import Script
from tests.embedders import HashingEmbeddingModel


@pytest.fixture
async def deps(tmp_path: Path) -> Any:
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as kb:
        yield AgentDeps(client=kb, tool_context=ToolContext())


class Concurrency:
    """How many calls are inside the tool now, and the most there ever were."""

    def __init__(self) -> None:
        self.inside = 0
        self.peak = 0
        self.calls = 0

    async def visit(self) -> None:
        self.inside += 1
        self.calls += 1
        self.peak = max(self.peak, self.inside)
        for _ in range(5):  # give the other runs every chance to come in
            await asyncio.sleep(0.01)
        self.inside -= 1


class CountingLocks(LocalToolLocks):
    """Local locks that count how often a tool's lock was taken."""

    def __init__(self) -> None:
        super().__init__()
        self.taken: dict[str, int] = {}

    @asynccontextmanager
    async def hold(self, name: str, on_wait: OnWait | None = None) -> AsyncIterator[None]:
        self.taken[name] = self.taken.get(name, 0) + 1
        async with super().hold(name, on_wait):
            yield


def registry_with(meter: Concurrency, *, lock: bool) -> ToolRegistry:
    registry = ToolRegistry(locks=CountingLocks())

    async def exclusive(label: str) -> str:
        """Work that must not overlap."""
        await meter.visit()
        return f"done {label}"

    registry.add_tool(exclusive, lock=lock)
    return registry


async def three_runs(agent: Agent[AgentDeps, Any], deps: AgentDeps) -> list[str]:
    results = await asyncio.gather(*(agent.run(f"run {n}", deps=deps) for n in range(3)))
    return [r.output for r in results]


def resolved_only(registry: ToolRegistry) -> Agent[AgentDeps, Any]:
    """An agent given only what ``ToolRegistry.resolve()`` returns: no tool system, no capability."""
    script = Script([[("exclusive", {"label": "x"})]])
    return Agent(script.model, deps_type=AgentDeps, toolsets=registry.resolve())


def through_the_system(registry: ToolRegistry) -> Agent[AgentDeps, Any]:
    system = ToolSystem(registry)
    script = Script([[("exclusive", {"label": "x"})]])
    return Agent(
        script.model, deps_type=AgentDeps, toolsets=system.toolsets(), capabilities=[system.capability()]
    )


# -- part 1: options hold wherever the tool runs -------------------------------------------------


@pytest.mark.parametrize("compose", [resolved_only, through_the_system], ids=["resolved", "system"])
async def test_a_locked_tool_runs_alone_with_or_without_the_tool_system(
    compose: Any, deps: AgentDeps
) -> None:
    unlocked = Concurrency()
    assert await three_runs(compose(registry_with(unlocked, lock=False)), deps) == ["done"] * 3
    assert (unlocked.calls, unlocked.peak) == (3, 3)  # the measure sees overlap when nothing prevents it

    locked = Concurrency()
    registry = registry_with(locked, lock=True)
    assert await three_runs(compose(registry), deps) == ["done"] * 3
    assert (locked.calls, locked.peak) == (3, 1)
    assert registry.locks.taken == {"exclusive": 3}  # once per call, not once per layer


async def test_replacing_the_locks_applies_to_toolsets_already_resolved(deps: AgentDeps) -> None:
    meter = Concurrency()
    system = ToolSystem(registry_with(meter, lock=True))
    agent = through_the_system(system.registry)  # resolved now, with the registry's default locks
    shared = CountingLocks()
    system.locks = shared  # as the server does once it knows it has Redis
    assert system.registry.locks is shared
    await three_runs(agent, deps)
    assert shared.taken == {"exclusive": 3} and meter.peak == 1


async def test_retries_times_results_and_required_approval_without_the_tool_system(
    deps: AgentDeps,
) -> None:
    registry = ToolRegistry()
    attempts: list[int] = []

    def flaky() -> str:
        """Fails twice, then works."""
        attempts.append(len(attempts))
        if len(attempts) < 3:
            raise ConnectionError("reset")
        return "ok"

    def report() -> ToolResult:
        """A report."""
        return ToolResult("the figures", title="Figures", metadata={"rows": 2})

    def wipe(ctx: RunContext[Any]) -> str:
        """Delete everything."""
        return "wiped"

    registry.add_tool(flaky, retry=RetryPolicy(attempts=3, backoff=0.001))
    registry.add_tool(report)
    registry.add_tool(wipe, approval=ApprovalInfo("deletes every document", risk="high", required=True))
    script = Script([[("flaky", {}), ("report", {})]])
    agent = Agent(script.model, deps_type=AgentDeps, toolsets=registry.resolve())
    result = await agent.run("go", deps=deps)
    assert len(attempts) == 3 and script.returns["flaky"] == ["ok"]
    assert script.returns["report"] == ["the figures"]  # the model sees the output only
    returns = {
        p.tool_name: p
        for m in result.all_messages()
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    }
    assert set(returns["flaky"].metadata[TIMING_KEY]) == {"started_at", "ended_at", "duration_ms"}
    assert returns["report"].metadata["title"] == "Figures"

    asking = Script([[("wipe", {})]])
    agent = Agent(
        asking.model,
        deps_type=AgentDeps,
        toolsets=registry.resolve(tools=["wipe"]),
        output_type=[str, DeferredToolRequests],
    )
    paused = await agent.run("wipe it", deps=deps)
    assert isinstance(paused.output, DeferredToolRequests)
    [request] = paused.output.approvals
    assert paused.output.metadata[request.tool_call_id] == {
        "reason": "deletes every document",
        "risk": "high",
        "policy": "required by the tool",
        "tool": "wipe",
    }
    approved = DeferredToolResults(approvals={request.tool_call_id: ToolApproved()})
    done = await agent.run(message_history=paused.all_messages(), deferred_tool_results=approved, deps=deps)
    assert done.output == "done" and asking.returns["wipe"] == ["wiped"]
