"""Chat models as providers serve them: request settings, bounded retries, and complete streams.

``ModelGuard`` is the pydantic-ai capability every run of the chat agent gets (and every model call
a tool makes inside one, ``model_run_options``). For a provider's model (not the offline extractive
model or a test's ``FunctionModel``) it:

- sends ``max_tokens``, ``temperature``, ``thinking`` and a per-attempt ``timeout`` from ``RagConfig``, turns
  the provider SDK's own silent retries off (``max_retries=0``) and provider-side storage of the
  conversation off where the API keeps it (the Responses API stores responses unless told not to:
  ``openai_store=False``);
- retries a request the provider refused for a reason that passes (429, 5xx, a connection that
  could not be made) at most ``model_retries`` times, waiting ``model_retry_backoff`` seconds
  doubled each time, or the provider's ``Retry-After`` when it says so; each retry is a log line.
  A ``Retry-After`` longer than ``MAX_RETRY_WAIT`` is not waited for: the run fails at once with
  the provider's wait for the client to honour. Nothing is retried once the stream has started;
- refuses a response whose stream ended without the provider's completion marker
  (``ModelStreamCut``): Chat Completions' ``finish_reason`` (pydantic-ai fills in ``stop`` for a
  stream that just ends; what the provider sent is in ``provider_details``), the Responses API's
  ``response.completed``, Anthropic's ``message_delta`` stop reason. The run fails, so nothing of
  the fragment is saved.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelConnectionError,
    ModelHTTPError,
    ModelRateLimitError,
    ModelServerError,
    ModelUnavailableError,
    RetryModelRequest,
)
from pydantic_ai.messages import ModelResponse
from pydantic_ai.models import Model, ModelRequestContext
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.settings import ModelSettings

__all__ = [
    "MAX_RETRY_WAIT",
    "ModelGuard",
    "ModelStreamCut",
    "api_of",
    "is_provider_model",
    "model_run_options",
]

logger = logging.getLogger("ragstream.models")

#: Longest ``Retry-After`` (seconds) a run waits out itself; a longer one fails the run with it.
MAX_RETRY_WAIT = 30.0


class ModelStreamCut(Exception):
    """The model's stream ended without the provider's completion marker: the answer is incomplete."""

    def __init__(self, model_name: str, api: str) -> None:
        super().__init__(f"the {api} stream of {model_name!r} ended without its completion marker")
        self.model_name = model_name
        self.api = api


def is_provider_model(model: object) -> bool:
    """Whether ``model`` is a provider's (not the offline extractive model or a test model)."""
    return isinstance(model, Model) and not isinstance(model, FunctionModel | TestModel)


def api_of(model: object) -> str:
    """The name of the wire API ``model`` speaks, as providers document it."""
    names = {
        "OpenAIChatModel": "OpenAI Chat Completions",
        "OpenAIResponsesModel": "OpenAI Responses",
        "AnthropicModel": "Anthropic Messages",
        "GoogleModel": "Gemini generateContent",
        "BedrockConverseModel": "Bedrock Converse",
    }
    for kind in type(model).__mro__:
        if kind.__name__ in names:
            return names[kind.__name__]
    return type(model).__name__


def _complete(model: Model, response: ModelResponse) -> bool:
    if response.finish_reason is None:
        return False
    if api_of(model) == "OpenAI Chat Completions":  # pydantic-ai filled in a missing finish_reason
        return "finish_reason" in (response.provider_details or {})
    return True


def _retryable(error: Exception) -> bool:
    """Whether sending the request again may succeed: rate limits, a provider down or failing, a
    connection that was never made. Not once a stream started, not a refused key or model."""
    if isinstance(error, ModelAPIError) and error.in_stream:
        return False
    if isinstance(error, ModelConnectionError):
        return error.phase in ("pool", "connect")
    if isinstance(error, ModelRateLimitError | ModelUnavailableError | ModelServerError):
        return True
    return isinstance(error, ModelHTTPError) and error.status_code in (408, 409)


@dataclass
class ModelGuard(AbstractCapability[Any]):
    """Settings, bounded retries with backoff, and the completion check of a provider's model."""

    max_tokens: int | None = 4096
    temperature: float | None = None
    timeout: float | None = 60.0
    retries: int = 2
    backoff: float = 1.0
    thinking: bool | str | None = None
    _settings: ModelSettings = field(init=False, repr=False)

    def __post_init__(self) -> None:
        settings: ModelSettings = {"max_retries": 0, "openai_store": False}  # type: ignore[typeddict-unknown-key]
        if self.max_tokens is not None:
            settings["max_tokens"] = self.max_tokens
        if self.temperature is not None:
            settings["temperature"] = self.temperature
        if self.timeout is not None:
            settings["timeout"] = self.timeout
        if self.thinking is not None:
            settings["thinking"] = self.thinking  # type: ignore[typeddict-item]
        self._settings = settings

    @classmethod
    def from_config(cls, config: Any) -> ModelGuard:
        """The guard ``config`` (a ``RagConfig``) describes."""
        return cls(
            max_tokens=config.model_max_tokens,
            temperature=config.model_temperature,
            timeout=config.model_timeout,
            retries=config.model_retries,
            backoff=config.model_retry_backoff,
            thinking=config.model_thinking,
        )

    def get_model_settings(self) -> Any:
        def settings(ctx: RunContext[Any]) -> ModelSettings:
            return dict(self._settings) if is_provider_model(ctx.model) else {}  # type: ignore[return-value]

        return settings

    async def on_model_request_error(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, error: Exception
    ) -> ModelResponse:
        attempt = request_context.attempt
        if not _retryable(error) or attempt > self.retries:
            raise error
        wait = self.backoff * 2 ** (attempt - 1)
        asked = getattr(error, "retry_after", None)
        if asked is not None:
            if asked > MAX_RETRY_WAIT:
                raise error  # the client is told to come back then (``Retry-After``)
            wait = max(wait, asked)
        logger.warning(
            "model request failed (%s); retry %d of %d in %.1f s", _short(error), attempt, self.retries, wait
        )
        await asyncio.sleep(wait)
        raise RetryModelRequest()

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
    ) -> ModelResponse:
        model = request_context.model
        if is_provider_model(model) and not _complete(model, response):
            raise ModelStreamCut(response.model_name or model.model_name, api_of(model))
        return response


def _short(error: Exception) -> str:
    if isinstance(error, ModelHTTPError):
        return f"HTTP {error.status_code}"
    return type(error).__name__


def model_run_options(deps: Any, ctx: RunContext[Any] | None = None) -> dict[str, Any]:
    """Keyword arguments for ``Agent.run`` of a model call a tool makes inside a run.

    The call counts in the run: its usage is the run's (``usage=ctx.usage``, so it counts against the
    run's usage limit too, ``usage_limits=ctx.usage_limits``), and it gets the capabilities the run
    gives such calls (``deps.model_capabilities``: the ``ModelGuard``, and in the server the token
    metrics, the traces and the principal's daily budget; deps that carry none but a ``config`` get
    that configuration's guard).
    """
    options: dict[str, Any] = {}
    capabilities: Sequence[AbstractCapability[Any]] = getattr(deps, "model_capabilities", ()) or ()
    config = getattr(deps, "config", None)
    if not capabilities and config is not None and hasattr(config, "model_retries"):
        capabilities = (ModelGuard.from_config(config),)  # a library user's deps: the guard alone
    if capabilities:
        options["capabilities"] = list(capabilities)
    if ctx is not None:
        options["usage"] = ctx.usage
        if ctx.usage_limits is not None:
            options["usage_limits"] = ctx.usage_limits
    return options
