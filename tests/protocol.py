"""Checks every AG-UI event stream in the tests must pass, SSE parsing for raw HTTP tests, the
prompt reader of the tests' scripted models, and the keys of the default chat state."""

from __future__ import annotations

import json
from typing import Any

import jsonpatch
from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart

TERMINAL = ("RUN_FINISHED", "RUN_ERROR")

CLIENT_OWNED = frozenset({"document_filter"})
SERVER_OWNED = frozenset(
    {
        "citations",
        "searches",
        "qa_history",
        "session_context",
        "archived",
        "need_user_approve_tools",
        "truncated_outputs",
        "tool_attachments",
    }
)
CHAT_STATE_KEYS = CLIENT_OWNED | SERVER_OWNED
"""Every key of the default chat server's state as a client sees it, and nothing else."""


def parse_sse(body: str) -> list[tuple[int | None, dict[str, Any]]]:
    """(id, event) pairs of an SSE body; keep-alive comments are skipped."""
    frames = []
    for block in body.split("\n\n"):
        event_id, data = None, []
        for line in block.split("\n"):
            if line.startswith("id:"):
                event_id = int(line[3:].strip())
            elif line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
        if data:
            frames.append((event_id, json.loads("\n".join(data))))
    return frames


def check_stream(events: list[dict[str, Any]], client_state: Any) -> Any:
    """Assert the stream's shape; apply its state events to ``client_state`` and return the result.

    First event RUN_STARTED, exactly one terminal event and nothing after it; the run carries its
    own baseline (its first state event is a STATE_SNAPSHOT, so folding the run from ``{}``, as
    CopilotKit's runtime does, reaches the same state); every STATE_DELTA applies, with
    ``jsonpatch`` as the independent oracle, to the state before it.
    """
    types = [e["type"] for e in events]
    assert types, "empty stream"
    assert types[0] == "RUN_STARTED", types[:3]
    terminals = [i for i, t in enumerate(types) if t in TERMINAL]
    assert len(terminals) == 1, f"expected one terminal event, got {[types[i] for i in terminals]}"
    assert terminals[0] == len(types) - 1, f"events after the terminal one: {types[terminals[0] :]}"
    state_events = [e["type"] for e in events if e["type"] in ("STATE_SNAPSHOT", "STATE_DELTA")]
    assert not state_events or state_events[0] == "STATE_SNAPSHOT", (
        f"a delta before the run's baseline: {types}"
    )
    state = client_state
    for event in events:
        if event["type"] == "STATE_SNAPSHOT":
            state = event["snapshot"]
        elif event["type"] == "STATE_DELTA":
            state = jsonpatch.apply_patch(state, event["delta"])  # raises if it does not apply
    return state


def last_user_text(messages: list[ModelMessage]) -> str:
    """The latest user prompt of a conversation (what a scripted ``FunctionModel`` answers)."""
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    return part.content
    return ""


def run_body(
    thread: str, run: str, text: str | None = "nightly backups", state: Any = None, **extra: Any
) -> dict[str, Any]:
    """A RunAgentInput body with one user message (none for ``text=None``: a restating run)."""
    messages = [{"id": f"u-{run}", "role": "user", "content": text}] if text is not None else []
    return {
        "threadId": thread,
        "runId": run,
        "messages": messages,
        "state": {} if state is None else state,
        "tools": [],
        "context": [],
        "forwardedProps": {},
        "protocolVersion": "1.0",
        **extra,
    }


def fold_messages(messages: list[dict[str, Any]], events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The message list a client holds after a run's events, folded the way ``@ag-ui/client`` does."""
    out = [dict(m) for m in messages]
    by_id = {m["id"]: m for m in out}

    def assistant(message_id: str) -> dict[str, Any]:
        if message_id not in by_id:
            by_id[message_id] = {"id": message_id, "role": "assistant", "content": ""}
            out.append(by_id[message_id])
        return by_id[message_id]

    calls: dict[str, dict[str, Any]] = {}
    for event in events:
        kind = event["type"]
        if kind == "TEXT_MESSAGE_START":
            assistant(event["messageId"])
        elif kind == "TEXT_MESSAGE_CONTENT":
            message = assistant(event["messageId"])
            message["content"] = (message.get("content") or "") + event["delta"]
        elif kind == "TOOL_CALL_START":
            call = {
                "id": event["toolCallId"],
                "type": "function",
                "function": {"name": event["toolCallName"], "arguments": ""},
            }
            assistant(event["parentMessageId"]).setdefault("toolCalls", []).append(call)
            calls[event["toolCallId"]] = call
        elif kind == "TOOL_CALL_ARGS":
            calls[event["toolCallId"]]["function"]["arguments"] += event["delta"]
        elif kind == "TOOL_CALL_RESULT":
            message = {
                "id": event["messageId"],
                "role": "tool",
                "toolCallId": event["toolCallId"],
                "content": event["content"],
            }
            by_id[message["id"]] = message
            out.append(message)
        elif kind == "MESSAGES_SNAPSHOT":
            out = [dict(m) for m in event["messages"]]
            by_id = {m["id"]: m for m in out}
    return out
