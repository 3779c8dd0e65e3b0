"""Scripted models for driving real pydantic-ai agents in tests."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel


@dataclass
class Script:
    """A model that makes the given tool calls, one response per step, then says ``final``.

    Each step is a list of ``(tool_name, args)`` made in parallel; an empty step ends the turn. Tool returns are collected in
    ``returns`` (by tool name, in order) so tests can inspect exactly what the model was given.
    """

    steps: Sequence[Sequence[tuple[str, dict[str, Any]]]]
    final: str = "done"
    returns: dict[str, list[Any]] = field(default_factory=dict)
    seen_tools: list[list[str]] = field(default_factory=list)

    def _step(self, messages: list[ModelMessage], info: AgentInfo) -> list[tuple[str, dict[str, Any]]] | None:
        self.seen_tools.append(sorted(t.name for t in info.function_tools))
        last = messages[-1]
        if isinstance(last, ModelRequest):
            for part in last.parts:
                if isinstance(part, ToolReturnPart):
                    self.returns.setdefault(part.tool_name, []).append(part.content)
        turn_start = max(i for i, m in enumerate(messages) if isinstance(m, ModelRequest) and _has_user(m))
        index = sum(1 for m in messages[turn_start:] if isinstance(m, ModelResponse))
        return list(self.steps[index]) if index < len(self.steps) and self.steps[index] else None

    async def function(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls = self._step(messages, info)
        if calls is None:
            return ModelResponse(parts=[TextPart(self.final)])
        return ModelResponse(
            parts=[
                ToolCallPart(name, args, tool_call_id=f"call-{name}-{i}")
                for i, (name, args) in enumerate(calls)
            ]
        )

    async def stream(
        self, messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls]:
        calls = self._step(messages, info)
        if calls is None:
            for word in self.final.split(" "):
                yield word + " "
            return
        n = len([m for m in messages if isinstance(m, ModelResponse)])
        for i, (name, args) in enumerate(calls):
            yield {i: DeltaToolCall(name=name, json_args=json.dumps(args), tool_call_id=f"call-{n}-{i}")}

    @property
    def model(self) -> FunctionModel:
        return FunctionModel(self.function, stream_function=self.stream, model_name="script")


def _has_user(message: ModelRequest) -> bool:
    """Whether ``message`` starts a turn: a user prompt, not beside tool results (where pydantic-ai
    tells a model without tool-availability deltas, as a user prompt, that a tool appeared)."""
    kinds = {part.part_kind for part in message.parts}
    return "user-prompt" in kinds and not kinds & {"tool-return", "retry-prompt"}


Plan = Callable[[list[ModelMessage], AgentInfo], "tuple[str, dict[str, Any]] | str"]


def planned_model(plan: Plan, name: str = "planned") -> FunctionModel:
    """A model that, at each step, makes the one tool call ``plan`` returns, or answers its text."""

    async def function(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = plan(messages, info)
        if isinstance(step, str):
            return ModelResponse(parts=[TextPart(step)])
        return ModelResponse(parts=[ToolCallPart(step[0], step[1])])

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        step = plan(messages, info)
        if isinstance(step, str):
            words = step.split(" ")
            for i, word in enumerate(words):
                yield word if i == len(words) - 1 else word + " "
            return
        yield {0: DeltaToolCall(name=step[0], json_args=json.dumps(step[1]))}

    return FunctionModel(function, stream_function=stream, model_name=name)
