"""The tool system through real pydantic-ai agent runs driven by scripted models."""

from __future__ import annotations

import asyncio
import logging
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import (
    Agent,
    ApprovalRequired,
    CallDeferred,
    CancellationToken,
    DeferredToolRequests,
    DeferredToolResults,
    FunctionToolset,
    ModelRetry,
    RunContext,
    Tool,
    ToolApproved,
)
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelRequest, RetryPromptPart, ToolCallPart, ToolReturnPart
from pydantic_ai.toolsets import WrapperToolset

from rag_tools import AgentDeps, ToolContext
from rag_tools.kb import KnowledgeBase
from rag_tools.tools import (
    APPROVAL_NAMESPACE,
    EDITED_ARGS_KEY,
    OUTPUTS_NAMESPACE,
    ApprovalInfo,
    ApprovalPolicy,
    DuplicateToolError,
    RetryPolicy,
    ToolAttachment,
    ToolHooks,
    ToolOutcome,
    ToolOutputs,
    ToolRegistry,
    ToolResult,
    ToolSystem,
    exported_tools,
    load_tool_dirs,
    tool_options,
)
from rag_tools.tools.outputs import OutputReaderToolset
from tests.agents import Script
from tests.embedders import HashingEmbeddingModel


@pytest.fixture
async def deps(tmp_path: Path) -> Any:
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as kb:
        context = ToolContext()
        context.get_or_create(APPROVAL_NAMESPACE, ApprovalPolicy)
        yield AgentDeps(client=kb, tool_context=context)


def agent_for(script: Script, system: ToolSystem, **kw: Any) -> Agent[AgentDeps, Any]:
    return Agent(
        script.model,
        deps_type=AgentDeps,
        toolsets=system.toolsets(**kw),
        capabilities=[system.capability()],
        output_type=[str, DeferredToolRequests],
    )


def retry_texts(messages: list[Any]) -> list[str]:
    """What the model was asked to retry (pydantic-ai 2.x reports tool retries as 'retried' returns)."""
    parts = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts]
    return [
        str(p.content)
        for p in parts
        if isinstance(p, RetryPromptPart) or (isinstance(p, ToolReturnPart) and p.outcome == "retried")
    ]


def tool_returns(messages: list[Any]) -> list[ToolReturnPart]:
    parts = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts]
    return [p for p in parts if isinstance(p, ToolReturnPart) and p.outcome != "retried"]


# -- registry ------------------------------------------------------------------------------------


async def test_tools_and_toolsets_live_in_separate_namespaces(deps: AgentDeps) -> None:
    registry = ToolRegistry()

    def notes(topic: str) -> str:
        """Notes about a topic."""
        return f"tool notes on {topic}"

    registry.add_tool(notes)
    registry.add_tool(Tool(lambda: "pong", name="ping", description="Ping."))
    other: FunctionToolset[Any] = FunctionToolset(id="notes-set")

    @other.tool_plain
    def list_notes() -> list[str]:
        """List notes."""
        return ["a", "b"]

    registry.add_toolset("notes", other)  # same name as the tool: a different namespace
    script = Script([[("notes", {"topic": "x"}), ("ping", {}), ("list_notes", {})]])
    await agent_for(script, ToolSystem(registry)).run("go", deps=deps)
    assert script.returns["notes"] == ["tool notes on x"]
    assert script.returns["ping"] == ["pong"]
    assert script.returns["list_notes"] == [["a", "b"]]
    only = Script([[("ping", {})]])
    await agent_for(only, ToolSystem(registry), tools=["ping"], toolsets=[]).run("go", deps=deps)
    assert only.seen_tools[0] == ["ping"]  # read_tool_output only once something was truncated
    with pytest.raises(KeyError, match="no tool named 'nope'"):
        ToolSystem(registry).toolsets(tools=["nope"])


