"""Why a run can fail: the one list of failure codes, each with the message a client sees.

A run that fails ends with a terminal error event carrying one of these codes (AG-UI's RUN_ERROR
``code``; docs/protocol.md lists them). The engine raises and reports failures by
code; the protocol binding classifies its own exceptions (model, knowledge base, store) into the
same codes, so a client sees one vocabulary whatever failed. Messages never carry internal detail:
unexpected errors get a log reference instead.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["FailureCode", "RunFailure"]


class FailureCode(StrEnum):
    """Codes of the terminal error event of a failed run."""

    TIMEOUT = "timeout"
    """The run took longer than the configured run timeout and was stopped."""
    MODEL_UNAVAILABLE = "model_unavailable"
    """The model provider is down, failing or timing out (retries included); retry later."""
    MODEL_REFUSED = "model_refused"
    """The model provider refused the key, the model or the API (a configuration error; do not retry)."""
    MODEL_RATE_LIMITED = "model_rate_limited"
    """The model provider is rate limiting; RUN_ERROR's ``metadata["ragstream.retryAfter"]`` says
    when to retry (seconds) when the provider said."""
    MODEL_STREAM_CUT = "model_stream_cut"
    """The model's stream ended before the provider's completion marker; nothing was saved."""
    USAGE_LIMIT = "usage_limit"
    """The run reached its request or token limit."""
    KNOWLEDGE_BASE_UNAVAILABLE = "knowledge_base_unavailable"
    """The knowledge base could not be read or written."""
    STORE_UNAVAILABLE = "store_unavailable"
    """The thread could not be saved; it is unchanged."""
    THREAD_CHANGED = "thread_changed"
    """Another change to the thread was saved while the run was going; the run's was not."""
    QUOTA_EXCEEDED = "quota_exceeded"
    """The principal's model tokens for the day ran out during the run; the thread is unchanged."""
    INVALID_REQUEST = "invalid_request"
    """The run's input could not be used (reported by the agent framework)."""
    EVENT_LOG_UNAVAILABLE = "event_log_unavailable"
    """The run's event log (Redis) became unreachable; the run was stopped."""
    WORKER_LOST = "worker_lost"
    """The server process running the run stopped before the run finished."""
    SHUTDOWN = "shutdown"
    """The server shut down while the run was going."""
    WITHHELD = "withheld"
    """A replay of the run's events stopped before an event naming a document the reader may no
    longer read; the run itself is as it was (the thread shows what the reader may see)."""
    INTERNAL_ERROR = "internal_error"
    """Anything else; the message carries a reference to the server's log line."""


_MESSAGES: dict[FailureCode, str] = {
    FailureCode.TIMEOUT: "The run took too long and was stopped.",
    FailureCode.MODEL_UNAVAILABLE: "The language model is unavailable (down or not answering); try again later.",
    FailureCode.MODEL_REFUSED: (
        "The language model provider refused the server's configuration (key, model or API); the"
        " server's log says which setting to change."
    ),
    FailureCode.MODEL_RATE_LIMITED: "The language model provider is rate limiting requests; try again later.",
    FailureCode.MODEL_STREAM_CUT: (
        "The language model's answer was cut off before it finished; nothing was saved. Ask again."
    ),
    FailureCode.USAGE_LIMIT: "The run reached its usage limit.",
    FailureCode.KNOWLEDGE_BASE_UNAVAILABLE: "The knowledge base is unavailable.",
    FailureCode.STORE_UNAVAILABLE: "The conversation could not be saved; it is unchanged.",
    FailureCode.THREAD_CHANGED: (
        "Another change to this conversation was saved while this run was going, so this run's"
        " answer was not saved; load the conversation again."
    ),
    FailureCode.QUOTA_EXCEEDED: "Today's model tokens ran out during this run; the conversation is unchanged.",
    FailureCode.INVALID_REQUEST: "The run's input could not be used.",
    FailureCode.EVENT_LOG_UNAVAILABLE: "The run's event log is unavailable; the run was stopped.",
    FailureCode.WORKER_LOST: "The server running this run stopped before it finished.",
    FailureCode.SHUTDOWN: "The server stopped the run.",
    FailureCode.WITHHELD: (
        "The rest of this run names a document you may no longer read; load the thread again to see"
        " what you may."
    ),
    FailureCode.INTERNAL_ERROR: "The run failed because of an internal error.",
}


class RunFailure(Exception):
    """A failure with its code and a message written for the client (default: the code's message)."""

    def __init__(
        self, code: FailureCode, message: str | None = None, *, retry_after: float | None = None
    ) -> None:
        super().__init__(message or _MESSAGES[code])
        self.code = code
        self.retry_after = retry_after
        """Seconds after which the client may try again, when known (a provider's ``Retry-After``)."""

    @property
    def message(self) -> str:
        return str(self)
