"""Live questions of an AG-UI run: ``rag_tools.questions.QuestionChannel`` over the engine's question bus.

A run gets a ``RunQuestions`` when its client says it answers live (``wants_live_questions``:
``forwardedProps.ragstream.liveQuestions`` is ``true``; the chat page sends it). A tool's ``ask``
then opens a question on the bus and waits; the answer comes back through
``POST /threads/{id}/runs/{run}/answers`` on any worker. The question is open in the bus before
the client is told of it, so an answer as fast as the client can send it finds it. When nobody follows the run any more
(``leave``, called by the engine once the last client has gone), a waiting question ends with
``Unattended`` and later ones are not asked live: the tool's ``ask`` turns them into an interrupt,
the run finishes with it, and the thread keeps the question for the client's next visit.
A bus that cannot be reached also falls back to the interrupt.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ag_ui.core import RunAgentInput

from rag_tools.questions import LiveAnswer, QuestionChannel, Unattended

from ..runs import BackendUnavailable, QuestionBus

__all__ = ["RunQuestions", "wants_live_questions"]

logger = logging.getLogger("ragstream.runs")

#: How much longer than its wait a question stays open in the bus (a late answer is then "closed").
TTL_MARGIN = 30.0


def wants_live_questions(run_input: RunAgentInput) -> bool:
    """Whether the client answers tools' questions live (``forwardedProps.ragstream.liveQuestions``)."""
    props = run_input.forwarded_props
    ours = props.get("ragstream") if isinstance(props, dict) else None
    return isinstance(ours, dict) and ours.get("liveQuestions") is True


class RunQuestions(QuestionChannel):
    """The questions of one run (its ``key``), while its client follows it."""

    def __init__(self, bus: QuestionBus, key: str, timeout: float) -> None:
        self.bus = bus
        self.key = key
        self.timeout = timeout
        self._left = asyncio.Event()
        self._waiting = 0
        self._answers: dict[str, asyncio.Future[dict[str, Any]]] = {}

    @property
    def attended(self) -> bool:
        return not self._left.is_set()

    def leave(self) -> bool:
        """Nobody follows the run any more: True when a question was waiting (it becomes an interrupt)."""
        self._left.set()
        return self._waiting > 0

    async def open(self, question_id: str, seconds: float) -> None:
        if self._left.is_set():
            raise Unattended
        try:
            self._answers[question_id] = await self.bus.open(self.key, question_id, seconds + TTL_MARGIN)
        except BackendUnavailable as exc:
            logger.warning("run %s: cannot ask live (%s); asking with an interrupt", self.key, exc)
            raise Unattended from exc

    async def wait(self, question_id: str, seconds: float) -> LiveAnswer | None:
        answer = self._answers.pop(question_id)
        left = asyncio.ensure_future(self._left.wait())
        self._waiting += 1
        try:
            await asyncio.wait({answer, left}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._waiting -= 1
            left.cancel()
            late = await asyncio.shield(self._close(question_id))
        if answer.done() and not answer.cancelled():
            return _live(answer.result())
        if late is not None:
            return _live(late)
        if self._left.is_set():
            raise Unattended
        return None

    async def _close(self, question_id: str) -> dict[str, Any] | None:
        try:
            return await self.bus.close(self.key, question_id)
        except BackendUnavailable as exc:
            logger.warning("run %s: could not close question %s: %s", self.key, question_id, exc)
            return None


def _live(payload: dict[str, Any]) -> LiveAnswer:
    answer = payload.get("answer")
    if isinstance(answer, str):
        return LiveAnswer(answer)
    reason = payload.get("reason")
    return LiveAnswer(None, reason if isinstance(reason, str) else None)