async def test_toolset_factories_run_fresh_per_run_and_are_type_checked(deps: AgentDeps) -> None:
    calls: list[str] = []

    async def async_factory(ctx: RunContext[Any]) -> FunctionToolset[Any]:
        calls.append("async")
        toolset: FunctionToolset[Any] = FunctionToolset()

        @toolset.tool_plain
        def fresh() -> int:
            """A fresh value."""
            return len(calls)

        return toolset

    def bad_factory() -> str:
        return "not a toolset"

    registry = ToolRegistry()
    registry.add_toolset("fresh", async_factory)
    registry.add_toolset("bad", bad_factory)
    for expected in (1, 2):
        script = Script([[("fresh", {})]])
        await agent_for(script, ToolSystem(registry), toolsets=["fresh"]).run("go", deps=deps)
        assert script.returns["fresh"] == [expected]
    with pytest.raises(TypeError, match="toolset factory 'bad' returned str, not a pydantic-ai toolset"):
        await agent_for(Script([[]]), ToolSystem(registry), toolsets=["bad"]).run("go", deps=deps)


async def test_duplicate_tool_names_are_rejected_naming_both_origins(deps: AgentDeps) -> None:
    registry = ToolRegistry()
    registry.add_tool(lambda q: q, name="search", origin="my_tools.py")
    rag: FunctionToolset[Any] = FunctionToolset()
    rag.add_function(lambda query: query, name="search")
    with pytest.raises(
        DuplicateToolError,
        match=r"'search' is provided by both rag toolkit and tool 'search' from my_tools\.py",
    ):
        ToolSystem(registry).toolsets(extra={"rag toolkit": rag})
    with pytest.raises(DuplicateToolError, match=r"already registered from my_tools\.py"):
        registry.add_tool(lambda: 1, name="search", origin="other.py")

    def factory() -> FunctionToolset[Any]:
        late: FunctionToolset[Any] = FunctionToolset()
        late.add_function(lambda query: query, name="search")
        return late

    dynamic = ToolRegistry()
    dynamic.add_toolset("late", factory, origin="late.py")
    agent = agent_for(Script([[]]), ToolSystem(dynamic), extra={"rag toolkit": rag})
    with pytest.raises(
        UserError,
        match=r"Toolset 'late' from late\.py defines a tool whose name conflicts with existing tool from rag toolkit",
    ):
        await agent.run("go", deps=deps)


# -- discovery and loading -----------------------------------------------------------------------


def module(source: str) -> types.ModuleType:
    mod = types.ModuleType("user_tools")
    exec(textwrap.dedent(source), mod.__dict__)
    return mod


def test_modules_export_tools_explicitly() -> None:
    tools, _ = exported_tools(module("def a(): 'A.'\ndef b(): 'B.'\nTOOLS = [a]"))
    assert [t.__name__ for _, t in tools] == ["a"]  # b is not exported, so not registered
    tools, _ = exported_tools(module("def a(): 'A.'\nTOOLS = {'renamed': a}"))
    assert [n for n, _ in tools] == ["renamed"]
    tools, _ = exported_tools(module("def a(): 'A.'\ndef _h(): pass\n__all__ = ['a']"))
    assert [n for n, _ in tools] == ["a"]
    with pytest.raises(ValueError, match="exports nothing"):
        exported_tools(module("def a(): 'A.'"))
    with pytest.raises(ValueError, match="not callable") as err:
        exported_tools(
            module(
                """
                from pydantic_ai import FunctionToolset
                def a(): 'A.'
                TOOLS = [a, 42, FunctionToolset(), a]
                """
            )
        )
    message = str(err.value)
    assert "'42' is not callable (int)" in message
    assert "is a toolset: export it in TOOLSETS" in message
    assert "tool name 'a' is exported twice" in message


