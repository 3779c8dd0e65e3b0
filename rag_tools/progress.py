"""Progress reports from tools while they run, as AG-UI CUSTOM events named ``ragstream.progress``.

A tool calls ``await report_progress(ctx, "Searching 12 documents", done=0, total=2)``; the client
receives ``{"type": "CUSTOM", "name": "ragstream.progress", "value": {"toolCallId": ..., "tool": ..., ...}}``
between the tool call's TOOL_CALL_END and its TOOL_CALL_RESULT. Outside an AG-UI run the event
goes to the run's event stream and is otherwise ignored.
"""

from __future__ import annotations

from typing import Any

from ag_ui.core import CustomEvent as AGUICustomEvent
from pydantic_ai import RunContext

from .deps import AGUIEvent

__all__ = ["PROGRESS_EVENT", "report_progress"]

PROGRESS_EVENT = "ragstream.progress"


async def report_progress(
    ctx: RunContext[Any],
    message: str,
    *,
    done: int | None = None,
    total: int | None = None,
    data: dict[str, Any] | None = None,
) -> None:
    """Tell the client what the current tool is doing (``done``/``total`` for a progress bar)."""
    value: dict[str, Any] = {"toolCallId": ctx.tool_call_id, "tool": ctx.tool_name, "message": message}
    if done is not None:
        value["done"] = done
    if total is not None:
        value["total"] = total
    if data:
        value["data"] = data
    await ctx.emit(AGUIEvent(event=AGUICustomEvent(name=PROGRESS_EVENT, value=value)))
