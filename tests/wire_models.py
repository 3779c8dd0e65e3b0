"""Loopback model servers speaking the real wire formats, answered by a scripted model.

One Starlette app serves OpenAI Chat Completions (``POST /v1/chat/completions``), OpenAI Responses
(``POST /v1/responses``) and Anthropic Messages (``POST /v1/messages``), or only the ones asked for
(a Chat Completions-only server, as Ollama, vLLM, llama.cpp and LM Studio are, answers 404 on
``/v1/responses``). Each request is read into a ``WireRequest`` (the API, its body, the user's
texts, the tool results and the tool names offered, whatever the format), the script answers it
with a ``Reply`` (text, tool calls, thinking, a fault), and the reply is streamed back as the API
streams it: one block helper per format (``_chat_blocks``, ``_responses_blocks``,
``_anthropic_blocks``). The SDKs and the HTTP on both sides are real; only the model is scripted.

Faults: ``Fault`` answers an HTTP error (status, body, headers such as ``Retry-After``) before any
stream; ``CUT`` ends the stream where it stands, without the format's completion marker (Chat
Completions' ``finish_reason`` and ``[DONE]``, Responses' ``response.completed``, Anthropic's
``message_delta`` and ``message_stop``); ``HANG`` stops sending and keeps the connection open.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

__all__ = [
    "CUT",
    "HANG",
    "Call",
    "Fault",
    "Reply",
    "Text",
    "Thinking",
    "WireModel",
    "WireRequest",
    "estimate_tokens",
]

Api = Literal["chat", "responses", "anthropic"]
PATHS: dict[Api, str] = {
    "chat": "/v1/chat/completions",
    "responses": "/v1/responses",
    "anthropic": "/v1/messages",
}


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Thinking:
    text: str


@dataclass(frozen=True)
class Call:
    name: str
    args: dict[str, Any]
    id: str = ""


@dataclass(frozen=True)
class Fault:
    """An HTTP error answer instead of a stream."""

    status: int
    message: str = "scripted fault"
    headers: dict[str, str] = field(default_factory=dict)
    code: str | None = None


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


CUT = _Marker("CUT")
HANG = _Marker("HANG")

Block = Text | Thinking | Call | _Marker
Reply = Sequence[Block] | Fault


def estimate_tokens(text: str) -> int:
    """A request's size in tokens as ``ceil(characters / 4)``, the rule of thumb ragstream documents."""
    return (len(text) + 3) // 4


@dataclass
class WireRequest:
    """One request as the server received it, read the same way whatever its format."""

    api: Api
    body: dict[str, Any]
    headers: dict[str, str]

    @property
    def user_texts(self) -> list[str]:
        """The user's texts, in order (tool results excluded)."""
        found: list[str] = []
        for message in self._messages():
            if message.get("role") != "user":
                continue
            content = message.get("content")
            if isinstance(content, str):
                found.append(content)
                continue
            texts = [
                c.get("text", "")
                for c in content or []
                if isinstance(c, dict) and c.get("type") in ("text", "input_text")
            ]
            if texts:
                found.append("".join(texts))
        return found

    @property
    def tool_results(self) -> list[str]:
        """The tool results the conversation holds, as text, in order."""
        found: list[str] = []
        for message in self._messages():
            if message.get("role") == "tool":  # Chat Completions
                found.append(_as_text(message.get("content")))
            elif message.get("type") == "function_call_output":  # Responses
                found.append(_as_text(message.get("output")))
            elif isinstance(message.get("content"), list):  # Anthropic
                found += [
                    _as_text(c.get("content")) for c in message["content"] if c.get("type") == "tool_result"
                ]
        return found

    @property
    def ends_with_tool_result(self) -> bool:
        """Whether the last thing in the conversation is a tool result (the model answers it)."""
        messages = self._messages()
        if not messages:
            return False
        last = messages[-1]
        if last.get("role") == "tool" or last.get("type") == "function_call_output":
            return True
        content = last.get("content")
        return isinstance(content, list) and any(c.get("type") == "tool_result" for c in content)

    @property
    def system(self) -> str:
        """The instructions (system prompt) the request carries."""
        if self.api == "responses":
            return str(self.body.get("instructions") or "")
        if self.api == "anthropic":
            system = self.body.get("system")
            return system if isinstance(system, str) else _as_text(system or [])
        return "\n".join(
            _as_text(m.get("content")) for m in self._messages() if m.get("role") in ("system", "developer")
        )

    @property
    def tool_names(self) -> list[str]:
        return [t.get("function", t).get("name", "") for t in self.body.get("tools") or []]

    @property
    def size(self) -> int:
        """The request's input in estimated tokens: its instructions, messages and tool schemas."""
        keys = ("messages", "input", "instructions", "system", "tools")
        return estimate_tokens(json.dumps([self.body.get(k) for k in keys], ensure_ascii=False))

    def _messages(self) -> list[dict[str, Any]]:
        items = self.body.get("messages") if self.api != "responses" else self.body.get("input")
        if isinstance(items, str):
            return [{"role": "user", "content": items}]
        return [m for m in items or [] if isinstance(m, dict)]


