"""pydantic-ai's AG-UI adapter with the one change ragstream needs: RUN_ERROR says nothing internal.

The stock event stream puts ``str(exception)`` into RUN_ERROR, which can carry connection strings,
paths or tracebacks of whatever failed. Here the message is chosen by category (the adapter's own
user-facing errors pass through; model, knowledge base and store failures get fixed texts;
anything else gets a generic text with a log reference) and ``code`` names the category.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

from ag_ui.core import BaseEvent, RunErrorEvent
from pydantic_ai.exceptions import ModelAPIError, UsageLimitExceeded, UserError
from pydantic_ai.ui.ag_ui import AGUIAdapter, AGUIEventStream

from rag_tools.kb import KnowledgeBaseError
from rag_tools.state import StoreError

__all__ = ["RagstreamAdapter", "RunFailure", "public_error"]

logger = logging.getLogger("ragstream.runs")


class RunFailure(Exception):
    """An error whose message is written for the client."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


def public_error(error: BaseException) -> tuple[str, str]:
    """(message, code) safe to show a client for ``error``; unexpected errors are logged here."""
    if isinstance(error, RunFailure):
        return str(error), error.code
    if isinstance(error, UserError):
        return str(error), "invalid_request"
    if isinstance(error, ModelAPIError):
        logger.warning("model request failed: %r", error)
        return "The language model could not be reached or refused the request.", "model_unavailable"
    if isinstance(error, UsageLimitExceeded):
        return "The run reached its usage limit.", "usage_limit"
    if isinstance(error, KnowledgeBaseError | OSError):
        logger.error("knowledge base failure", exc_info=error)
        return "The knowledge base is unavailable.", "knowledge_base_unavailable"
    if isinstance(error, StoreError):
        logger.error("thread store failure", exc_info=error)
        return "The conversation could not be saved; it is unchanged.", "store_unavailable"
    reference = uuid.uuid4().hex[:12]
    logger.error("run failed (reference %s)", reference, exc_info=error)
    return f"The run failed because of an internal error (reference {reference}).", "internal_error"


@dataclass
class _SafeEventStream(AGUIEventStream):
    async def on_error(self, error: Exception) -> AsyncIterator[BaseEvent]:
        message, code = public_error(error)
        async for event in super().on_error(error):
            if isinstance(event, RunErrorEvent):
                event = event.model_copy(update={"message": message, "code": code})
            yield event


@dataclass
class RagstreamAdapter(AGUIAdapter):
    """``AGUIAdapter`` whose RUN_ERROR events carry only client-safe messages."""

    def build_event_stream(self) -> _SafeEventStream:  # type: ignore[override]
        return _SafeEventStream(
            self.run_input,
            accept=self.accept,
            ag_ui_version=self.ag_ui_version,
            include_usage=self.include_usage,
            manage_system_prompt=self.manage_system_prompt,
            preserve_file_data=self.preserve_file_data,
        )
