"""``ToolSystem``: registry, hooks, approval policy and truncation, wired into an agent.

Give an agent ``system.toolsets(...)`` and ``system.capability()`` (a run with the toolsets but
without the capability is refused before its first model request when the system has hooks or
approval patterns, which only the capability applies). The toolsets apply each
registered tool's own options wherever they run (``running.OptionsToolset``: its lock, retries,
pydantic-ai's ``timeout`` and ``sequential``). The capability is one pydantic-ai ``Hooks`` for what
needs the whole run: its ``tool_execute`` first enforces the approval policy for every tool the
agent can call (so tool hooks never see a call that still waits for a person, or one then denied),
then runs the hook chain around the call (outside the tool's lock and retries: hooks never wait
for a lock and see one call), delivers ``ToolResult``s (``results``),
cuts results longer than ``output_limit`` for the model and keeps the arguments a person edited on
approving a call (``approval.edited_args``). Every call is timed (``timing.py``): its
start and end reach the client and the thread's history. Streaming tools are turned into plain
ones when registered (``streaming``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel
from pydantic_ai import RunContext
from pydantic_ai.capabilities import Hooks
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from ..state import ToolContext
from .approval import APPROVAL_NAMESPACE, EDITED_ARGS_KEY, ApprovalPolicy, edited_args, ensure_approved
from .hooks import ToolHooks
from .loader import LoadReport, load_tool_dirs
from .locks import ToolLocks
from .outputs import OUTPUTS_NAMESPACE, READER_TOOL, ToolOutputs, output_toolset, truncate
from .registry import ToolRegistry
from .results import ATTACHMENTS_NAMESPACE, DEFAULT_ATTACHMENT_LIMIT, ToolAttachments, ToolResult, deliver
from .running import TOOL_SYSTEM_ID, system_applies
from .timing import timed, with_metadata

__all__ = ["ToolSystem"]


class ToolSystem:
    """Everything around tool calls that pydantic-ai does not already do.

    ``locks`` serialises the calls of ``lock=True`` tools (the registry's ``LocalToolLocks`` unless
    given; the server sets a Redis-backed one when it has Redis); ``attachment_limit`` is the
    largest file, in bytes, a ``ToolResult`` may attach.
    """

    def __init__(
        self,
        registry: ToolRegistry | None = None,
        *,
        hooks: ToolHooks | None = None,
        approve_tools: Sequence[str] = (),
        output_limit: int | None = 20_000,
        locks: ToolLocks | None = None,
        attachment_limit: int = DEFAULT_ATTACHMENT_LIMIT,
    ) -> None:
        self.registry = registry or ToolRegistry()
        self.hooks = hooks or ToolHooks()
        self.approve_tools = list(approve_tools)
        self.output_limit = output_limit
        if locks is not None:
            self.registry.locks = locks
        self.attachment_limit = attachment_limit

    @property
    def locks(self) -> ToolLocks:
        """The locks of ``lock=True`` tools: the registry's (its resolved toolsets take them)."""
        return self.registry.locks

    @locks.setter
    def locks(self, locks: ToolLocks) -> None:
        self.registry.locks = locks

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
        resolved = self.registry.resolve(tools, toolsets, extra=extra)
        needs = [
            what
            for what, given in (("hooks", self.hooks), ("approval patterns", self.approve_tools))
            if given
        ]
        return [*resolved, _NeedsCapability(" and ".join(needs))] if needs else resolved

    def capability(self) -> Hooks[Any]:
        """The pydantic-ai capability enforcing approval and running hooks, retries and truncation."""
        return Hooks(
            tool_execute=self._execute,
            id=TOOL_SYSTEM_ID,
            description="approval policy, tool hooks, tool results and their truncation, call times",
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
        limit = self.output_limit if tool_def.name != READER_TOOL else None

        async def body() -> Any:
            ensure_approved(ctx, tool_def, self.approve_tools)
            result = (
                await self.hooks.run(ctx, call, tool_def, args, handler)
                if self.hooks
                else await handler(args)
            )
            if isinstance(result, ToolResult):  # may raise ToolFailed: ``is_error`` reaches the model
                return await deliver(
                    ctx,
                    tool_def.name,
                    call.tool_call_id,
                    result,
                    output_limit=limit,
                    attachment_limit=self.attachment_limit,
                )
            context = getattr(ctx.deps, "tool_context", None)
            if limit and isinstance(context, ToolContext):
                return truncate(context, tool_def.name, call.tool_call_id, result, limit)
            return result

        result = await timed(ctx, tool_def.name, call.tool_call_id, body)
        edited = edited_args(ctx, call)
        return result if edited is None else with_metadata(result, {EDITED_ARGS_KEY: edited})


class _NeedsCapability(AbstractToolset[Any]):
    """No tools: stops a run that has the system's toolsets but not its capability, before the
    first model request, where the system's hooks or approval patterns would silently not apply."""

    def __init__(self, what: str) -> None:
        self._what = what

    @property
    def id(self) -> str | None:
        return None

    @property
    def label(self) -> str:
        return "tool system check"

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        if not system_applies(ctx):
            raise UserError(
                f"the agent has a ToolSystem's toolsets but not its capability, so the system's {self._what}"
                " would not apply: give the agent system.capability() too"
            )
        return {}

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        raise UserError(f"the tool system check has no tool {name!r}")