def _as_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(c.get("text", "") if isinstance(c, dict) else str(c) for c in content)
    return json.dumps(content)


Script = Callable[[WireRequest], Reply]


@dataclass
class WireModel:
    """The loopback server's app, what it was asked (``requests``) and how it answers (``script``)."""

    script: Script
    apis: tuple[Api, ...] = ("chat", "responses", "anthropic")
    requests: list[WireRequest] = field(default_factory=list)
    usage_output: int = 7

    @property
    def app(self) -> Starlette:
        routes = [Route(PATHS[api], self._endpoint(api), methods=["POST"]) for api in self.apis]
        return Starlette(routes=routes)

    def _endpoint(self, api: Api) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            body = await request.json()
            wire = WireRequest(api, body, dict(request.headers))
            self.requests.append(wire)
            reply = self.script(wire)
            if isinstance(reply, Fault):
                return _fault(api, reply)
            usage = (wire.size, self.usage_output)
            if not body.get("stream"):  # the whole reply at once: what its stream would have added up to
                return JSONResponse(
                    _whole(api, [b for b in reply if not isinstance(b, _Marker)], body, usage)
                )
            frames = {"chat": _chat_blocks, "responses": _responses_blocks, "anthropic": _anthropic_blocks}[
                api
            ]
            return StreamingResponse(_paced(frames(list(reply), body, usage)), media_type="text/event-stream")

        return endpoint


async def _paced(frames: Iterator[bytes | _Marker]) -> AsyncIterator[bytes]:
    for frame in frames:
        if frame is HANG:
            await asyncio.sleep(3600)
        if frame is CUT:
            return
        assert isinstance(frame, bytes)
        yield frame
        await asyncio.sleep(0)


def _fault(api: Api, fault: Fault) -> Response:
    if api == "anthropic":
        kinds = {
            401: "authentication_error",
            403: "permission_error",
            404: "not_found_error",
            429: "rate_limit_error",
        }
        body: dict[str, Any] = {
            "type": "error",
            "error": {"type": kinds.get(fault.status, "api_error"), "message": fault.message},
        }
    else:
        body = {"error": {"message": fault.message, "type": "error", "code": fault.code}}
    return JSONResponse(body, status_code=fault.status, headers=fault.headers)


