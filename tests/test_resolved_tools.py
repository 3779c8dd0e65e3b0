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
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import DeferredToolResults

from rag_tools import AgentDeps, ToolContext
from rag_tools.kb import KnowledgeBase
from rag_tools.tools import (
    ApprovalInfo,
    DuplicateToolError,
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


# -- part 2: pygents' subtools and doc_tree --------------------------------------------------------


class Recorder:
    """A model that calls the given tools once (in parallel), then answers; it records what it saw."""

    def __init__(self, *calls: tuple[str, dict[str, Any]]) -> None:
        self.calls = calls
        self.tools: dict[str, dict[str, Any]] = {}
        self.returns: dict[str, Any] = {}
        self.retries: list[str] = []

    async def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.tools = {t.name: t.parameters_json_schema for t in info.function_tools}
        last = messages[-1]
        if len(messages) == 1:
            return ModelResponse(
                parts=[
                    ToolCallPart(name, args, tool_call_id=f"c{i}")
                    for i, (name, args) in enumerate(self.calls)
                ]
            )
        for part in last.parts if isinstance(last, ModelRequest) else []:
            if isinstance(part, ToolReturnPart) and part.outcome != "retried":
                self.returns[part.tool_name] = part.content
            elif isinstance(part, RetryPromptPart | ToolReturnPart):  # a retry, as 1.x and 2.x report it
                self.retries.append(str(part.content))
        return ModelResponse(parts=[TextPart("done")])

    def agent(self, toolsets: list[Any]) -> Agent[AgentDeps, Any]:
        return Agent(FunctionModel(self.respond), deps_type=AgentDeps, toolsets=toolsets)


def user_tools(meter: Concurrency) -> tuple[ToolRegistry, Any, Any]:
    """The seed's example: ``manage_users`` with two subtools and a grandchild."""
    registry = ToolRegistry(locks=CountingLocks())
    tokens = iter(f"token-{n}" for n in range(1, 100))

    @registry.tool
    async def manage_users() -> str:
        """Top-level user management tool."""
        return "users: alice"

    @manage_users.subtool(tags=["admin"], api_key=lambda: next(tokens), region="eu")
    async def create_user(username: str, api_key: str, region: str) -> str:
        """Create a new user.

        Args:
            username: The new user's name.
            api_key: The directory's key (fixed).
            region: Where the user lives (fixed).
        """
        return f"created {username} in {region} with {api_key}"

    @manage_users.subtool(lock=True)
    async def delete_user(username: str) -> str:
        """Delete an existing user."""
        await meter.visit()
        return f"deleted {username}"

    @create_user.subtool()
    def welcome(username: str) -> str:
        """Send the welcome mail."""
        return f"welcome sent to {username}"

    return registry, manage_users, create_user


async def test_subtools_join_the_parents_group_with_their_lock_tags_and_fixed_arguments(
    deps: AgentDeps,
) -> None:
    meter = Concurrency()
    registry, manage_users, create_user = user_tools(meter)
    assert list(registry.tools) == [
        "manage_users",
        "manage_users_create_user",
        "manage_users_delete_user",
        "manage_users_create_user_welcome",
    ]
    assert registry.tools["manage_users.create_user"] is registry.tools["manage_users_create_user"]
    assert registry.tools["manage_users.create_user.welcome"].name == "manage_users_create_user_welcome"
    assert "manage_users.delete_user" in registry.tools and "manage_users.nobody" not in registry.tools
    assert registry.tools["manage_users.create_user"].options.tags == {"admin"}
    assert registry.tools["manage_users.delete_user"].options.lock

    tree = {
        "name": "manage_users",
        "description": "Top-level user management tool.",
        "subtools": [
            {
                "name": "create_user",
                "description": "Create a new user.",
                "subtools": [{"name": "welcome", "description": "Send the welcome mail.", "subtools": []}],
            },
            {"name": "delete_user", "description": "Delete an existing user.", "subtools": []},
        ],
    }
    assert manage_users.doc_tree() == tree and registry.doc_tree() == [tree]

    # the model sees parent_child names, without the fixed arguments; every call gets fresh ones
    model = Recorder(
        ("manage_users_create_user", {"username": "alice"}),
        ("manage_users_create_user_welcome", {"username": "alice"}),
    )
    await model.agent(registry.resolve()).run("add alice", deps=deps)
    assert sorted(model.tools) == sorted(registry.tools)
    assert set(model.tools["manage_users_create_user"]["properties"]) == {"username"}
    assert model.returns == {
        "manage_users_create_user": "created alice in eu with token-1",
        "manage_users_create_user_welcome": "welcome sent to alice",
    }
    # ... and cannot supply them itself
    sneaky = Recorder(("manage_users_create_user", {"username": "bob", "region": "us"}))
    await sneaky.agent(registry.resolve()).run("add bob", deps=deps)
    assert sneaky.returns == {} and "'loc': ['region']" in sneaky.retries[0]
    assert "extra_forbidden" in sneaky.retries[0]
    # called directly, the tool still gets its fixed arguments
    assert await create_user("carol") == "created carol in eu with token-2"

    # selecting a parent selects its group; a subtool is selected by its scoped name too
    chosen = Recorder()
    await chosen.agent(registry.resolve(tools=["manage_users.create_user"])).run("hi", deps=deps)
    assert sorted(chosen.tools) == ["manage_users_create_user", "manage_users_create_user_welcome"]
    everything = Recorder()
    await everything.agent(registry.resolve(tools=["manage_users"])).run("hi", deps=deps)
    assert sorted(everything.tools) == sorted(registry.tools)

    # the subtool's lock holds across three concurrent runs
    runs = [
        Recorder(("manage_users_delete_user", {"username": f"u{n}"}))
        .agent(registry.resolve())
        .run("go", deps=deps)
        for n in range(3)
    ]
    await asyncio.gather(*runs)
    assert (meter.calls, meter.peak) == (3, 1)
    assert registry.locks.taken == {"manage_users_delete_user": 3}  # type: ignore[attr-defined]


def test_subtool_mistakes_are_refused_when_declared() -> None:
    registry = ToolRegistry()

    @registry.tool
    def reports() -> str:
        """Reports."""
        return "r"

    with pytest.raises(TypeError, match=r"fixed arguments \['colour'\] are not parameters of 'monthly'"):

        @reports.subtool(colour="red")
        def monthly(month: str) -> str:
            """A month's report."""
            return month

    def reports_weekly() -> str:
        """Already a top-level tool."""
        return "w"

    registry.add_tool(reports_weekly)
    with pytest.raises(DuplicateToolError, match="'reports_weekly'"):

        @reports.subtool()
        def weekly() -> str:
            """A week's report."""
            return "w"

    with pytest.raises(ValueError, match="model tool names have at most 64"):
        reports.subtool(lambda: "x", name="a_very_long_name_that_no_model_provider_would_accept_as_a_tool")
    assert list(registry.tools) == ["reports", "reports_weekly"]
    with pytest.raises(TypeError, match="lock is True or False, not 'yes'"):
        reports.subtool(lambda: "x", name="daily", lock="yes")


@pytest.mark.parametrize("pattern", ["manage_users.create_user", "manage_users.*", "manage_users_create_*"])
async def test_approval_patterns_and_hooks_name_a_subtool_by_either_name(
    pattern: str, deps: AgentDeps
) -> None:
    """A subtool is found in the registry as ``parent.child``; a person writing that name in an
    approval pattern or a hook means the same tool, never a pattern that silently matches nothing."""
    registry, _, _ = user_tools(Concurrency())
    seen: list[str] = []
    system = ToolSystem(registry, approve_tools=[pattern])
    system.hooks.add_pre(lambda hook, args: seen.append(hook.tool_name), tool="manage_users.create_user")
    model = Recorder(("manage_users_create_user", {"username": "alice"}))
    agent = Agent(
        FunctionModel(model.respond),
        deps_type=AgentDeps,
        toolsets=system.toolsets(),
        capabilities=[system.capability()],
        output_type=[str, DeferredToolRequests],
    )
    waiting = await agent.run("add alice", deps=deps)
    assert isinstance(waiting.output, DeferredToolRequests)
    assert [call.tool_name for call in waiting.output.approvals] == ["manage_users_create_user"]
    assert model.returns == {} and seen == []  # asked first; nothing ran

    call_id = waiting.output.approvals[0].tool_call_id
    approved = await agent.run(
        message_history=waiting.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={call_id: ToolApproved()}),
        deps=deps,
    )
    assert approved.output == "done"
    assert model.returns == {"manage_users_create_user": "created alice in eu with token-1"}
    assert seen == ["manage_users_create_user"]  # the hook registered under the scoped name ran


