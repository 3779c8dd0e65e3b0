"""A model call a tool makes counts in its run (``rag_tools.models.model_run_options``)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits

from rag_tools.models import model_run_options


def agent_with_a_tool_that_asks_a_model() -> Agent[None, str]:
    def outer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(isinstance(p, ToolReturnPart) for m in messages for p in m.parts):
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("summarise", {})])

    inner = FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart("a summary")]))
    agent: Agent[None, str] = Agent(FunctionModel(outer))

    @agent.tool
    async def summarise(ctx: RunContext[Any]) -> str:
        return (await Agent(inner).run("summarise", **model_run_options(ctx.deps, ctx))).output

    return agent


async def test_the_tools_model_call_is_in_the_runs_usage() -> None:
    result = await agent_with_a_tool_that_asks_a_model().run("q")
    assert result.usage.requests == 3  # the chat model twice, the tool's call once


async def test_the_runs_usage_limit_holds_over_the_tools_model_call() -> None:
    agent = agent_with_a_tool_that_asks_a_model()
    with pytest.raises(UsageLimitExceeded):  # two of its own plus the tool's: three
        await agent.run("q", usage_limits=UsageLimits(request_limit=2))