def _whole(api: Api, blocks: list[Block], body: dict[str, Any], usage: tuple[int, int]) -> dict[str, Any]:
    """A non-streamed answer in ``api``'s format."""
    text = "".join(b.text for b in blocks if isinstance(b, Text))
    calls = [(i, b) for i, b in enumerate(blocks) if isinstance(b, Call)]
    model = body.get("model", "wire")
    if api == "chat":
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            message["tool_calls"] = [
                {
                    "id": b.id or f"call_{i}",
                    "type": "function",
                    "function": {"name": b.name, "arguments": json.dumps(b.args)},
                }
                for i, b in calls
            ]
        return {
            "id": "chatcmpl-wire",
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
        }
    if api == "responses":
        output: list[dict[str, Any]] = []
        if text:
            part = {"type": "output_text", "text": text, "annotations": []}
            output.append(
                {
                    "type": "message",
                    "id": "item_t",
                    "role": "assistant",
                    "status": "completed",
                    "content": [part],
                }
            )
        for i, b in calls:
            output.append(
                {
                    "type": "function_call",
                    "id": f"item_{i}",
                    "call_id": b.id or f"call_{i}",
                    "name": b.name,
                    "arguments": json.dumps(b.args),
                    "status": "completed",
                }
            )
        return {
            "id": "resp_wire",
            "object": "response",
            "created_at": 0,
            "model": model,
            "status": "completed",
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": usage[0],
                "output_tokens": usage[1],
                "total_tokens": sum(usage),
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            },
        }
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [
        {"type": "tool_use", "id": b.id or f"toolu_{i}", "name": b.name, "input": b.args} for i, b in calls
    ]
    return {
        "id": "msg_wire",
        "type": "message",
        "role": "assistant",
        "content": content,
        "model": model,
        "stop_reason": "tool_use" if calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }


