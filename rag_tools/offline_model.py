"""The offline extractive model: answers without any language model or API key.

A pydantic-ai ``FunctionModel`` that behaves like a disciplined RAG assistant:

1. on a new user message it calls the search tool (or ``ask`` when only QA is available), turning
   a short follow-up ("and on Sundays?") into a full query with the previous question;
2. on the search results it streams an answer, word by word, made of the sentences of the
   retrieved passages that best answer the question (``rag_tools.extractive``), each followed by
   its ``[n]`` citation; when nothing relevant was found it says so, naming the document filter.

The document filter needs no handling here: the tools apply the session's filter themselves.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Sequence
from typing import Any

from pydantic_ai.embeddings import EmbeddingModel
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from .extractive import Passage, extractive_answer

__all__ = ["MODEL_NAME", "create_extractive_model", "is_extractive_model"]

MODEL_NAME = "extractive"
_FOLLOW_UP_START = re.compile(r"^(and|also|what about|how about|and what|what of|same for)\b", re.IGNORECASE)
_PRONOUNS = frozenset({"it", "its", "that", "this", "they", "them", "those", "these", "there", "one", "ones"})
_WORDS = re.compile(r"[A-Za-z0-9']+")


def _user_text(part: UserPromptPart) -> str:
    if isinstance(part.content, str):
        return part.content
    return " ".join(item for item in part.content if isinstance(item, str))


def _questions(messages: Sequence[ModelMessage]) -> list[str]:
    return [
        _user_text(part)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart)
    ]


def _is_follow_up(question: str) -> bool:
    words = [w.lower() for w in _WORDS.findall(question)]
    return bool(_FOLLOW_UP_START.match(question.strip())) or (
        len(words) <= 6 and bool(_PRONOUNS & set(words))
    )


def _query(messages: Sequence[ModelMessage]) -> str:
    questions = [q.strip() for q in _questions(messages) if q.strip()]
    if not questions:
        return ""
    current = questions[-1]
    if len(questions) > 1 and _is_follow_up(current):
        return f"{questions[-2]} {current}"
    return current


def _as_dict(content: Any) -> dict[str, Any]:
    if hasattr(content, "model_dump"):
        return content.model_dump()
    if isinstance(content, str):
        try:
            loaded = json.loads(content)
        except ValueError:
            return {}
        return loaded if isinstance(loaded, dict) else {}
    return content if isinstance(content, dict) else {}


def is_extractive_model(model: object) -> bool:
    """True for the offline extractive model (which cannot write code or free text)."""
    return isinstance(model, FunctionModel) and model.model_name == MODEL_NAME


def create_extractive_model(
    embedding_model: EmbeddingModel, *, search_tool: str = "search", ask_tool: str = "ask"
) -> FunctionModel:
    """The offline model; ``embedding_model`` must be the knowledge base's embedder."""

    async def respond(
        messages: list[ModelMessage], info: AgentInfo
    ) -> tuple[str | None, dict[str, Any] | None]:
        """Either text to say, or a tool call (name, args) to make."""
        tools = {t.name for t in info.function_tools}
        last = messages[-1] if messages else None
        returns = (
            [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []
        )
        retries = (
            [p for p in last.parts if isinstance(p, RetryPromptPart)]
            if isinstance(last, ModelRequest)
            else []
        )
        if isinstance(last, ModelRequest) and any(isinstance(p, UserPromptPart) for p in last.parts):
            returns = []  # a new question: results closing an earlier, abandoned call are not its answer
        question = _query(messages)
        for part in returns:
            if part.tool_name == search_tool:
                return await _answer_from_search(question, _as_dict(part.content), part), None
            if part.tool_name == ask_tool:
                answer = _as_dict(part.content).get("answer")
                return (answer or "I could not find an answer to that in the documents."), None
        if retries:
            return "I could not search the documents just now: " + str(retries[-1].content)[:300], None
        if returns:
            return "Done.", None
        if not question:
            return "Ask me a question about the documents.", None
        if search_tool in tools:
            return None, {"tool_name": search_tool, "args": {"query": question}}
        if ask_tool in tools:
            return None, {"tool_name": ask_tool, "args": {"question": question}}
        return "I have no tool to search the documents with.", None

    async def _answer_from_search(question: str, results: dict[str, Any], part: ToolReturnPart) -> str:
        if part.outcome == "denied":
            return "The search was not approved, so I cannot answer from the documents."
        items = results.get("results") or []
        passages = [
            Passage(
                int(r["citation"]), str(r.get("text", "")), f"{r.get('title', '')}: {r.get('location') or ''}"
            )
            for r in items
            if isinstance(r, dict) and "citation" in r
        ]
        answer = await extractive_answer(embedding_model, question, passages)
        if answer.found:
            return answer.text
        scope = results.get("documents") or []
        where = f" in {', '.join(scope)}" if scope else " in the documents"
        return f"I could not find anything about “{question}”{where}."

    async def function(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        text, call = await respond(messages, info)
        if call is not None:
            return ModelResponse(parts=[ToolCallPart(call["tool_name"], call["args"])], model_name=MODEL_NAME)
        return ModelResponse(parts=[TextPart(text or "")], model_name=MODEL_NAME)

    async def stream_function(
        messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls]:
        text, call = await respond(messages, info)
        if call is not None:
            yield {0: DeltaToolCall(name=call["tool_name"], json_args=json.dumps(call["args"]))}
            return
        for token in re.findall(r"\S+\s*", text or ""):
            yield token

    return FunctionModel(function, stream_function=stream_function, model_name=MODEL_NAME)
