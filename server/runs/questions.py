"""Questions a run asks its client, and the answers that come back from whichever worker gets them.

A run opens a question (``open``) and awaits the future it gets; an answer posted to any worker
(``answer``) resolves it. Each question is answered at most once: a second answer, or one that
comes after the question was closed (answered, timed out, the run ended), is refused with
``"closed"``, and an id never opened gives ``"unknown"``. ``close`` ends the question and returns an
answer that was accepted but had not reached the future yet (an answer racing the timeout wins).

``MemoryQuestionBus`` serves one process; ``RedisQuestionBus`` (``runs.redis``) carries answers to
the worker that runs the run, as the stop bus carries stop requests.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections import OrderedDict
from typing import Any, Literal

__all__ = ["AnswerStatus", "MemoryQuestionBus", "QuestionBus"]

AnswerStatus = Literal["delivered", "unknown", "closed"]

#: How many closed questions a memory bus remembers, to tell "closed" from "unknown".
CLOSED_KEPT = 10_000


class QuestionBus(ABC):
    """Open questions of runs and the answers to them (see the module doc)."""

    @abstractmethod
    async def open(self, key: str, question_id: str, ttl: float) -> asyncio.Future[dict[str, Any]]:
        """Open a question of the run ``key`` for ``ttl`` seconds; the future gets its answer."""

    @abstractmethod
    async def answer(self, key: str, question_id: str, payload: dict[str, Any]) -> AnswerStatus:
        """Deliver ``payload`` as the answer to an open question."""

    @abstractmethod
    async def close(self, key: str, question_id: str) -> dict[str, Any] | None:
        """Close the question; the answer accepted but not yet delivered to its future, if any."""

    async def aclose(self) -> None:
        """Stop listening (shutdown)."""
        return None


class MemoryQuestionBus(QuestionBus):
    """The questions of this process's runs."""

    def __init__(self) -> None:
        self._open: dict[tuple[str, str], asyncio.Future[dict[str, Any]]] = {}
        self._closed: OrderedDict[tuple[str, str], None] = OrderedDict()

    async def open(self, key: str, question_id: str, ttl: float) -> asyncio.Future[dict[str, Any]]:
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._open[(key, question_id)] = future
        return future

    async def answer(self, key: str, question_id: str, payload: dict[str, Any]) -> AnswerStatus:
        future = self._open.get((key, question_id))
        if future is None:
            return "closed" if (key, question_id) in self._closed else "unknown"
        if future.done():
            return "closed"
        future.set_result(payload)
        return "delivered"

    async def close(self, key: str, question_id: str) -> dict[str, Any] | None:
        future = self._open.pop((key, question_id), None)
        self._closed[(key, question_id)] = None
        while len(self._closed) > CLOSED_KEPT:
            self._closed.popitem(last=False)
        if future is not None and future.done() and not future.cancelled():
            return future.result()
        return None
