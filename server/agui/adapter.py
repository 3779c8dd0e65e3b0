"""pydantic-ai's AG-UI adapter with the one change ragstream needs: RUN_ERROR says nothing internal.

The stock event stream puts ``str(exception)`` into RUN_ERROR, which can carry connection strings,
paths or tracebacks of whatever failed. Here ``classify`` turns the exception into a ``RunFailure``
from the engine's one list of codes (``server.runs.failures``): the adapter's own user-facing
errors pass through, model, knowledge base and store failures get fixed texts, anything else a
generic text with a reference to the log line.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import cached_property

from ag_ui.core import BaseEvent, RunErrorEvent
from pydantic_ai.exceptions import ModelAPIError, UsageLimitExceeded, UserError
from pydantic_ai.tools import DeferredToolResults
from pydantic_ai.ui.ag_ui import AGUIAdapter, AGUIEventStream

from rag_tools.kb import KnowledgeBaseError
from rag_tools.state import StoreError
from rag_tools.tools.calls import ANSWER_KEY

from ..runs import BackendUnavailable, FailureCode, RunFailure
from ._upstream import interrupt_id_to_tool_call_id

__all__ = ["RagstreamAdapter", "classify"]

logger = logging.getLogger("ragstream.runs")


def classify(error: BaseException) -> RunFailure:
    """The failure to show a client for ``error``; unexpected errors are logged here."""
    if isinstance(error, RunFailure):
        return error
    if isinstance(error, UserError):
        return RunFailure(FailureCode.INVALID_REQUEST, str(error))
    if isinstance(error, ModelAPIError):
        logger.warning("model request failed: %r", error)
        return RunFailure(FailureCode.MODEL_UNAVAILABLE)
    if isinstance(error, UsageLimitExceeded):
        return RunFailure(FailureCode.USAGE_LIMIT)
    if isinstance(error, KnowledgeBaseError | OSError):
        logger.error("knowledge base failure", exc_info=error)
        return RunFailure(FailureCode.KNOWLEDGE_BASE_UNAVAILABLE)
    if isinstance(error, StoreError | BackendUnavailable):
        logger.error("thread store failure", exc_info=error)
        return RunFailure(FailureCode.STORE_UNAVAILABLE)
    reference = uuid.uuid4().hex[:12]
    logger.error("run failed (reference %s)", reference, exc_info=error)
    return RunFailure(
        FailureCode.INTERNAL_ERROR, f"The run failed because of an internal error (reference {reference})."
    )


@dataclass
class _SafeEventStream(AGUIEventStream):
    async def on_error(self, error: Exception) -> AsyncIterator[BaseEvent]:
        failure = classify(error)
        async for event in super().on_error(error):
            if isinstance(event, RunErrorEvent):
                event = event.model_copy(update={"message": failure.message, "code": failure.code.value})
            yield event


@dataclass
class RagstreamAdapter(AGUIAdapter):
    """``AGUIAdapter`` whose RUN_ERROR events carry only client-safe messages, and whose resumes
    carry the user's answers to a tool's ``ask`` (``rag_tools.tools.calls``).
    """

    @cached_property
    def deferred_tool_results(self) -> DeferredToolResults | None:
        """Upstream's approvals, plus ``{"answer": ...}`` as the call's metadata for every resume
        payload that carries a text ``answer`` (the tool's ``ask`` returns it on the re-run).
        """
        results = super().deferred_tool_results
        if results is None:
            return None
        for entry in getattr(self.run_input, "resume", None) or []:
            payload = entry.payload if isinstance(entry.payload, dict) else {}
            answer = payload.get(ANSWER_KEY)
            if isinstance(answer, str) and entry.status != "cancelled":
                call_id = interrupt_id_to_tool_call_id(entry.interrupt_id)
                results.metadata[call_id] = {ANSWER_KEY: answer}
        return results

    def build_event_stream(self) -> _SafeEventStream:  # type: ignore[override]
        # The upstream stream exactly as pydantic-ai builds it (every field, including ones a later
        # release adds), with our ``on_error``: the subclass adds no state, so only the class changes.
        stream = super().build_event_stream()
        stream.__class__ = _SafeEventStream
        return stream  # type: ignore[return-value]
