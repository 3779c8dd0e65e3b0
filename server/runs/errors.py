"""What can go wrong when starting, following or stopping a run, in the engine's own terms.

These are domain errors: they say what happened, not which HTTP status answers it. The web layer
maps them to responses in one table (``ragstream.errors``); the engine never speaks HTTP.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BackendUnavailable", "QuestionNotFound", "RunConflict", "RunError", "RunNotFound"]


class RunError(Exception):
    """Base of the engine's errors; ``str(error)`` is written for the client."""


class RunConflict(RunError):
    """The run cannot start now: its thread is busy, or its id is already taken in the thread.

    ``code`` names which (``thread_busy``, ``run_exists``, ``remote_run``); an answer to a run that
    ended or to a question already closed conflicts too (``run_ended``, ``question_closed``), and
    so does a resume that answers an interrupt not pending on the thread (``interrupt_not_pending``)
    and a tool result for a call the thread does not wait on (``tool_call_not_pending``).
    ``details`` are field errors, as ``InvalidRequest`` carries them.
    """

    def __init__(self, message: str, code: str, details: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.details = details


class RunNotFound(RunError):
    """No such run in that thread, for that caller (an unknown run and another's look the same)."""


class QuestionNotFound(RunError):
    """The run never asked a question by that id."""


class BackendUnavailable(RunError):
    """The shared backend (Redis) cannot be reached: new runs are refused, running ones fail."""
