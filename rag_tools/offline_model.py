"""The offline extractive model: answers without any language model or API key.

A pydantic-ai ``FunctionModel`` that behaves like a disciplined RAG assistant:

1. on a new user message it calls the search tool (or ``ask`` when only QA is available); a
   question that stands on its own is searched on its own, and only an elliptical follow-up
   ("And the monthly ones?") borrows the previous turn's topic (``rag_tools.follow_ups``);
2. on the search results it streams an answer, word by word, made of the sentences of the
   retrieved passages that best answer the question (``rag_tools.extractive``), each followed by
   its ``[n]`` citation; when the passages found do not answer it says so, naming the document filter.

The document filter needs no handling here: the tools apply the session's filter themselves.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import Any, Literal

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
from pydantic_ai.profiles import ModelProfile

from .extractive import Passage, extractive_answer
from .follow_ups import ResolvedQuestion, Turn, resolve_follow_up

__all__ = ["MODEL_NAME", "FollowUpRule", "create_extractive_model", "is_extractive_model"]

MODEL_NAME = "extractive"
FollowUpRule = Literal["topic", "append"]
_APPEND_START = re.compile(r"^(and|also|what about|how about|and what|what of|same for)\b", re.IGNORECASE)
_APPEND_PRONOUNS = frozenset(
    {"it", "its", "that", "this", "they", "them", "those", "these", "there", "one", "ones"}
)
_WORDS = re.compile(r"[A-Za-z0-9']+")
_BRACKETED_NUMBER = re.compile(r"\[(\d+)\]")
_QUOTED_CHARS = 200  # of the user's question, quoted back when nothing answers it
_MARKUP = re.compile(r"[`*~<>\[\]|\\]+")  # Markdown and HTML marks, quoted back as spaces


def _user_text(part: UserPromptPart) -> str:
    if isinstance(part.content, str):
        return part.content
    return " ".join(item for item in part.content if isinstance(item, str))


def _material(part: ToolReturnPart) -> str:
    """The text a search or ask call brought back: its passages, or its answer."""
    content = _as_dict(part.content)
    texts = [str(r.get("text", "")) for r in content.get("results") or [] if isinstance(r, dict)]
    return "\n".join([*texts, str(content.get("answer") or "")])


def _call_args(messages: Sequence[ModelMessage], part: ToolReturnPart) -> dict[str, Any]:
    """The arguments of the tool call that ``part`` returns from."""
    for message in reversed(messages):
        for call in message.parts if isinstance(message, ModelResponse) else ():
            if isinstance(call, ToolCallPart) and call.tool_call_id == part.tool_call_id:
                return call.args_as_dict()
    return {}


def _turns(messages: Sequence[ModelMessage], tools: tuple[str, ...]) -> list[Turn]:
    """One ``Turn`` per non-empty user message: the question, its last search, what came back."""
    turns: list[Turn] = []
    for message in messages:
        for part in message.parts if turns else ():
            if isinstance(part, ToolCallPart) and part.tool_name in tools:
                args = part.args_as_dict()
                query = args.get("query", args.get("question"))
                if isinstance(query, str):
                    turns[-1] = replace(turns[-1], query=query)
            elif isinstance(part, ToolReturnPart) and part.tool_name in tools:
                turns[-1] = replace(turns[-1], material=f"{turns[-1].material}\n{_material(part)}")
        if isinstance(message, ModelRequest):
            questions = (_user_text(p).strip() for p in message.parts if isinstance(p, UserPromptPart))
            turns.extend(Turn(q) for q in questions if q)
    return turns


def _appended(turns: Sequence[Turn]) -> ResolvedQuestion:
    """The ``"append"`` rule, the one before issue 22 (``bench.rag_eval``'s baseline).

    A question that opens like a follow-up ("And ...", "What about ..."), or a short one with a
    pronoun, is searched together with the whole previous question.
    """
    current = turns[-1].question
    words = {w.lower() for w in _WORDS.findall(current)}
    short_with_pronoun = len(_WORDS.findall(current)) <= 6 and bool(_APPEND_PRONOUNS & words)
    if len(turns) > 1 and (_APPEND_START.match(current) or short_with_pronoun):
        return ResolvedQuestion(current, f"{turns[-2].question} {current}", turns[-2].question)
    return ResolvedQuestion(current, current)


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
    embedding_model: EmbeddingModel,
    *,
    search_tool: str = "search",
    ask_tool: str = "ask",
    follow_ups: FollowUpRule = "topic",
) -> FunctionModel:
    """The offline model; ``embedding_model`` must be the knowledge base's embedder.

    ``follow_ups`` says how a question leans on the turn before it: ``"topic"`` (the default) lets
    only an elliptical follow-up borrow the previous turn's topic (``rag_tools.follow_ups``);
    ``"append"`` is the earlier rule, kept as ``bench.rag_eval``'s baseline, which searches a
    question that opens like a follow-up together with the whole previous question.
    """
    if follow_ups not in ("topic", "append"):
        raise ValueError(f"follow_ups must be 'topic' or 'append', not {follow_ups!r}")

    def resolve(messages: Sequence[ModelMessage]) -> ResolvedQuestion | None:
        turns = _turns(messages, (search_tool, ask_tool))
        if not turns:
            return None
        if follow_ups == "append":
            return _appended(turns)
        return resolve_follow_up(turns[-1].question, turns[-2] if len(turns) > 1 else None)

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
        question = resolve(messages)
        for part in returns:
            if part.tool_name == search_tool and question is not None:
                searched = _call_args(messages, part).get("query")
                searched = searched if isinstance(searched, str) else question.query
                return await _answer_from_search(question, searched, _as_dict(part.content), part, tools)
            if part.tool_name == ask_tool:
                answer = _as_dict(part.content).get("answer")
                return (answer or "I could not find an answer to that in the documents."), None
        if retries:
            return "I could not search the documents just now: " + str(retries[-1].content)[:300], None
        if returns:
            return "Done.", None
        if question is None:
            return "Ask me a question about the documents.", None
        if search_tool in tools:
            return None, {"tool_name": search_tool, "args": {"query": question.query}}
        if ask_tool in tools:
            return None, {"tool_name": ask_tool, "args": {"question": question.query}}
        return "I have no tool to search the documents with.", None

    async def _answer_from_search(
        question: ResolvedQuestion,
        searched: str,
        results: dict[str, Any],
        part: ToolReturnPart,
        tools: set[str],
    ) -> tuple[str | None, dict[str, Any] | None]:
        """The answer quoted from a search for ``searched``, or one more search to make first."""
        if part.outcome == "denied":
            return "The search was not approved, so I cannot answer from the documents.", None
        items = results.get("results") or []
        passages = [
            Passage(
                int(r["citation"]), str(r.get("text", "")), f"{r.get('title', '')}: {r.get('location') or ''}"
            )
            for r in items
            if isinstance(r, dict) and "citation" in r
        ]
        # A borrowed topic steers the search; the question's own words pick the sentence.
        focus = question.question if follow_ups == "topic" and searched != question.question else None
        answer = await extractive_answer(embedding_model, searched, passages, focus=focus)
        retry = question.retry_after(searched, answer.confidence)
        if retry is not None and search_tool in tools:
            return None, {"tool_name": search_tool, "args": {"query": retry}}
        if answer.found:
            return answer.text, None
        scope = results.get("documents") or []
        where = f" in {', '.join(scope)}" if scope else " in the documents"
        # the user's own words, not the search's (which may carry a topic borrowed from an earlier
        # question), as plain words: their "[1]" quoted back would read as a citation of source 1,
        # and a page that renders answers as Markdown would render their markup
        quoted = " ".join(_MARKUP.sub(" ", _BRACKETED_NUMBER.sub(r"(\1)", question.question)).split())
        quoted = textwrap.shorten(quoted, _QUOTED_CHARS, placeholder=" …")
        if len(passages) == 1:  # the search's card says what it found: agree with it
            return f"The one passage I found{where} does not answer “{quoted}”.", None
        if passages:
            return f"None of the {len(passages)} passages I found{where} answers “{quoted}”.", None
        return f"I could not find anything about “{quoted}”{where}.", None

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

    # pydantic-ai tells a model mid-run that tools appeared (``read_tool_output`` after a long result)
    # in a system prompt part; without this profile it would arrive as user text, which this model
    # would take for the user's next question and search for again.
    return FunctionModel(
        function,
        stream_function=stream_function,
        model_name=MODEL_NAME,
        profile=ModelProfile(supports_inline_system_prompts=True),
    )
