"""A registered tool's options hold wherever it runs: the toolset ``ToolRegistry.resolve()`` returns
applies them itself.

``OptionsToolset`` wraps the registry's tools. Around each call it

- runs the call alone while another call of a ``lock=True`` tool holds its lock (the registry's
  ``ToolLocks``, read at call time, so the server's shared locks apply once it sets them), reporting
  "waiting for <tool>" as progress when it has to wait;
- retries transient errors for a tool with a ``RetryPolicy``, taking the lock per attempt.

Timeouts and ``sequential`` are pydantic-ai's own, on the ``Tool``; instructions and availability
are applied by ``resolve``. pydantic-ai's timeout takes any ``TimeoutError`` out of the call for its
own deadline ("Timed out after N seconds"), so a ``TimeoutError`` the tool raises itself (a backend
that timed out, which the default ``RetryPolicy`` retries) is carried past it and re-raised as is. The rest depends on whether the tool system's capability
(``ToolSystem.capability()``, id ``TOOL_SYSTEM_ID``) is part of the run:

- with it, the capability enforces approval (the thread's policy and ``approval.required``), runs
  the hooks (outside the lock and the retries: they see one call), times the call, and delivers a
  ``ToolResult`` (truncation included);
- without it (an agent given only the resolved toolsets), this toolset asks for approval of a tool
  whose ``ApprovalInfo`` says ``required``, times the call (``ragstream.tool_call``) and delivers a
  ``ToolResult`` (no truncation: that needs the system's output reader).

Either way each option is applied once: a lock is never taken twice for one call.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.toolsets import WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool
from pydantic_ai.toolsets.function import FunctionToolsetTool

from ..progress import report_progress
from .approval import approval_request
from .hooks import PASS_THROUGH
from .locks import ToolLocks
from .options import ToolOptions
from .results import DEFAULT_ATTACHMENT_LIMIT, ToolResult, deliver
from .timing import timed

__all__ = ["TOOL_SYSTEM_ID", "OptionsToolset", "run_with_options", "system_applies"]

TOOL_SYSTEM_ID = "ragstream-tool-system"


class _OwnTimeout(Exception):
    """A ``TimeoutError`` the tool raised itself, on its way past pydantic-ai's per-tool timeout."""

    def __init__(self, error: TimeoutError) -> None:
        super().__init__(str(error))
        self.error = error


def _keeping_own_timeouts(tool: ToolsetTool[Any]) -> ToolsetTool[Any]:
    """``tool`` whose own ``TimeoutError`` reaches ``OptionsToolset`` instead of pydantic-ai's timeout."""
    if not isinstance(tool, FunctionToolsetTool):
        return tool
    call_func = tool.call_func

    async def call(args: dict[str, Any], ctx: RunContext[Any]) -> Any:
        try:
            return await call_func(args, ctx)
        except TimeoutError as error:
            raise _OwnTimeout(error) from error

    return dataclasses.replace(tool, call_func=call)


def system_applies(ctx: RunContext[Any]) -> bool:
    """Whether the tool system's capability is part of this run (it then times, hooks and delivers)."""
    return TOOL_SYSTEM_ID in ctx.capabilities


async def run_with_options(
    ctx: RunContext[Any],
    name: str,
    options: ToolOptions,
    locks: ToolLocks,
    call: Callable[[], Awaitable[Any]],
) -> Any:
    """``call()`` under the tool's lock (when ``lock``), retried as its ``RetryPolicy`` says."""

    async def waiting() -> None:
        await report_progress(ctx, f"waiting for {name}")

    async def attempt() -> Any:
        if not options.lock:
            return await call()
        async with locks.hold(name, on_wait=waiting):
            return await call()

    retry = options.retry
    attempts = retry.attempts if retry else 1
    for number in range(attempts):
        try:
            return await attempt()
        except PASS_THROUGH:
            raise
        except Exception as exc:
            if retry is None or not isinstance(exc, retry.on) or number == attempts - 1:
                raise
            await asyncio.sleep(retry.backoff * 2**number)
    raise AssertionError("unreachable")


@dataclass
class OptionsToolset(WrapperToolset[Any]):
    """The registry's tools with their ``ToolOptions`` applied to every call (see the module doc).

    ``options`` holds each tool's options by the name the model calls it; ``locks`` gives the lock
    set at call time.
    """

    options: Mapping[str, ToolOptions]
    locks: Callable[[], ToolLocks]

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        options = self.options.get(name)
        if options is None:
            return await super().call_tool(name, tool_args, ctx, tool)

        async def call() -> Any:
            try:
                return await self.wrapped.call_tool(name, tool_args, ctx, _keeping_own_timeouts(tool))
            except _OwnTimeout as own:
                raise own.error from None

        if system_applies(ctx):
            return await run_with_options(ctx, name, options, self.locks(), call)
        approval = options.approval
        if approval is not None and approval.required and not ctx.tool_call_approved:
            raise approval_request(name, approval.metadata(), None)
        call_id = ctx.tool_call_id or ""

        async def body() -> Any:
            result = await run_with_options(ctx, name, options, self.locks(), call)
            if not isinstance(result, ToolResult):
                return result
            return await deliver(
                ctx, name, call_id, result, output_limit=None, attachment_limit=DEFAULT_ATTACHMENT_LIMIT
            )

        return await timed(ctx, name, call_id, body)
