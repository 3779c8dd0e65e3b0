"""A minimal OpenAI-compatible chat completions server that streams tool-call and text deltas."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def create_fake_openai(query: str, answer: str) -> tuple[Starlette, list[dict[str, Any]]]:
    """The app and the list of request bodies it received.

    First turn: a ``search`` tool call whose arguments arrive in three fragments. Once the
    conversation holds a tool result: ``answer`` streamed word by word.
    """
    requests: list[dict[str, Any]] = []

    async def completions(request: Request) -> Any:
        body = await request.json()
        requests.append(body)
        has_tool_result = any(m.get("role") == "tool" for m in body.get("messages", []))
        if not body.get("stream"):
            return JSONResponse({"error": {"message": "this fake only streams"}}, status_code=400)

        async def stream() -> AsyncIterator[bytes]:
            if not has_tool_result:
                args = json.dumps({"query": query})
                third = len(args) // 3
                yield _chunk(
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_fake_1",
                                "type": "function",
                                "function": {"name": "search", "arguments": ""},
                            }
                        ],
                    }
                )
                for piece in (args[:third], args[third : 2 * third], args[2 * third :]):
                    yield _chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
                yield _chunk({}, "tool_calls")
            else:
                yield _chunk({"role": "assistant", "content": ""})
                for word in answer.split(" "):
                    yield _chunk({"content": word + " "})
                yield _chunk({}, "stop")
            yield b"data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])]), requests
