"""Encoding AG-UI events once, with orjson.

The bytes equal ``ag_ui.encoder.EventEncoder``'s JSON (camelCase aliases, unset optional fields
omitted, declaration order). The two event types that make up most of a stream, text and
tool-argument deltas, skip pydantic serialisation: their dicts are built directly in the same key
order, which a test checks byte for byte.
"""

from __future__ import annotations

from typing import Any

import orjson
from ag_ui.core import BaseEvent, RunErrorEvent, TextMessageContentEvent, ToolCallArgsEvent

from ..runs import RunFailure

__all__ = ["RETRY_AFTER_KEY", "encode_event", "encode_failure", "run_error_event"]

#: Where RUN_ERROR carries the seconds after which to try again (a provider's ``Retry-After``).
RETRY_AFTER_KEY = "ragstream.retryAfter"


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


def encode_failure(failure: RunFailure) -> bytes:
    """The RUN_ERROR event of a failed run (the engine's ``encode_failure``)."""
    return encode_event(run_error_event(failure))


def run_error_event(failure: RunFailure, base: RunErrorEvent | None = None) -> RunErrorEvent:
    """``failure`` as RUN_ERROR (``base``'s other fields kept): its code and message, and when to
    retry in ``metadata["ragstream.retryAfter"]`` when known."""
    event = base or RunErrorEvent(message=failure.message)
    update: dict[str, Any] = {"message": failure.message, "code": failure.code.value}
    if failure.retry_after is not None:
        update["metadata"] = {**(event.metadata or {}), RETRY_AFTER_KEY: failure.retry_after}
    return event.model_copy(update=update)
