"""Streaming tools: an async generator is a tool whose every ``yield`` reaches the client live.

Register an ``async def`` that ``yield``s (``ToolRegistry.add_tool``, ``@registry.tool``, a tools
directory; or wrap it yourself with ``streaming(func)`` for a plain ``FunctionToolset``). While it
runs, each yielded value goes to the client as a CUSTOM event ``ragstream.tool_stream`` with
``{"toolCallId", "tool", "index", "value"}`` (the value as JSON), between the call's TOOL_CALL_END
and its TOOL_CALL_RESULT; the chat page shows them under the tool call.

The model gets the last yielded value. To end with something else, ``yield ToolResult(...)``: a
yielded ``ToolResult`` is not streamed; it ends the generator and is the call's result (with its
title, metadata and attachments, see ``results``). A generator that yields nothing returns
``None``. The generator is closed (its ``finally`` blocks run) when the call ends for any reason,
including the run's cancellation.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, get_origin, get_type_hints

from ag_ui.core import CustomEvent as AGUICustomEvent
from pydantic_ai import RunContext
from pydantic_core import to_jsonable_python

from ..deps import AGUIEvent
from .results import ToolResult

__all__ = ["STREAM_EVENT", "is_streaming", "streaming"]

STREAM_EVENT = "ragstream.tool_stream"


def is_streaming(func: Any) -> bool:
    """Whether ``func`` is an async generator function (a streaming tool)."""
    return inspect.isasyncgenfunction(func)


async def drain(ctx: RunContext[Any], generator: AsyncGenerator[Any, None]) -> Any:
    """Stream every value of ``generator`` to the client; the last one (or a ``ToolResult``) is the result."""
    last: Any = None
    index = 0
    try:
        async for value in generator:
            if isinstance(value, ToolResult):
                return value
            payload = {
                "toolCallId": ctx.tool_call_id,
                "tool": ctx.tool_name,
                "index": index,
                "value": to_jsonable_python(value, fallback=str),
            }
            await ctx.emit(AGUIEvent(event=AGUICustomEvent(name=STREAM_EVENT, value=payload)))
            last = value
            index += 1
    finally:
        await generator.aclose()
    return last


def _takes_ctx(func: Callable[..., Any]) -> bool:
    """Whether ``func``'s first parameter is the run context (as pydantic-ai decides it for tools)."""
    parameters = list(inspect.signature(func).parameters.values())
    if not parameters:
        return False
    hint = get_type_hints(func).get(parameters[0].name)
    return hint is RunContext or get_origin(hint) is RunContext


def streaming(func: Callable[..., AsyncGenerator[Any, None]]) -> Callable[..., Awaitable[Any]]:
    """The tool function pydantic-ai runs for the async generator ``func``: same name, docstring and
    parameters (plus the run context, which it needs to stream), returning the final value.
    """
    if not is_streaming(func):
        raise TypeError(f"{getattr(func, '__name__', func)!r} is not an async generator function")
    takes_ctx = _takes_ctx(func)

    @functools.wraps(func)
    async def run(ctx: RunContext[Any], *args: Any, **kwargs: Any) -> Any:
        generator = func(ctx, *args, **kwargs) if takes_ctx else func(*args, **kwargs)
        return await drain(ctx, generator)

    if not takes_ctx:
        signature = inspect.signature(func)
        context = inspect.Parameter(
            "ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=RunContext[Any]
        )
        run.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[context, *signature.parameters.values()], return_annotation=Any
        )
        run.__annotations__ = {"ctx": RunContext[Any], **func.__annotations__, "return": Any}
    else:
        run.__annotations__ = {**func.__annotations__, "return": Any}
    return run