def test_loader_reports_each_problem_file_and_keeps_going(tmp_path: Path) -> None:
    (tmp_path / "good.py").write_text(
        "def hello(name: str) -> str:\n    'Greet.'\n    return 'hi ' + name\nTOOLS = [hello]\n"
    )
    (tmp_path / "syntax.py").write_text("def broken(:\n")
    (tmp_path / "imports.py").write_text("import not_a_module_anywhere\nTOOLS = []\n")
    (tmp_path / "exports.py").write_text("TOOLS = [1, 2]\n")
    (tmp_path / "exits.py").write_text("import sys\nsys.exit('this tools file exits at import')\n")
    # a tool pydantic-ai cannot describe, and a name no model takes: each reported, their
    # neighbours in the same file still load
    (tmp_path / "mixed.py").write_text(
        "from pydantic_ai import RunContext\n"
        "def late(x: int, ctx: RunContext) -> int:\n    'Late context.'\n    return x\n"
        "def spaced() -> str:\n    'Spaced.'\n    return ''\n"
        "def fine() -> str:\n    'Fine.'\n    return 'ok'\n"
        "TOOLS = {'late': late, 'bad name': spaced, 'fine': fine}\n"
    )
    (tmp_path / "_private.py").write_text("raise RuntimeError('never imported')\n")
    registry = ToolRegistry()
    report = load_tool_dirs(registry, [tmp_path, tmp_path / "missing"])
    assert sorted(report.tools) == ["fine", "hello"]
    assert sorted(registry.tools) == ["fine", "hello"]
    kinds = sorted((Path(d.path).name, d.kind) for d in report.diagnostics)
    assert kinds == [
        ("exits.py", "import"),
        ("exports.py", "export"),
        ("imports.py", "import"),
        ("mixed.py", "export"),
        ("mixed.py", "export"),
        ("syntax.py", "syntax"),
    ]
    messages = {Path(d.path).name: d.message for d in report.diagnostics}
    assert "line 1" in messages["syntax.py"]
    assert "not_a_module_anywhere" in messages["imports.py"]
    assert "'1' is not callable" in messages["exports.py"]
    assert "SystemExit: this tools file exits at import" in messages["exits.py"]
    mixed = [d.message for d in report.diagnostics if Path(d.path).name == "mixed.py"]
    assert any("late" in m and "RunContext annotations" in m for m in mixed)
    assert any("'bad name'" in m and "64 letters" in m for m in mixed)


# -- hooks ---------------------------------------------------------------------------------------


async def test_hooks_run_in_order_and_may_rewrite_arguments(deps: AgentDeps) -> None:
    order: list[str] = []
    registry = ToolRegistry()

    def echo(text: str) -> str:
        """Echo."""
        order.append(f"execute:{text}")
        return text

    registry.add_tool(echo, tags=["io"])
    hooks = ToolHooks()
    hooks.add_pre(lambda ctx, args: order.append("global-pre") or {"text": args["text"].upper()})
    hooks.add_pre(lambda ctx, args: order.append("tool-pre") or None, tool="echo")
    hooks.add_post(lambda ctx, outcome: order.append("tool-post") or None, tool="echo")
    hooks.add_post(
        lambda ctx, outcome: order.append("global-post") or ToolOutcome(result=outcome.result + "!")
    )
    hooks.add_pre(lambda ctx, args: order.append("net-only"), tags=["network"])  # tag filtered: not for echo
    script = Script([[("echo", {"text": "hi"})]])
    await agent_for(script, ToolSystem(registry, hooks=hooks)).run("go", deps=deps)
    assert order == ["global-pre", "tool-pre", "execute:HI", "tool-post", "global-post"]
    assert script.returns["echo"] == ["HI!"]


async def test_post_hooks_see_exceptions_and_may_replace_them(deps: AgentDeps) -> None:
    registry = ToolRegistry()

    def flaky() -> str:
        """Fails."""
        raise ValueError("disk on fire")

    registry.add_tool(flaky)
    seen: list[str] = []

    def recover(ctx: Any, outcome: ToolOutcome) -> ToolOutcome | None:
        seen.append(repr(outcome.error))
        return ToolOutcome(result="recovered")

    hooks = ToolHooks()
    hooks.add_post(recover, tool="flaky")
    script = Script([[("flaky", {})]])
    await agent_for(script, ToolSystem(registry, hooks=hooks)).run("go", deps=deps)
    assert script.returns["flaky"] == ["recovered"]
    assert seen == ["ValueError('disk on fire')"]

    unhandled = ToolHooks()
    unhandled.add_post(lambda ctx, outcome: None)  # keeps the exception
    with pytest.raises(ValueError, match="disk on fire"):
        await agent_for(Script([[("flaky", {})]]), ToolSystem(registry, hooks=unhandled)).run("go", deps=deps)