def _sse(data: dict[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


# -- Chat Completions ------------------------------------------------------------------------


def _chat_blocks(
    blocks: list[Block], body: dict[str, Any], usage: tuple[int, int]
) -> Iterator[bytes | _Marker]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _sse(
            {
                "id": "chatcmpl-wire",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": body.get("model", "wire"),
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
        )

    yield chunk({"role": "assistant", "content": ""})
    calls = 0
    for block in blocks:
        if isinstance(block, _Marker):
            yield block
        elif isinstance(block, Text):
            for piece in _pieces(block.text):
                yield chunk({"content": piece})
        elif isinstance(block, Thinking):
            for piece in _pieces(block.text):
                yield chunk({"reasoning_content": piece})
        else:
            args = json.dumps(block.args)
            head = {"index": calls, "id": block.id or f"call_{calls}", "type": "function"}
            yield chunk({"tool_calls": [{**head, "function": {"name": block.name, "arguments": ""}}]})
            for piece in _pieces(args, 3):
                yield chunk({"tool_calls": [{"index": calls, "function": {"arguments": piece}}]})
            calls += 1
    yield chunk({}, "tool_calls" if calls else "stop")
    yield _sse(
        {
            "id": "chatcmpl-wire",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": body.get("model", "wire"),
            "choices": [],
            "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
        }
    )
    yield b"data: [DONE]\n\n"


# -- Responses -------------------------------------------------------------------------------


def _responses_blocks(
    blocks: list[Block], body: dict[str, Any], usage: tuple[int, int]
) -> Iterator[bytes | _Marker]:
    sequence = iter(range(1_000_000))

    def event(kind: str, **data: Any) -> bytes:
        return _sse({"type": kind, "sequence_number": next(sequence), **data}, kind)

    def response(status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": "resp_wire",
            "object": "response",
            "created_at": 0,
            "model": body.get("model", "wire"),
            "status": status,
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": usage[0],
                "output_tokens": usage[1],
                "total_tokens": sum(usage),
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            },
        }

    yield event("response.created", response=response("in_progress", []))
    output: list[dict[str, Any]] = []
    for index, block in enumerate(blocks):
        if isinstance(block, _Marker):
            yield block
            continue
        item_id = f"item_{index}"
        if isinstance(block, Text):
            item: dict[str, Any] = {
                "type": "message",
                "id": item_id,
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            }
            yield event("response.output_item.added", output_index=index, item=item)
            part = {"type": "output_text", "text": "", "annotations": []}
            yield event(
                "response.content_part.added", item_id=item_id, output_index=index, content_index=0, part=part
            )
            for piece in _pieces(block.text):
                yield event(
                    "response.output_text.delta",
                    item_id=item_id,
                    output_index=index,
                    content_index=0,
                    delta=piece,
                    logprobs=[],
                )
            done_part = {**part, "text": block.text}
            yield event(
                "response.output_text.done",
                item_id=item_id,
                output_index=index,
                content_index=0,
                text=block.text,
                logprobs=[],
            )
            yield event(
                "response.content_part.done",
                item_id=item_id,
                output_index=index,
                content_index=0,
                part=done_part,
            )
            item = {**item, "status": "completed", "content": [done_part]}
        elif isinstance(block, Thinking):
            item = {"type": "reasoning", "id": item_id, "summary": []}
            yield event("response.output_item.added", output_index=index, item=item)
            summary = {"type": "summary_text", "text": ""}
            yield event(
                "response.reasoning_summary_part.added",
                item_id=item_id,
                output_index=index,
                summary_index=0,
                part=summary,
            )
            for piece in _pieces(block.text):
                yield event(
                    "response.reasoning_summary_text.delta",
                    item_id=item_id,
                    output_index=index,
                    summary_index=0,
                    delta=piece,
                )
            yield event(
                "response.reasoning_summary_text.done",
                item_id=item_id,
                output_index=index,
                summary_index=0,
                text=block.text,
            )
            done_summary = {**summary, "text": block.text}
            yield event(
                "response.reasoning_summary_part.done",
                item_id=item_id,
                output_index=index,
                summary_index=0,
                part=done_summary,
            )
            item = {**item, "summary": [done_summary]}
        else:
            args = json.dumps(block.args)
            call_id = block.id or f"call_{index}"
            item = {
                "type": "function_call",
                "id": item_id,
                "call_id": call_id,
                "name": block.name,
                "arguments": "",
                "status": "in_progress",
            }
            yield event("response.output_item.added", output_index=index, item=item)
            for piece in _pieces(args, 3):
                yield event(
                    "response.function_call_arguments.delta", item_id=item_id, output_index=index, delta=piece
                )
            yield event(
                "response.function_call_arguments.done", item_id=item_id, output_index=index, arguments=args
            )
            item = {**item, "arguments": args, "status": "completed"}
        yield event("response.output_item.done", output_index=index, item=item)
        output.append(item)
    yield event("response.completed", response=response("completed", output))


# -- Anthropic Messages ----------------------------------------------------------------------


def _anthropic_blocks(
    blocks: list[Block], body: dict[str, Any], usage: tuple[int, int]
) -> Iterator[bytes | _Marker]:
    message = {
        "id": "msg_wire",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": body.get("model", "wire"),
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": 1},
    }
    yield _sse({"type": "message_start", "message": message}, "message_start")
    calls = 0
    for index, block in enumerate(blocks):
        if isinstance(block, _Marker):
            yield block
            continue
        if isinstance(block, Text):
            start: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in _pieces(block.text)]
        elif isinstance(block, Thinking):
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": p} for p in _pieces(block.text)]
            deltas.append({"type": "signature_delta", "signature": "c2lnbmVk"})
        else:
            start = {"type": "tool_use", "id": block.id or f"toolu_{index}", "name": block.name, "input": {}}
            deltas = [
                {"type": "input_json_delta", "partial_json": p} for p in _pieces(json.dumps(block.args), 3)
            ]
            calls += 1
        yield _sse(
            {"type": "content_block_start", "index": index, "content_block": start}, "content_block_start"
        )
        for delta in deltas:
            yield _sse({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta")
        yield _sse({"type": "content_block_stop", "index": index}, "content_block_stop")
    stop = "tool_use" if calls else "end_turn"
    yield _sse(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": usage[1]},
        },
        "message_delta",
    )
    yield _sse({"type": "message_stop"}, "message_stop")


def _pieces(text: str, count: int | None = None) -> list[str]:
    """``text`` in the pieces a stream sends it in: word by word, or in ``count`` even parts."""
    if count is not None:
        size = max(1, -(-len(text) // count))
        return [text[i : i + size] for i in range(0, len(text), size)] or [""]
    words = text.split(" ")
    return [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]
