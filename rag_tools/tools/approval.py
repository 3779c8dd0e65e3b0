"""The approval policy: which tool calls wait for a person, per thread, for every kind of tool.

A thread's ``ApprovalPolicy`` (namespace ``tools.approval``, persisted with its state) lists tool
names or glob patterns in ``need_user_approve_tools``; the server adds patterns every thread must
honour. Enforcement is part of the tool system's capability (``ensure_approved``, first thing in its
``tool_execute`` hook, so tool hooks never see a call still waiting for a person), not a wrapper
around some toolsets, so no way of registering a tool escapes it (function tools, toolsets,
factories, MCP): a matching call that is not yet approved raises ``ApprovalRequired`` with the tool's approval
metadata (reason, risk), which the AG-UI adapter turns into an interrupt. An approval may carry
edited arguments; the call then runs with them, and its result's metadata keeps them
(``EDITED_ARGS_KEY``), since the call in the history stays the model's proposal.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import Field
from pydantic_ai import ApprovalRequired, RunContext
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.tools import ToolDefinition

from ..state import StateModel, ToolContext
from .names import model_name

__all__ = [
    "APPROVAL_NAMESPACE",
    "EDITED_ARGS_KEY",
    "ApprovalPolicy",
    "approval_hook",
    "approval_request",
    "edited_args",
    "ensure_approved",
    "matching_pattern",
]

APPROVAL_NAMESPACE = "tools.approval"
EDITED_ARGS_KEY = "ragstream.edited_args"


class ApprovalPolicy(StateModel):
    """Tool names or glob patterns whose calls need the user's approval in this thread."""

    client_fields: ClassVar[frozenset[str]] = frozenset()

    need_user_approve_tools: list[str] = Field(default_factory=list, max_length=200)


def matching_pattern(tool_name: str, patterns: Sequence[str]) -> str | None:
    """The first pattern naming ``tool_name`` (exact name or glob; a subtool by its model name or
    its scoped one, ``users.create`` or ``users.*``), or ``None``."""
    for pattern in patterns:
        called = model_name(pattern)
        if called == tool_name or fnmatch.fnmatchcase(tool_name, called):
            return pattern
    return None


def thread_patterns(context: ToolContext | None) -> list[str]:
    policy = context.get(APPROVAL_NAMESPACE, ApprovalPolicy) if context is not None else None
    return list(policy.need_user_approve_tools) if policy is not None else []


def ensure_approved(ctx: RunContext[Any], tool_def: ToolDefinition, mandatory: Sequence[str] = ()) -> None:
    """Raise ``ApprovalRequired`` for a call that needs a person's approval and has not had it: its
    tool's ``approval.required``, or a name in ``mandatory`` or the thread's policy."""
    if ctx.tool_call_approved or tool_def.kind == "external":
        return
    metadata = dict((tool_def.metadata or {}).get("approval") or {})
    required_by_tool = bool(metadata.pop("required", False))
    context = getattr(ctx.deps, "tool_context", None)
    pattern = matching_pattern(tool_def.name, [*mandatory, *thread_patterns(context)])
    if pattern is not None or required_by_tool:
        raise approval_request(tool_def.name, metadata, pattern)


def approval_hook(mandatory: Sequence[str] = ()) -> Any:
    """``ensure_approved`` as a pydantic-ai ``before_tool_execute`` hook, for an agent without the
    tool system (whose capability checks approval itself, before any tool hook)."""

    async def require_approval(
        ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition, args: dict[str, Any]
    ) -> dict[str, Any]:
        ensure_approved(ctx, tool_def, mandatory)
        return args

    return require_approval


def approval_request(tool_name: str, approval: dict[str, Any], pattern: str | None) -> ApprovalRequired:
    """The request that pauses a call for approval: the tool's ``approval`` metadata (reason, risk),
    and the policy ``pattern`` that asked for it (``None``: the tool itself requires it)."""
    metadata = {key: value for key, value in approval.items() if key != "required"}
    metadata.setdefault("reason", f"{tool_name} needs your approval")
    metadata["policy"] = pattern or "required by the tool"
    metadata["tool"] = tool_name
    return ApprovalRequired(metadata=metadata)


def edited_args(ctx: RunContext[Any], call: ToolCallPart) -> dict[str, Any] | None:
    """The arguments ``call`` runs with when a person changed them on approving it, else ``None``.

    pydantic-ai hands the tool hooks the call with the approved arguments in place; the model's
    proposal is the call of that id in the run's history.
    """
    if not ctx.tool_call_approved:
        return None
    for message in reversed(ctx.messages):
        if not isinstance(message, ModelResponse):
            continue
        for part in message.parts:
            if isinstance(part, ToolCallPart) and part.tool_call_id == call.tool_call_id:
                run_with = call.args_as_dict()
                return None if part.args_as_dict() == run_with else run_with
    return None