async def test_model_retry_deferral_and_approval_pass_through_hooks(deps: AgentDeps) -> None:
    attempts: list[int] = []
    registry = ToolRegistry()

    def picky(n: int) -> str:
        """Wants n to be 2."""
        attempts.append(n)
        if n != 2:
            raise ModelRetry("use n=2")
        return "ok"

    def later() -> str:
        """Deferred."""
        raise CallDeferred(metadata={"job": "j1"})

    def guarded() -> str:
        """Asks for approval itself."""
        raise ApprovalRequired(metadata={"why": "the tool says so"})

    for tool in (picky, later, guarded):
        registry.add_tool(tool)
    post_calls: list[str] = []
    hooks = ToolHooks()
    hooks.add_post(lambda ctx, outcome: post_calls.append(ctx.tool_name) or None)
    script = Script([[("picky", {"n": 1})], [("picky", {"n": 2})]])
    result = await agent_for(script, ToolSystem(registry, hooks=hooks)).run("go", deps=deps)
    assert attempts == [1, 2]
    assert retry_texts(result.all_messages()) == ["use n=2"]  # the model was asked to retry
    assert post_calls == ["picky"]  # only the successful call reached post-hooks
    deferred = await agent_for(
        Script([[("later", {}), ("guarded", {})]]), ToolSystem(registry, hooks=hooks)
    ).run("go", deps=deps)
    assert isinstance(deferred.output, DeferredToolRequests)
    assert [c.tool_name for c in deferred.output.calls] == ["later"]
    assert [c.tool_name for c in deferred.output.approvals] == ["guarded"]
    assert post_calls == ["picky"]


async def test_a_crashing_hook_stops_the_call(deps: AgentDeps) -> None:
    ran: list[str] = []
    registry = ToolRegistry()

    def dangerous() -> str:
        """Must not run when the guard breaks."""
        ran.append("ran")
        return "done"

    registry.add_tool(dangerous)

    def guard(ctx: Any, args: dict[str, Any]) -> None:
        raise RuntimeError("policy service down")

    hooks = ToolHooks()
    hooks.add_pre(guard, name="policy-guard")
    script = Script([[("dangerous", {})]])
    result = await agent_for(script, ToolSystem(registry, hooks=hooks)).run("go", deps=deps)
    assert ran == []
    returned = tool_returns(result.all_messages())[0]
    assert returned.outcome == "failed"
    assert "pre-hook 'policy-guard' failed (RuntimeError: policy service down)" in str(returned.content)


# -- approval policy -----------------------------------------------------------------------------


async def test_no_tool_escapes_the_approval_policy(deps: AgentDeps) -> None:
    ran: list[str] = []
    system = ToolSystem(ToolRegistry())
    agent = agent_for(Script([[("wipe", {"path": "/data"})], []]), system)

    @agent.tool_plain  # registered straight on the agent, not through the registry
    def wipe(path: str) -> str:
        """Delete everything under path."""
        ran.append(path)
        return f"wiped {path}"

    deps.tool_context.get(APPROVAL_NAMESPACE, ApprovalPolicy).need_user_approve_tools = ["wi*"]
    first = await agent.run("go", deps=deps)
    assert ran == []
    assert isinstance(first.output, DeferredToolRequests)
    call = first.output.approvals[0]
    assert first.output.metadata[call.tool_call_id]["policy"] == "wi*"
    approved = DeferredToolResults(
        approvals={call.tool_call_id: ToolApproved(override_args={"path": "/tmp/x"})}
    )
    second = await agent.run(message_history=first.all_messages(), deferred_tool_results=approved, deps=deps)
    assert ran == ["/tmp/x"]  # approved with edited arguments
    # the history keeps the model's proposal as the call and what it ran with on its result
    calls = [p for m in second.all_messages() for p in getattr(m, "parts", []) if isinstance(p, ToolCallPart)]
    assert [c.args_as_dict() for c in calls] == [{"path": "/data"}]
    assert tool_returns(second.all_messages())[0].metadata[EDITED_ARGS_KEY] == {"path": "/tmp/x"}

    # approved as proposed: nothing is recorded as edited
    ran.clear()
    again = await agent.run("go", deps=deps)
    call = again.output.approvals[0]
    as_proposed = DeferredToolResults(approvals={call.tool_call_id: ToolApproved()})
    third = await agent.run(
        message_history=again.all_messages(), deferred_tool_results=as_proposed, deps=deps
    )
    assert ran == ["/data"]
    assert EDITED_ARGS_KEY not in tool_returns(third.all_messages())[0].metadata


