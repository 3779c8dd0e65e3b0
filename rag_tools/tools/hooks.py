"""Pre- and post-hooks around tool execution, run as one pydantic-ai ``wrap_tool_execute`` hook.

Order: global pre-hooks, the tool's pre-hooks, the tool, the tool's post-hooks, global post-hooks.
In ``ToolSystem`` they run once a call is approved (when it needs approval): none sees a call that
still waits for a person.

- A pre-hook gets the arguments and may return new ones (``None`` keeps them).
- A post-hook gets a ``ToolOutcome`` (the result, or the exception) and may return a replacement
  outcome (``None`` keeps it); an exception still standing after the last one is raised.
- Control flow is not an error: ``ModelRetry``, deferral, approval requests, cancellation and
  skips pass through every hook untouched, so retries and approvals work on hooked tools.
- A hook that crashes fails closed: the tool does not run (or its result is withheld) and the
  model is told, through ``ToolFailed``, which hook failed.
- Global hooks may be limited to tools carrying some tag (tool metadata ``tags``).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import ApprovalRequired, CallDeferred, ModelRetry, RunContext, ToolFailed
from pydantic_ai.exceptions import SkipToolExecution, ToolFailedError, ToolRetryError
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tools import ToolDefinition

from .names import model_name

__all__ = ["PASS_THROUGH", "HookContext", "PostHook", "PreHook", "ToolHooks", "ToolOutcome"]

#: Exceptions that steer the run rather than report a failure: hooks never see or alter them.
PASS_THROUGH: tuple[type[BaseException], ...] = (
    ModelRetry,
    ToolRetryError,
    ToolFailed,
    ToolFailedError,
    CallDeferred,
    ApprovalRequired,
    SkipToolExecution,
    asyncio.CancelledError,
)


@dataclass
class HookContext:
    """What a hook knows about the call."""

    run: RunContext[Any]
    tool_name: str
    tool_call_id: str
    tags: frozenset[str]
    args: dict[str, Any]


@dataclass
class ToolOutcome:
    """A tool call's result, or the exception it raised."""

    result: Any = None
    error: BaseException | None = None

    @property
    def is_error(self) -> bool:
        """The call failed: it raised, or returned a ``ToolResult`` with ``is_error``."""
        return self.error is not None or bool(getattr(self.result, "is_error", False))


PreHook = Callable[[HookContext, dict[str, Any]], Awaitable[dict[str, Any] | None] | dict[str, Any] | None]
PostHook = Callable[[HookContext, ToolOutcome], Awaitable[ToolOutcome | None] | ToolOutcome | None]


@dataclass
class _Registered:
    hook: Any
    name: str
    tags: frozenset[str] | None = None

    def applies(self, tags: frozenset[str]) -> bool:
        return self.tags is None or bool(self.tags & tags)


def _hook_name(hook: Any, name: str | None) -> str:
    return name or getattr(hook, "__qualname__", None) or type(hook).__name__


async def _call(hook: Any, *args: Any) -> Any:
    value = hook(*args)
    return await value if inspect.isawaitable(value) else value


def tags_of(tool_def: ToolDefinition) -> frozenset[str]:
    return frozenset((tool_def.metadata or {}).get("tags", ()))


@dataclass
class ToolHooks:
    """Global and per-tool hooks; ``wrap`` is the pydantic-ai hook that runs them."""

    _global_pre: list[_Registered] = field(default_factory=list)
    _global_post: list[_Registered] = field(default_factory=list)
    _tool_pre: dict[str, list[_Registered]] = field(default_factory=dict)
    _tool_post: dict[str, list[_Registered]] = field(default_factory=dict)

    def add_pre(
        self,
        hook: PreHook,
        *,
        tool: str | None = None,
        tags: Iterable[str] | None = None,
        name: str | None = None,
    ) -> None:
        """A pre-hook for one ``tool`` (a subtool by either name), or global (optionally only for
        tools with one of ``tags``)."""
        self._add(self._global_pre, self._tool_pre, hook, tool, tags, name)

    def add_post(
        self,
        hook: PostHook,
        *,
        tool: str | None = None,
        tags: Iterable[str] | None = None,
        name: str | None = None,
    ) -> None:
        """A post-hook for one ``tool`` (a subtool by either name), or global (optionally only for
        tools with one of ``tags``)."""
        self._add(self._global_post, self._tool_post, hook, tool, tags, name)

    @staticmethod
    def _add(
        global_list: list[_Registered],
        per_tool: dict[str, list[_Registered]],
        hook: Any,
        tool: str | None,
        tags: Iterable[str] | None,
        name: str | None,
    ) -> None:
        registered = _Registered(hook, _hook_name(hook, name), frozenset(tags) if tags is not None else None)
        if tool is None:
            global_list.append(registered)
        elif tags is not None:
            raise ValueError("tags filter global hooks; a hook for one tool needs none")
        else:
            per_tool.setdefault(model_name(tool), []).append(registered)

    def __bool__(self) -> bool:
        return bool(self._global_pre or self._global_post or self._tool_pre or self._tool_post)

    async def run(
        self,
        ctx: RunContext[Any],
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: dict[str, Any],
        execute: Callable[[dict[str, Any]], Awaitable[Any]],
    ) -> Any:
        """Run the hooks around ``execute`` in the documented order."""
        tags = tags_of(tool_def)
        context = HookContext(ctx, tool_def.name, call.tool_call_id, tags, dict(args))
        pre = [h for h in self._global_pre if h.applies(tags)] + self._tool_pre.get(tool_def.name, [])
        post = self._tool_post.get(tool_def.name, []) + [h for h in self._global_post if h.applies(tags)]
        for registered in pre:
            try:
                replaced = await _call(registered.hook, context, context.args)
            except PASS_THROUGH:
                raise
            except Exception as exc:
                raise ToolFailed(
                    f"The tool {tool_def.name!r} was not run: its pre-hook {registered.name!r} failed ({type(exc).__name__}: {exc})."
                ) from exc
            if replaced is not None:
                context.args = dict(replaced)
        try:
            outcome = ToolOutcome(result=await execute(context.args))
        except PASS_THROUGH:
            raise
        except Exception as exc:
            outcome = ToolOutcome(error=exc)
        for registered in post:
            try:
                replaced = await _call(registered.hook, context, outcome)
            except PASS_THROUGH:
                raise
            except Exception as exc:
                raise ToolFailed(
                    f"The result of {tool_def.name!r} was withheld: its post-hook {registered.name!r} failed ({type(exc).__name__}: {exc})."
                ) from exc
            if replaced is not None:
                outcome = replaced
        if outcome.error is not None:
            raise outcome.error
        return outcome.result