@pytest.mark.parametrize("configure", ["hooks", "approval patterns"])
async def test_the_system_refuses_a_run_without_its_capability_when_it_has_hooks_or_patterns(
    configure: str, deps: AgentDeps
) -> None:
    """Hooks and approval patterns are the tool system's, applied by its capability: an agent given
    only ``system.toolsets()`` would run the tools without them. It is stopped before the model is
    asked anything, saying what is missing."""
    meter = Concurrency()
    system = ToolSystem(
        registry_with(meter, lock=True), approve_tools=["exclusive"] if configure != "hooks" else ()
    )
    if configure == "hooks":
        system.hooks.add_pre(lambda hook, args: None)
    script = Script([[("exclusive", {"label": "x"})]])
    alone = Agent(script.model, deps_type=AgentDeps, toolsets=system.toolsets())
    with pytest.raises(
        UserError, match=f"system's {configure} would not apply: give the agent system.capability"
    ):
        await alone.run("go", deps=deps)
    assert script.seen_tools == [] and meter.calls == 0

    plain = ToolSystem(registry_with(meter, lock=True))  # nothing only the capability applies: runs
    assert await three_runs(resolved_only(plain.registry), deps) == ["done"] * 3
    script = Script([[("exclusive", {"label": "x"})]])
    assert (
        await Agent(script.model, deps_type=AgentDeps, toolsets=plain.toolsets()).run("go", deps=deps)
    ).output == "done"