async def test_approval_metadata_and_mandatory_patterns(deps: AgentDeps) -> None:
    registry = ToolRegistry()

    @tool_options(approval=ApprovalInfo("sends e-mail to customers", risk="high"))
    def send_mail(to: str) -> str:
        """Send mail."""
        return "sent"

    @tool_options(approval=ApprovalInfo("irreversible", risk="high", required=True))
    def purge() -> str:
        """Purge."""
        return "purged"

    registry.add_tool(send_mail)
    registry.add_tool(purge)
    system = ToolSystem(registry, approve_tools=["send_*"])
    result = await agent_for(Script([[("send_mail", {"to": "x"}), ("purge", {})]]), system).run(
        "go", deps=deps
    )
    assert isinstance(result.output, DeferredToolRequests)
    metadata = {c.tool_name: result.output.metadata[c.tool_call_id] for c in result.output.approvals}
    assert metadata["send_mail"] == {
        "reason": "sends e-mail to customers",
        "risk": "high",
        "policy": "send_*",
        "tool": "send_mail",
    }
    assert metadata["purge"]["policy"] == "required by the tool"


def test_the_policy_persists_with_the_thread() -> None:
    context = ToolContext()
    context.get_or_create(APPROVAL_NAMESPACE, ApprovalPolicy).need_user_approve_tools = ["delete_*"]
    restored = ToolContext.from_dump(context.dump_namespaces())
    assert restored.get_or_create(APPROVAL_NAMESPACE, ApprovalPolicy).need_user_approve_tools == ["delete_*"]
    assert restored.build_state_snapshot()["need_user_approve_tools"] == ["delete_*"]


async def test_an_approval_wrapper_is_not_stacked_on_a_shared_toolset(deps: AgentDeps) -> None:
    shared: FunctionToolset[Any] = FunctionToolset()

    @shared.tool_plain
    def drop() -> str:
        """Drop."""
        return "dropped"

    deps.tool_context.get(APPROVAL_NAMESPACE, ApprovalPolicy).need_user_approve_tools = ["drop"]
    system = ToolSystem(ToolRegistry())
    toolsets = system.toolsets(extra={"shared": shared})
    for _ in range(3):
        agent = Agent(
            Script([[("drop", {})]]).model,
            deps_type=AgentDeps,
            toolsets=toolsets,
            capabilities=[system.capability()],
            output_type=[str, DeferredToolRequests],
        )
        result = await agent.run("go", deps=deps)
        assert len(result.output.approvals) == 1
    unwrapped = (FunctionToolset, OutputReaderToolset)  # the shared set, and the tool-output reader
    assert all(not isinstance(t, WrapperToolset) or type(t.wrapped) in unwrapped for t in toolsets)


async def test_toolset_enters_and_exits_once_per_run(deps: AgentDeps) -> None:
    class Counting(FunctionToolset[Any]):
        entered = 0
        exited = 0

        async def __aenter__(self) -> Any:
            type(self).entered += 1
            return await super().__aenter__()

        async def __aexit__(self, *args: Any) -> Any:
            type(self).exited += 1
            return await super().__aexit__(*args)

    counting = Counting()
    counting.add_function(lambda: "x", name="probe")
    registry = ToolRegistry()
    registry.add_toolset("counting", counting)
    system = ToolSystem(registry)
    for run in (1, 2):
        await agent_for(Script([[("probe", {})], [("probe", {})]]), system).run("go", deps=deps)
        assert (Counting.entered, Counting.exited) == (run, run)


# -- execution controls --------------------------------------------------------------------------


async def test_timeouts_are_enforced_per_call(deps: AgentDeps) -> None:
    finished: list[str] = []
    cancelled: list[str] = []
    registry = ToolRegistry()

    async def wait(ctx: RunContext[Any], seconds: float) -> str:
        """Wait."""
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            cancelled.append(f"wait {seconds}")
            raise
        finished.append(f"wait {seconds}")
        return f"waited {seconds}"

    registry.add_tool(wait, timeout=0.5)
    script = Script([[("wait", {"seconds": 0.01}), ("wait", {"seconds": 30})]])
    result = await agent_for(script, ToolSystem(registry)).run("go", deps=deps)
    assert finished == ["wait 0.01"]  # the short call finished on its own clock
    assert cancelled == ["wait 30.0"]  # the long one was stopped, not left running
    assert "Timed out after 0.5 seconds." in retry_texts(result.all_messages())
    assert [str(p.content) for p in tool_returns(result.all_messages())] == ["waited 0.01"]


