"""Live questions: how a tool's ``ask`` waits for the person's answer while its run streams.

A ``QuestionChannel`` is what a run offers its tools when someone can answer live: deps with a
``questions`` attribute holding one (``AgentDeps.questions``; the server sets it per run for
clients that opt in). ``rag_tools.tools.ask`` opens the question (``channel.open``: from then on
an answer can arrive, from any worker), only then sends it to the client, and awaits
``channel.wait(question_id, seconds)``:

- a ``LiveAnswer`` (``answer`` text, or ``answer=None`` when the person declined, with an optional
  ``reason``);
- ``None`` when ``seconds`` passed without one;
- ``Unattended`` raised when nobody can answer live any more (the client left the run): the
  question then becomes an AG-UI interrupt and the tool runs again with the answer on resume.

Without a channel, ``ask`` always takes the interrupt path.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

__all__ = ["LiveAnswer", "QuestionChannel", "Unattended"]


@dataclass(frozen=True)
class LiveAnswer:
    """The person's answer; ``answer`` is ``None`` when they declined (``reason`` may say why)."""

    answer: str | None
    reason: str | None = None


class Unattended(Exception):
    """Nobody follows the run to answer live: ask with an interrupt instead."""


class QuestionChannel(ABC):
    """Carries a tool's question to the person following the run, and their answer back."""

    #: Seconds a question waits for its answer unless the tool says otherwise.
    timeout: float = 120.0

    @property
    @abstractmethod
    def attended(self) -> bool:
        """Whether someone follows the run who can answer live."""

    @abstractmethod
    async def open(self, question_id: str, seconds: float) -> None:
        """Be ready for the answer to ``question_id`` for ``seconds`` before the client hears of it
        (a fast answer must not find the question unknown); ``Unattended`` when nobody can answer
        live."""

    @abstractmethod
    async def wait(self, question_id: str, seconds: float) -> LiveAnswer | None:
        """The answer to the opened ``question_id``; ``None`` after ``seconds``; ``Unattended``
        when nobody can answer live any more."""
