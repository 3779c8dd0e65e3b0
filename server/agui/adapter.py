"""pydantic-ai's AG-UI adapter with two changes: RUN_ERROR says nothing internal, and ids are kept.

The stock event stream puts ``str(exception)`` into RUN_ERROR, which can carry connection strings,
paths or tracebacks of whatever failed. Here ``classify`` turns the exception into a ``RunFailure``
from the engine's one list of codes (``ragstream.runs.failures``): the adapter's own user-facing
errors pass through, model, knowledge base and store failures get fixed texts, anything else a
generic text with a reference to the log line.

The stream also notes the message ids it mints (``RunIds``: one per model response, one per tool
result), so the thread stores its messages under the ids the client saw (``message_ids``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import cached_property

from ag_ui.core import BaseEvent, RunErrorEvent, ToolCallResultEvent
from pydantic_ai.exceptions import UsageLimitExceeded, UserError
from pydantic_ai.messages import (
    FunctionToolResultEvent,
    NativeToolReturnPart,
    OutputToolResultEvent,
    TextPart,
)
from pydantic_ai.tools import DeferredToolResults
from pydantic_ai.ui.ag_ui import AGUIAdapter, AGUIEventStream

from rag_tools.kb import KnowledgeBaseError
from rag_tools.state import StoreError, VersionConflictError
from rag_tools.tools.calls import ANSWER_KEY

from ..runs import BackendUnavailable, FailureCode, RunFailure
from ._upstream import interrupt_id_to_tool_call_id
from .encoding import run_error_event
from .message_ids import RunIds
from .model_errors import model_failure

__all__ = ["RagstreamAdapter", "classify"]

logger = logging.getLogger("ragstream.runs")


def classify(error: BaseException) -> RunFailure:
    """The failure to show a client for ``error``; unexpected errors are logged here."""
    if isinstance(error, RunFailure):
        return error
    if isinstance(error, UserError):
        # pydantic-ai's words are for the server's developers (they name toolsets, models, types):
        # what a client can get wrong is refused before the stream opens; the rest goes to the log
        reference = uuid.uuid4().hex[:12]
        logger.warning("run input refused by the agent framework (reference %s): %s", reference, error)
        return RunFailure(
            FailureCode.INVALID_REQUEST,
            f"The run's input could not be used (reference {reference} in the server's log).",
        )
    if (failure := model_failure(error)) is not None:
        return failure
    if isinstance(error, UsageLimitExceeded):
        return RunFailure(FailureCode.USAGE_LIMIT)
    if isinstance(error, KnowledgeBaseError | OSError):
        logger.error("knowledge base failure", exc_info=error)
        return RunFailure(FailureCode.KNOWLEDGE_BASE_UNAVAILABLE)
    if isinstance(error, VersionConflictError):  # another writer saved the thread first
        logger.warning("run not saved: %s", error)
        return RunFailure(FailureCode.THREAD_CHANGED)
    if isinstance(error, StoreError | BackendUnavailable):
        logger.error("thread store failure", exc_info=error)
        return RunFailure(FailureCode.STORE_UNAVAILABLE)
    reference = uuid.uuid4().hex[:12]
    logger.error("run failed (reference %s)", reference, exc_info=error)
    return RunFailure(
        FailureCode.INTERNAL_ERROR, f"The run failed because of an internal error (reference {reference})."
    )


@dataclass
class _RagstreamEventStream(AGUIEventStream):
    ids: RunIds | None = None  # set on the instance by ``RagstreamAdapter.build_event_stream``

    async def on_error(self, error: Exception) -> AsyncIterator[BaseEvent]:
        failure = classify(error)
        async for event in super().on_error(error):
            if isinstance(event, RunErrorEvent):
                event = run_error_event(failure, event)
            yield event

    async def before_response(self) -> AsyncIterator[BaseEvent]:
        async for event in super().before_response():
            yield event
        if self.ids is not None:  # the id this response's tool calls stream under...
            self.ids.responses.append(self.message_id)

    async def handle_text_start(self, part: TextPart, follows_text: bool = False) -> AsyncIterator[BaseEvent]:
        async for event in super().handle_text_start(part, follows_text):
            yield event
        if self.ids is not None and self.ids.responses:  # ...or its text, which starts a message of its own
            self.ids.responses[-1] = self.message_id

    async def handle_function_tool_result(self, event: FunctionToolResultEvent) -> AsyncIterator[BaseEvent]:
        async for out in super().handle_function_tool_result(event):
            yield self._noted(out)

    async def handle_output_tool_result(self, event: OutputToolResultEvent) -> AsyncIterator[BaseEvent]:
        async for out in super().handle_output_tool_result(event):
            yield self._noted(out)

    async def handle_builtin_tool_return(self, part: NativeToolReturnPart) -> AsyncIterator[BaseEvent]:
        async for out in super().handle_builtin_tool_return(part):
            yield self._noted(out)

    def _noted(self, event: BaseEvent) -> BaseEvent:
        if self.ids is not None and isinstance(event, ToolCallResultEvent):
            self.ids.tool_results.setdefault(event.tool_call_id, event.message_id)
        return event


@dataclass
class RagstreamAdapter(AGUIAdapter):
    """``AGUIAdapter`` whose RUN_ERROR events carry only client-safe messages, whose resumes
    carry the user's answers to a tool's ``ask`` (``rag_tools.tools.calls``), and whose stream
    notes the message ids it mints in ``ids``.
    """

    ids: RunIds | None = None

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

    def build_event_stream(self) -> _RagstreamEventStream:  # type: ignore[override]
        # The upstream stream exactly as pydantic-ai builds it (every field, including ones a later
        # release adds), with our hooks: the subclass adds one attribute, set here.
        stream = super().build_event_stream()
        stream.__class__ = _RagstreamEventStream
        stream.ids = self.ids  # type: ignore[attr-defined]
        return stream  # type: ignore[return-value]
