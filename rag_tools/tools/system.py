"""``ToolSystem``: registry, hooks, approval policy, retries and truncation, wired into an agent.

Give an agent ``system.toolsets(...)`` and ``system.capability()``. The capability is one
pydantic-ai ``Hooks``: ``before_tool_execute`` enforces the approval policy for every tool the
agent can call, and ``tool_execute`` runs the hook chain around the call, retrying transient
errors for tools that opted in, holding the tool's lock (``lock=True``, inside the hooks: hooks
never wait for it), delivering ``ToolResult``s (``results``) and cutting results longer than
``output_limit`` for the model. Every call is timed (``timing.py``): its start and end reach the
client and the thread's history. Timeouts and serialised execution within a run step are
pydantic-ai's own per-tool ``timeout`` and ``sequential``; streaming tools are turned into plain
ones when registered (``streaming``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel
from pydantic_ai import RunContext
from pydantic_ai.capabilities import Hooks
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset

from ..progress import report_progress
from ..state import ToolContext
from .approval import APPROVAL_NAMESPACE, ApprovalPolicy, approval_hook
from .hooks import PASS_THROUGH, ToolHooks
from .loader import LoadReport, load_tool_dirs
from .locks import LocalToolLocks, ToolLocks
from .outputs import OUTPUTS_NAMESPACE, READER_TOOL, ToolOutputs, output_toolset, truncate
from .registry import ToolRegistry
from .results import ATTACHMENTS_NAMESPACE, ToolAttachments, ToolResult, deliver
from .timing import ToolCallTiming, with_timing

__all__ = ["ToolSystem"]


class ToolSystem:
    """Everything around tool calls that pydantic-ai does not already do.

    ``locks`` serialises the calls of ``lock=True`` tools (``LocalToolLocks`` unless given; the
    server sets a Redis-backed one when it has Redis); ``attachment_limit`` is the largest file, in
    bytes, a ``ToolResult`` may attach.
    """

    def __init__(
        self,
        registry: ToolRegistry | None = None,
        *,
        hooks: ToolHooks | None = None,
        approve_tools: Sequence[str] = (),
        output_limit: int | None = 20_000,
        locks: ToolLocks | None = None,
        attachment_limit: int = 1_000_000,
    ) -> None:
        self.registry = registry or ToolRegistry()
        self.hooks = hooks or ToolHooks()
        self.approve_tools = list(approve_tools)
        self.output_limit = output_limit
        self.locks: ToolLocks = locks or LocalToolLocks()
        self.attachment_limit = attachment_limit

    @property
    def namespaces(self) -> dict[str, type[BaseModel]]:
        """State namespaces the system keeps per thread (for ``Toolkit.namespaces``)."""
        return {
            APPROVAL_NAMESPACE: ApprovalPolicy,
            OUTPUTS_NAMESPACE: ToolOutputs,
            ATTACHMENTS_NAMESPACE: ToolAttachments,
        }

    def load(self, dirs: Sequence[Any]) -> LoadReport:
        """Register the tools of ``dirs`` (see ``load_tool_dirs``)."""
        return load_tool_dirs(self.registry, dirs)

    def toolsets(
        self,
        tools: Sequence[str] | None = None,
        toolsets: Sequence[str] | None = None,
        *,
        extra: Mapping[str, AbstractToolset[Any]] | None = None,
    ) -> list[AbstractToolset[Any]]:
        """The agent's toolsets: ``extra`` ones plus the selected registry entries, preflighted."""
        extra = dict(extra or {})
        if self.output_limit:
            extra["tool output reader"] = output_toolset(self.output_limit)
        return self.registry.resolve(tools, toolsets, extra=extra)

    def capability(self) -> Hooks[Any]:
        """The pydantic-ai capability enforcing approval and running hooks, retries and truncation."""
        return Hooks(
            before_tool_execute=approval_hook(self.approve_tools),
            tool_execute=self._execute,
            id="ragstream-tool-system",
            description="approval policy, tool hooks, retries, result truncation",
        )

    async def _execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: dict[str, Any],
        handler: Any,
    ) -> Any:
        spec = self.registry.tools.get(tool_def.name)
        retry = spec.options.retry if spec is not None else None
        locked = spec is not None and spec.options.lock

        async def waiting() -> None:
            await report_progress(ctx, f"waiting for {tool_def.name}")

        async def attempt(arguments: dict[str, Any]) -> Any:
            if not locked:
                return await handler(arguments)
            async with self.locks.hold(tool_def.name, on_wait=waiting):
                return await handler(arguments)

        async def execute(arguments: dict[str, Any]) -> Any:
            attempts = retry.attempts if retry else 1
            for number in range(attempts):
                try:
                    return await attempt(arguments)
                except PASS_THROUGH:
                    raise
                except Exception as exc:
                    if retry is None or not isinstance(exc, retry.on) or number == attempts - 1:
                        raise
                    await asyncio.sleep(retry.backoff * 2**number)
            raise AssertionError("unreachable")

        timing = ToolCallTiming(tool_def.name, call.tool_call_id)
        limit = self.output_limit if tool_def.name != READER_TOOL else None
        try:
            result = (
                await self.hooks.run(ctx, call, tool_def, args, execute)
                if self.hooks
                else await execute(args)
            )
            if isinstance(result, ToolResult):  # may raise ToolFailed: ``is_error`` reaches the model
                result = await deliver(
                    ctx,
                    tool_def.name,
                    call.tool_call_id,
                    result,
                    output_limit=limit,
                    attachment_limit=self.attachment_limit,
                )
            else:
                context = getattr(ctx.deps, "tool_context", None)
                if limit and isinstance(context, ToolContext):
                    result = truncate(context, tool_def.name, call.tool_call_id, result, limit)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a retry, an approval request, an error: reported, then on its way
            timing.end(type(exc).__name__)
            await timing.report(ctx)
            raise
        timing.end()
        await timing.report(ctx)
        return with_timing(result, timing)
