"""Helpers a tool calls while it runs: ``race`` against a timeout and the run's end, ``ask`` the user.

``await race(ctx, awaitable, timeout)`` returns the awaitable's result. When ``timeout`` seconds
(or what is left of the run's own time limit, if less) pass first, the awaitable is cancelled
and awaited, and ``RaceTimeout`` (a ``ToolFailed``) is raised: left alone it tells the model the
call timed out. When the run is cancelled (stopped, disconnected, timed out), the awaitable is
cancelled and awaited the same way and the cancellation goes on, so nothing is left running.

``answer = await ask(ctx, "Which year?")`` returns the person's answer. Two paths:

- **live**, when the run has a ``QuestionChannel`` (``rag_tools.questions``; the server gives one to
  runs of clients that answer live) and someone follows the run: ``ask`` sends a CUSTOM event
  ``ragstream.question`` (``{questionId, toolCallId, tool, question, timeoutSeconds}``) and waits
  where it is, the stream open, until the answer comes back (the server's answers route); then a
  ``ragstream.question_end`` (``{questionId, toolCallId, tool, outcome}``, outcome ``answered``,
  ``declined``, ``timeout`` or ``interrupt``) closes it. The tool goes on from the ``ask``. No
  answer within ``timeout`` seconds (the channel's default, at most what is left of the run's time)
  raises ``QuestionTimeout``, a declined question ``QuestionDeclined``: both ``ToolFailed``, so a
  tool may catch them, and left alone they tell the model why the call failed; the run goes on.
- **interrupt**, otherwise (no channel, or the client left while the question waited): the run
  pauses with an AG-UI interrupt, as the approval policy does (pydantic-ai ``ApprovalRequired``;
  the interrupt's ``metadata`` is ``{"kind": "question", "question": ..., "tool": ...}``). The
  client resumes with the payload ``{"approved": true, "answer": "..."}``; the tool then runs
  again from the start with the same arguments, and this time ``ask`` returns the answer. A
  denial (``"approved": false``) reaches the model as a denied call. One question per call on
  this path: a tool that needs several asks for them at once.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from typing import Any, TypeVar

from ag_ui.core import CustomEvent as AGUICustomEvent
from pydantic_ai import ApprovalRequired, RunContext, ToolFailed

from ..deps import AGUIEvent
from ..questions import QuestionChannel, Unattended

__all__ = [
    "ANSWER_KEY",
    "QUESTION_END_EVENT",
    "QUESTION_EVENT",
    "QUESTION_KIND",
    "QuestionDeclined",
    "QuestionTimeout",
    "RaceTimeout",
    "ask",
    "race",
]

T = TypeVar("T")

ANSWER_KEY = "answer"
QUESTION_KIND = "question"
QUESTION_EVENT = "ragstream.question"
QUESTION_END_EVENT = "ragstream.question_end"


class RaceTimeout(ToolFailed):
    """The awaitable given to ``race`` did not finish in time (the model sees the message)."""


class QuestionTimeout(ToolFailed):
    """Nobody answered a live question in time (the model sees the message; the run goes on)."""


class QuestionDeclined(ToolFailed):
    """The person declined to answer a live question."""


async def race(ctx: RunContext[Any], awaitable: Awaitable[T], timeout: float) -> T:  # noqa: ASYNC109 (the seed API)
    """``awaitable``'s result, unless ``timeout`` or the run's end comes first (see the module doc)."""
    limit = _within_run(ctx, timeout)
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({task}, timeout=limit)
    except BaseException:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise
    if not done:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise RaceTimeout(f"{ctx.tool_name or 'the tool'} gave up after {limit:g} s without a result.")
    return task.result()


def _within_run(ctx: RunContext[Any], seconds: float) -> float:
    """``seconds``, cut to what is left of the run's time when it has a limit."""
    remaining = ctx.remaining_time()
    return seconds if remaining is None else min(seconds, max(0.0, remaining))


def answer_of(ctx: RunContext[Any]) -> str | None:
    """The user's answer to this call's question, when the run was resumed with one."""
    metadata = ctx.tool_call_metadata
    if ctx.tool_call_approved and isinstance(metadata, dict) and isinstance(metadata.get(ANSWER_KEY), str):
        return metadata[ANSWER_KEY]
    return None


async def ask(ctx: RunContext[Any], question: str, *, timeout: float | None = None) -> str:  # noqa: ASYNC109 (the seed API)
    """The user's answer to ``question``: live while someone follows the run, else through an
    interrupt and a re-run (see the module doc)."""
    answer = answer_of(ctx)
    if answer is not None:
        return answer
    channel = getattr(ctx.deps, "questions", None)
    if isinstance(channel, QuestionChannel) and channel.attended:
        answer = await _ask_live(ctx, channel, question, channel.timeout if timeout is None else timeout)
        if answer is not None:
            return answer
    raise ApprovalRequired(
        metadata={"kind": QUESTION_KIND, "question": question, "tool": ctx.tool_name, "reason": question}
    )


async def _ask_live(
    ctx: RunContext[Any], channel: QuestionChannel, question: str, limit: float
) -> str | None:
    """The live answer, or ``None`` when the question must become an interrupt after all."""
    question_id = uuid.uuid4().hex
    limit = _within_run(ctx, limit)
    about = {"questionId": question_id, "toolCallId": ctx.tool_call_id, "tool": ctx.tool_name}

    async def tell(name: str, value: dict[str, Any]) -> None:
        await ctx.emit(AGUIEvent(event=AGUICustomEvent(name=name, value={**about, **value})))

    try:
        await channel.open(question_id, limit)
    except Unattended:
        return None
    await tell(QUESTION_EVENT, {"question": question, "timeoutSeconds": limit})
    try:
        got = await channel.wait(question_id, limit)
    except Unattended:
        await tell(QUESTION_END_EVENT, {"outcome": "interrupt"})
        return None
    if got is None:
        await tell(QUESTION_END_EVENT, {"outcome": "timeout"})
        raise QuestionTimeout(f"The user did not answer {question!r} within {limit:g} s.")
    if got.answer is None:
        await tell(QUESTION_END_EVENT, {"outcome": "declined"})
        why = f": {got.reason}" if got.reason else "."
        raise QuestionDeclined(f"The user declined to answer {question!r}{why}")
    await tell(QUESTION_END_EVENT, {"outcome": "answered"})
    return got.answer