async def test_transient_errors_are_retried_only_for_tools_that_opt_in(deps: AgentDeps) -> None:
    calls = {"steady": 0, "fragile": 0}
    registry = ToolRegistry()

    def steady() -> str:
        """Recovers after two hiccups."""
        calls["steady"] += 1
        if calls["steady"] < 3:
            raise ConnectionError("reset")
        return "ok"

    def fragile() -> str:
        """No retry policy."""
        calls["fragile"] += 1
        raise ConnectionError("reset")

    registry.add_tool(steady, retry=RetryPolicy(attempts=3, backoff=0.01))
    registry.add_tool(fragile)
    script = Script([[("steady", {})]])
    await agent_for(script, ToolSystem(registry)).run("go", deps=deps)
    assert script.returns["steady"] == ["ok"]
    assert calls["steady"] == 3
    with pytest.raises(ConnectionError):
        await agent_for(Script([[("fragile", {})]]), ToolSystem(registry)).run("go", deps=deps)
    assert calls["fragile"] == 1


async def test_a_tools_own_timeout_error_is_retried_not_reported_as_the_call_timing_out(
    deps: AgentDeps,
) -> None:
    """pydantic-ai's per-tool timeout takes any ``TimeoutError`` for its own deadline: a backend
    timeout the tool raised after a millisecond was told to the model as "Timed out after 30
    seconds" and never retried, though ``RetryPolicy`` retries ``TimeoutError`` by default."""
    calls = {"fetch": 0}
    registry = ToolRegistry()

    async def fetch() -> str:
        """Fetch from a backend that times out once."""
        calls["fetch"] += 1
        if calls["fetch"] == 1:
            raise TimeoutError("backend read timed out")
        return "fetched"

    registry.add_tool(fetch, timeout=30, retry=RetryPolicy(attempts=2, backoff=0.01), lock=True)
    for system in (True, False):  # with the tool system's capability, and on resolve()'s toolsets alone
        calls["fetch"] = 0
        script = Script([[("fetch", {})]])
        agent = (
            agent_for(script, ToolSystem(registry))
            if system
            else Agent(script.model, deps_type=AgentDeps, toolsets=registry.resolve())
        )
        result = await agent.run("go", deps=deps)
        assert calls["fetch"] == 2
        assert retry_texts(result.all_messages()) == []
        assert [str(p.content) for p in tool_returns(result.all_messages())] == ["fetched"]


async def test_sequential_tools_run_alone(deps: AgentDeps) -> None:
    timeline: list[str] = []
    registry = ToolRegistry()

    async def step(name: str) -> str:
        """A step."""
        timeline.append(f"start {name}")
        await asyncio.sleep(0.05)
        timeline.append(f"end {name}")
        return name

    registry.add_tool(step)
    registry.add_tool(Tool(step, name="exclusive", sequential=True))
    script = Script(
        [
            [
                ("step", {"name": "a"}),
                ("step", {"name": "b"}),
                ("exclusive", {"name": "x"}),
                ("step", {"name": "c"}),
            ]
        ]
    )
    await agent_for(script, ToolSystem(registry)).run("go", deps=deps)
    x_start, x_end = timeline.index("start x"), timeline.index("end x")
    assert x_end == x_start + 1, timeline  # nothing started or ended while x ran
    assert timeline.index("start b") < timeline.index("end a")  # the others overlap


async def test_cancelling_the_run_reaches_a_running_tool(deps: AgentDeps) -> None:
    seen: list[str] = []
    started = asyncio.Event()
    registry = ToolRegistry()

    async def long_job() -> str:
        """Runs long."""
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return "done"

    registry.add_tool(long_job)
    token = CancellationToken()
    run = asyncio.create_task(
        agent_for(Script([[("long_job", {})]]), ToolSystem(registry)).run(
            "go", deps=deps, cancellation_token=token
        )
    )
    await asyncio.wait_for(started.wait(), 10)
    token.cancel()
    with pytest.raises(Exception, match="cancelled"):
        await asyncio.wait_for(run, 10)
    assert seen == ["cancelled"]


