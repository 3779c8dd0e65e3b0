"""A bounded context: what the model is sent of a long thread's earlier turns.

Every earlier turn's search results (five passages of several thousand characters) used to be sent
again with every later question, so a request grew by each turn's passages. ``ContextBudget``, a
capability on the chat agent, shapes the request a provider's model is sent (the thread itself keeps
everything; only what goes on the wire changes):

1. Earlier turns keep their questions, tool calls and answers. Their tool results are replaced by
   a short reference: a search keeps the passages the turn's answer cited, one line each
   (``[n] title (location): `` and the start of its text, ``CITED_CHARS``), the number of the
   others, and a note that they may be searched for again; their thinking is left out; a result of another tool keeps its start
   (``OLD_RESULT_CHARS``) and says to call the tool again for the rest. A truncated result's
   reference (``read_tool_output``) stays in what is kept, so it can still be expanded. The current
   turn (from the latest user message) is sent whole: the model answers from it.
2. The earlier turns, so shortened, are kept newest first while they fit ``history_tokens``
   (``RAGSTREAM_HISTORY_TOKENS``); older ones are left out.
3. The whole request stays under the model's context (``context_tokens``, else the window
   pydantic-ai's profile knows for the model, else ``DEFAULT_CONTEXT_TOKENS``) less the answer's
   ``max_tokens``: earlier turns go first; the current turn is bounded by each tool's output limit.

Tokens are estimated as ``ceil(characters / 4)`` of each part's text (``estimate_tokens``), plus
``PART_OVERHEAD`` per part for what frames it on the wire: the
providers' tokenizers are not available offline (tiktoken downloads its tables; Anthropic's and
Google's count with an API call per request), and the rule is within about 15% for English prose
and JSON on the GPT and Claude tokenizers. The instructions and tool schemas are the same on every
request and are not part of either budget.

The offline extractive model is left alone: it costs no tokens, and its follow-up rule reads what
the previous turn retrieved (``rag_tools.follow_ups``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestContext

from .models import is_provider_model

__all__ = [
    "CITED_CHARS",
    "DEFAULT_CONTEXT_TOKENS",
    "OLD_RESULT_CHARS",
    "ContextBudget",
    "estimate_tokens",
    "shape_history",
]

#: Characters kept of a passage an earlier answer cited.
CITED_CHARS = 200
#: Characters kept of an earlier result of a tool other than search.
OLD_RESULT_CHARS = 400
#: The context assumed for a model whose window pydantic-ai does not know.
DEFAULT_CONTEXT_TOKENS = 128_000

_CITATION = re.compile(r"\[(\d+)\]")


def estimate_tokens(text: str) -> int:
    """Tokens of ``text`` by the documented rule of thumb: ``ceil(characters / 4)``."""
    return (len(text) + 3) // 4


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if hasattr(content, "model_dump_json"):
        return content.model_dump_json()
    try:
        return json.dumps(content, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(content)


def _as_dict(content: Any) -> dict[str, Any] | None:
    if hasattr(content, "model_dump"):
        content = content.model_dump()
    elif isinstance(content, str) and content.startswith("{"):
        try:
            content = json.loads(content)
        except ValueError:
            return None
    return content if isinstance(content, dict) else None


#: Tokens a message part costs beyond its text on the wire (role, ids, JSON framing), estimated.
PART_OVERHEAD = 10


def _message_tokens(message: ModelMessage) -> int:
    total = PART_OVERHEAD * len(message.parts)
    for part in message.parts:
        if isinstance(part, ToolCallPart):
            total += estimate_tokens(part.tool_name + part.args_as_json_str())
        elif isinstance(part, UserPromptPart | ToolReturnPart | TextPart):
            total += estimate_tokens(_text(part.content))
        else:
            total += estimate_tokens(_text(getattr(part, "content", "")))
    return total


def _turns(messages: Sequence[ModelMessage]) -> list[list[ModelMessage]]:
    """The messages cut where each user message starts a turn (what comes before the first: a turn too)."""
    turns: list[list[ModelMessage]] = [[]]
    for message in messages:
        starts = isinstance(message, ModelRequest) and any(
            isinstance(p, UserPromptPart) for p in message.parts
        )
        if starts and turns[-1]:
            turns.append([])
        turns[-1].append(message)
    return [t for t in turns if t]


def _cited(turn: Sequence[ModelMessage]) -> set[int]:
    found: set[int] = set()
    for message in turn:
        if isinstance(message, ModelResponse):
            for part in message.parts:
                if isinstance(part, TextPart):
                    found |= {int(n) for n in _CITATION.findall(part.content)}
    return found


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _reference(part: ToolReturnPart, cited: set[int]) -> ToolReturnPart:
    """``part`` as an earlier turn keeps it: passage references, the cited ones with their start."""
    content = _as_dict(part.content)
    results = content.get("results") if content is not None else None
    if isinstance(results, list) and all(isinstance(r, dict) for r in results):
        lines = []
        for result in results:
            number = result.get("citation")
            if number not in cited:
                continue
            where = result.get("location") or result.get("uri") or ""
            line = f"[{number}] {result.get('title', '')}" + (f" ({where})" if where else "")
            lines.append(f"{line}: {_shorten(str(result.get('text', '')), CITED_CHARS)}")
        query = content.get("query") if content is not None else None
        head = (
            f"Earlier {part.tool_name}" + (f" for {query!r}" if query else "") + f": {len(results)} passages"
        )
        head += ", the cited ones shortened below" if lines else ", none cited"
        tail = "(Not kept in this conversation; call search again to read a passage in full.)"
        return replace(part, content="\n".join([head + ":", *lines, tail]))
    text = _text(part.content)
    if len(text) <= OLD_RESULT_CHARS:
        return part
    kept = text[:OLD_RESULT_CHARS].rstrip()
    return replace(
        part,
        content=f"{kept}…\n(An earlier result, shortened here; call {part.tool_name} again for all of it.)",
    )


def _compacted(turn: list[ModelMessage]) -> list[ModelMessage]:
    cited = _cited(turn)
    out: list[ModelMessage] = []
    for message in turn:
        if isinstance(message, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in message.parts):
            parts = [_reference(p, cited) if isinstance(p, ToolReturnPart) else p for p in message.parts]
            message = replace(message, parts=parts)
        elif isinstance(message, ModelResponse) and any(isinstance(p, ThinkingPart) for p in message.parts):
            said = [p for p in message.parts if not isinstance(p, ThinkingPart)]
            if said:  # an earlier turn's thinking is not sent again (the thread keeps it)
                message = replace(message, parts=said)
        out.append(message)
    return out


def shape_history(
    messages: Sequence[ModelMessage], *, history_tokens: int | None, limit_tokens: int | None = None
) -> list[ModelMessage]:
    """The messages to send: earlier turns shortened and kept, newest first, within
    ``history_tokens``, the whole within ``limit_tokens``; the current turn as it is.

    ``history_tokens=None`` sends every earlier turn whole (still within ``limit_tokens``).
    """
    turns = _turns(messages)
    if len(turns) <= 1:
        return list(messages)
    current, earlier = turns[-1], turns[:-1]
    if history_tokens is not None:
        earlier = [_compacted(t) for t in earlier]
    room = limit_tokens - sum(_message_tokens(m) for m in current) if limit_tokens is not None else None
    budgets = [b for b in (history_tokens, room) if b is not None]
    budget = min(budgets) if budgets else None
    kept: list[list[ModelMessage]] = []
    used = 0
    for turn in reversed(earlier):
        size = sum(_message_tokens(m) for m in turn)
        if budget is not None and used + size > budget:
            break
        kept.insert(0, turn)
        used += size
    return [m for t in kept for m in t] + current


@dataclass
class ContextBudget(AbstractCapability[Any]):
    """Shapes each request to a provider's model with ``shape_history`` (the thread keeps it all)."""

    history_tokens: int | None = 2000
    context_tokens: int | None = None
    max_tokens: int | None = 4096

    @classmethod
    def from_config(cls, config: Any) -> ContextBudget:
        return cls(
            history_tokens=config.history_tokens,
            context_tokens=config.context_tokens,
            max_tokens=config.model_max_tokens,
        )

    def _limit(self, model: Any) -> int:
        window = self.context_tokens or model.profile.get("context_window") or DEFAULT_CONTEXT_TOKENS
        return max(1, window - (self.max_tokens or 0))

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        model = request_context.model
        if not is_provider_model(model):
            return request_context
        shaped = shape_history(
            request_context.messages, history_tokens=self.history_tokens, limit_tokens=self._limit(model)
        )
        if len(shaped) != len(request_context.messages) or shaped != request_context.messages:
            request_context.messages = shaped
        return request_context
