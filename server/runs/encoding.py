"""Encoding AG-UI events once, with orjson, and framing them for Server-Sent Events.

The bytes equal ``ag_ui.encoder.EventEncoder``'s JSON (camelCase aliases, unset optional fields
omitted, declaration order). The two event types that make up most of a stream, text and
tool-argument deltas, skip pydantic serialisation: their dicts are built directly in the same key
order, which a test checks byte for byte.
"""

from __future__ import annotations

from typing import Any

import orjson
from ag_ui.core import BaseEvent, EventType, TextMessageContentEvent, ToolCallArgsEvent

__all__ = ["encode_event", "sse_frame"]


def _plain(event: BaseEvent) -> bool:
    return event.raw_event is None and event.metadata is None and event.subagent_run_id is None  # type: ignore[attr-defined]


def encode_event(event: BaseEvent) -> bytes:
    """The event's JSON, as ``EventEncoder`` would write it."""
    kind = type(event)
    if kind is TextMessageContentEvent and _plain(event):
        data: dict[str, Any] = {"type": "TEXT_MESSAGE_CONTENT"}
        if event.timestamp is not None:
            data["timestamp"] = event.timestamp
        data["messageId"] = event.message_id  # type: ignore[attr-defined]
        data["delta"] = event.delta  # type: ignore[attr-defined]
        return orjson.dumps(data)
    if kind is ToolCallArgsEvent and _plain(event):
        data = {"type": "TOOL_CALL_ARGS"}
        if event.timestamp is not None:
            data["timestamp"] = event.timestamp
        data["toolCallId"] = event.tool_call_id  # type: ignore[attr-defined]
        data["delta"] = event.delta  # type: ignore[attr-defined]
        return orjson.dumps(data)
    return orjson.dumps(event.model_dump(mode="json", by_alias=True))


def sse_frame(seq: int, data: bytes) -> bytes:
    """One SSE message with its id; ``\\n`` separators only (``@ag-ui/client`` splits on ``\\n\\n``)."""
    return b"id: %d\ndata: %s\n\n" % (seq, data)


def event_type(data: bytes) -> EventType | None:
    """The type of an encoded event (cheap: the type is the first key)."""
    start = data.find(b'"type":"')
    if start < 0:
        return None
    end = data.find(b'"', start + 8)
    try:
        return EventType(data[start + 8 : end].decode())
    except ValueError:
        return None