async def test_unknown_arguments_are_rejected_not_dropped(deps: AgentDeps) -> None:
    received: list[dict[str, Any]] = []
    registry = ToolRegistry()

    def lookup(name: str) -> str:
        """Look up."""
        received.append({"name": name})
        return name

    registry.add_tool(lookup, tags=["x"], retry=RetryPolicy())  # wrapping options keep the strict schema
    script = Script([[("lookup", {"name": "a", "limit": 5})], [("lookup", {"name": "a"})]])
    result = await agent_for(script, ToolSystem(registry)).run("go", deps=deps)
    retries = retry_texts(result.all_messages())
    assert len(retries) == 1
    assert "limit" in retries[0]
    assert "Extra inputs are not permitted" in retries[0]
    assert received == [{"name": "a"}]  # only the corrected call ran


# -- results, progress, instructions --------------------------------------------------------------


async def test_large_results_are_truncated_and_readable_by_reference(deps: AgentDeps) -> None:
    registry = ToolRegistry()
    big = "".join(f"line {i:05d}\n" for i in range(5000))

    def dump() -> str:
        """A big output."""
        return big

    registry.add_tool(dump)
    system = ToolSystem(registry, output_limit=1000)
    script = Script([[("dump", {})], [("read_tool_output", {"ref": "out-1", "offset": 1000})]])
    await agent_for(script, system).run("go", deps=deps)
    # the reader is offered from the step after the truncation on, not before
    assert "read_tool_output" not in script.seen_tools[0]
    assert "read_tool_output" in script.seen_tools[1]
    shown = script.returns["dump"][0]
    assert shown.startswith(big[:1000])
    assert f"[output truncated: {len(big)} characters, the first 1000 shown" in shown
    assert "read_tool_output(ref='out-1', offset=1000)" in shown
    more = script.returns["read_tool_output"][0]
    assert f"characters 1000-2000 of {len(big)}" in more
    assert big[1000:2000] in more
    outputs = deps.tool_context.get(OUTPUTS_NAMESPACE, ToolOutputs)
    record = outputs.truncated_outputs["out-1"]
    assert (record.tool, record.size, record.kept) == ("dump", len(big), 1000)
    assert "full_outputs" not in deps.tool_context.build_state_snapshot()
    later = Script([[("read_tool_output", {"ref": "out-1", "offset": 4000})]])
    await agent_for(later, system).run("go on", deps=deps)  # a later run of the same thread
    assert "read_tool_output" in later.seen_tools[0]
    assert big[4000:5000] in later.returns["read_tool_output"][0]


async def test_tools_contribute_instructions_and_unavailable_ones_are_left_out(
    deps: AgentDeps, caplog: pytest.LogCaptureFixture
) -> None:
    registry = ToolRegistry()
    registry.add_tool(lambda: "w", name="weather", instructions="Use weather for forecasts, never guess.")
    registry.add_tool(lambda: "x", name="gpu_render", unavailable=lambda: "no GPU on this server")
    seen: list[str | None] = []
    script = Script([[]])
    original = script.function

    async def spy(messages: Any, info: Any) -> Any:
        seen.append(info.instructions)
        return await original(messages, info)

    script.function = spy  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="ragstream.tools"):
        await agent_for(script, ToolSystem(registry)).run("go", deps=deps)
    assert "gpu_render" not in script.seen_tools[0]
    assert "weather" in script.seen_tools[0]
    assert "Use weather for forecasts, never guess." in (seen[0] or "")
    assert "'gpu_render' (registry) is left out of the run: no GPU on this server" in caplog.text


async def test_attachments_of_a_run_with_no_thread_to_keep_them_are_said_to_be_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An agent of a library user's own, run without a ToolContext: its tool's attachment has
    nowhere to be kept; the log says so instead of losing it without a word."""
    registry = ToolRegistry()

    @registry.tool
    def export_orders(month: str) -> ToolResult:
        """Export a month's orders."""
        return ToolResult("Exported.", attachments=[ToolAttachment("orders.csv", "a,b\n", "text/csv")])

    script = Script([[("export_orders", {"month": "May"})]])
    with caplog.at_level(logging.WARNING, logger="ragstream.tools"):
        await agent_for(script, ToolSystem(registry)).run("go")  # no deps: no thread
    assert script.returns["export_orders"] == ["Exported."]
    assert any(
        "export_orders returned 1 attachments" in r.getMessage() and "dropped" in r.getMessage()
        for r in caplog.records
    ), caplog.records
