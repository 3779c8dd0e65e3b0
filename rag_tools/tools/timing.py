"""When each tool call started and ended: in its result's metadata (kept in the thread's message
history) and in a ``ragstream.tool_call`` CUSTOM event the client receives before the result.

The tool system's capability times every call it runs (toolkit tools, user tools, toolsets,
factories alike). A call that ends in a retry, an approval request or an error has no return to
carry metadata; the event still reports it, with its outcome.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from ag_ui.core import CustomEvent as AGUICustomEvent
from pydantic_ai import RunContext, ToolReturn

from ..deps import AGUIEvent

__all__ = ["TIMING_KEY", "TOOL_CALL_EVENT", "ToolCallTiming", "timed", "with_metadata", "with_timing"]

TOOL_CALL_EVENT = "ragstream.tool_call"
TIMING_KEY = "ragstream.timing"


@dataclasses.dataclass
class ToolCallTiming:
    """The clock of one tool call."""

    tool: str
    tool_call_id: str
    started_at: datetime = dataclasses.field(default_factory=lambda: datetime.now(UTC))
    ended_at: datetime | None = None
    outcome: str = "success"

    def end(self, outcome: str = "success") -> None:
        self.ended_at = datetime.now(UTC)
        self.outcome = outcome

    def metadata(self) -> dict[str, Any]:
        """``{"started_at", "ended_at", "duration_ms"}`` (ISO 8601 times, UTC)."""
        ended = self.ended_at or datetime.now(UTC)
        return {
            "started_at": self.started_at.isoformat(),
            "ended_at": ended.isoformat(),
            "duration_ms": round((ended - self.started_at).total_seconds() * 1000, 3),
        }

    async def report(self, ctx: RunContext[Any]) -> None:
        """Tell the client (a ``ragstream.tool_call`` CUSTOM event)."""
        meta = self.metadata()
        value = {
            "toolCallId": self.tool_call_id,
            "tool": self.tool,
            "startedAt": meta["started_at"],
            "endedAt": meta["ended_at"],
            "durationMs": meta["duration_ms"],
            "outcome": self.outcome,
        }
        await ctx.emit(AGUIEvent(event=AGUICustomEvent(name=TOOL_CALL_EVENT, value=value)))


def with_timing(result: Any, timing: ToolCallTiming) -> Any:
    """``result`` with the call's times under ``TIMING_KEY`` in its ``ToolReturn`` metadata."""
    return with_metadata(result, {TIMING_KEY: timing.metadata()})


def with_metadata(result: Any, stamp: dict[str, Any]) -> Any:
    """``result`` with ``stamp`` in its ``ToolReturn`` metadata (kept in the thread's history).

    Metadata a tool set itself is kept: a dict gains the keys, a list (of AG-UI events, say) gains
    an item; any other metadata is left as it is.
    """
    if not isinstance(result, ToolReturn):
        return ToolReturn(return_value=result, metadata=stamp)
    metadata = result.metadata
    if metadata is None:
        return dataclasses.replace(result, metadata=stamp)
    if isinstance(metadata, dict):
        return dataclasses.replace(result, metadata={**metadata, **stamp})
    if isinstance(metadata, list):
        return dataclasses.replace(result, metadata=[*metadata, stamp])
    return result


async def timed(
    ctx: RunContext[Any], tool: str, tool_call_id: str, body: Callable[[], Awaitable[Any]]
) -> Any:
    """``body()``'s result with the call's times, which the client gets however the call ends."""
    timing = ToolCallTiming(tool, tool_call_id)
    try:
        result = await body()
    except asyncio.CancelledError:
        raise
    except BaseException as exc:  # a retry, an approval request, an error: reported, then on its way
        timing.end(type(exc).__name__)
        await timing.report(ctx)
        raise
    timing.end()
    await timing.report(ctx)
    return with_timing(result, timing)
