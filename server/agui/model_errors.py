"""A model provider's failure as a run failure: which code, what the client reads, what the log says.

Four kinds, each its own RUN_ERROR code (``server.runs.failures``):

- ``model_refused``: the provider refused the key (401, 403), the model or the API (404), the
  account's quota, or the request itself: a configuration error that retrying does not fix. The
  log line names the API that was tried, the URL and the setting to change; a 404 on the Responses
  API says that a Chat Completions-only server (Ollama, vLLM, llama.cpp, LM Studio) needs
  ``openai-chat:``;
- ``model_rate_limited``: 429, with the provider's ``Retry-After`` passed on to the client
  (``RunFailure.retry_after``, RUN_ERROR ``metadata["ragstream.retryAfter"]``);
- ``model_unavailable``: the provider down, failing (5xx) or not answering in time, once the
  retries (``rag_tools.models.ModelGuard``) are spent;
- ``model_stream_cut``: the stream ended without the provider's completion marker.
"""

from __future__ import annotations

import logging
import math

from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelAuthenticationError,
    ModelHTTPError,
    ModelNotFoundError,
    ModelQuotaExceededError,
    ModelRateLimitError,
    ModelRequestRejectedError,
)

from rag_tools.models import ModelStreamCut

from ..runs import FailureCode, RunFailure

__all__ = ["model_failure", "request_url"]

logger = logging.getLogger("ragstream.runs")

_API_BY_PATH = {
    "/chat/completions": "OpenAI Chat Completions",
    "/responses": "OpenAI Responses",
    "/messages": "Anthropic Messages",
}


def request_url(error: BaseException) -> str | None:
    """The URL of the request the provider's SDK sent, when its exception carries it."""
    cause = error.__cause__
    request = getattr(cause, "request", None) or getattr(getattr(cause, "response", None), "request", None)
    url = getattr(request, "url", None)
    return str(url) if url is not None else None


def _api(url: str | None, model_name: str) -> str:
    for path, api in _API_BY_PATH.items():
        if url and url.split("?")[0].endswith(path):
            return api
    return f"the API of {model_name!r}"


def _setting(api: str, status: int | None) -> str:
    if status in (401, 403):
        if api.startswith("Anthropic"):
            return "set ANTHROPIC_API_KEY to a key the provider accepts"
        if api.startswith("OpenAI"):
            return "set OPENAI_API_KEY (or the provider's own key variable) to a key the provider accepts"
        return "check the provider's key variable"
    if api == "OpenAI Responses":
        return (
            "a server that speaks only Chat Completions (Ollama, vLLM, llama.cpp, LM Studio, most hosted"
            " OpenAI-compatible APIs) needs RAGSTREAM_MODEL=openai-chat:<model>; otherwise check the model"
            " name and OPENAI_BASE_URL"
        )
    if api == "OpenAI Chat Completions":
        return "check the model name in RAGSTREAM_MODEL and the base URL (OPENAI_BASE_URL, ending in /v1)"
    if api == "Anthropic Messages":
        return "check the model name in RAGSTREAM_MODEL and ANTHROPIC_BASE_URL"
    return "check RAGSTREAM_MODEL and the provider's base URL (docs/models.md)"


def model_failure(error: BaseException) -> RunFailure | None:
    """The run failure for a model provider's ``error``, logged here; ``None`` when it is not one."""
    if isinstance(error, ModelStreamCut):
        logger.warning("model stream cut: %s", error)
        return RunFailure(FailureCode.MODEL_STREAM_CUT)
    if not isinstance(error, ModelAPIError):
        return None
    status = error.status_code if isinstance(error, ModelHTTPError) else None
    if isinstance(error, ModelRateLimitError):
        wait = error.retry_after
        logger.warning(
            "model %s is rate limited (HTTP %s)%s",
            error.model_name,
            status or 429,
            f"; the provider asks to wait {wait:g} s" if wait is not None else "",
        )
        seconds = None if wait is None else max(1, math.ceil(wait))
        message = "The language model provider is rate limiting requests; try again"
        message += f" in {seconds} s." if seconds is not None else " later."
        return RunFailure(FailureCode.MODEL_RATE_LIMITED, message, retry_after=seconds)
    refused = (
        ModelAuthenticationError,
        ModelNotFoundError,
        ModelQuotaExceededError,
        ModelRequestRejectedError,
    )
    if isinstance(error, refused):
        url = request_url(error)
        api = _api(url, error.model_name)
        what = {401: "the key", 403: "the key", 404: "the model or the API"}.get(status or 0, "the request")
        if isinstance(error, ModelQuotaExceededError):
            what = "the account (quota or billing)"
        logger.error(
            "model provider refused %s: %s answered %s for %s at %s; %s",
            what,
            error.model_name,
            status or type(error).__name__,
            api,
            url or "(URL unknown)",
            _setting(api, status),
        )
        message = (
            f"The language model provider refused {what} (HTTP {status}, {api}); the server's"
            " configuration needs changing: its log names the setting."
            if status
            else None
        )
        return RunFailure(FailureCode.MODEL_REFUSED, message)
    logger.warning("model request failed: %r", error)
    return RunFailure(FailureCode.MODEL_UNAVAILABLE)
