"""Helpers a tool calls while it runs: ``race`` against a timeout and the run's end, ``ask`` the user.

``await race(ctx, awaitable, timeout)`` returns the awaitable's result. When ``timeout`` seconds
(or what is left of the run's own time limit, if less) pass first, the awaitable is cancelled
and awaited, and ``RaceTimeout`` (a ``ToolFailed``) is raised: left alone it tells the model the
call timed out. When the run is cancelled (stopped, disconnected, timed out), the awaitable is
cancelled and awaited the same way and the cancellation goes on, so nothing is left running.

``answer = await ask(ctx, "Which year?")`` pauses the run with an AG-UI interrupt, as the approval
policy does (pydantic-ai ``ApprovalRequired``; the interrupt's ``metadata`` is ``{"kind":
"question", "question": ..., "tool": ...}``). The client resumes with the payload ``{"approved":
true, "answer": "..."}``; the tool then runs again from the start with the same arguments, and
this time ``ask`` returns the answer. A denial (``"approved": false``) reaches the model as a
denied call. One question per tool call: a tool that needs several asks for them at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

from pydantic_ai import ApprovalRequired, RunContext, ToolFailed

__all__ = ["ANSWER_KEY", "QUESTION_KIND", "RaceTimeout", "ask", "race"]

T = TypeVar("T")

ANSWER_KEY = "answer"
QUESTION_KIND = "question"


class RaceTimeout(ToolFailed):
    """The awaitable given to ``race`` did not finish in time (the model sees the message)."""


async def race(ctx: RunContext[Any], awaitable: Awaitable[T], timeout: float) -> T:  # noqa: ASYNC109 (the seed API)
    """``awaitable``'s result, unless ``timeout`` or the run's end comes first (see the module doc)."""
    remaining = ctx.remaining_time()
    limit = timeout if remaining is None else min(timeout, max(0.0, remaining))
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


def answer_of(ctx: RunContext[Any]) -> str | None:
    """The user's answer to this call's question, when the run was resumed with one."""
    metadata = ctx.tool_call_metadata
    if ctx.tool_call_approved and isinstance(metadata, dict) and isinstance(metadata.get(ANSWER_KEY), str):
        return metadata[ANSWER_KEY]
    return None


async def ask(ctx: RunContext[Any], question: str) -> str:
    """The user's answer to ``question``; the first time, pauses the run with an interrupt."""
    answer = answer_of(ctx)
    if answer is not None:
        return answer
    raise ApprovalRequired(
        metadata={"kind": QUESTION_KIND, "question": question, "tool": ctx.tool_name, "reason": question}
    )
