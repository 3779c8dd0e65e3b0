"""The pydantic-ai capabilities that report a run: its spans and its tool and token metrics.

``run_capabilities`` gives what a run needs for what is on: pydantic-ai's own ``Instrumentation``
(spans for the agent run, every model request and every tool call, in the OpenTelemetry GenAI
conventions) when tracing is on, and, when metrics are on, hook functions counting tool calls (by
tool and outcome, with their duration) and model tokens (by model, from each response's usage).
Neither is given to a run otherwise, so with both off a run is exactly what it was.

The metric hooks join the tool system's ``Hooks`` (``ToolSystem.capability()``) rather than forming
a capability of their own: every capability costs a run pydantic-ai's per-capability work on each
hook point and one more wrapper around its event stream (about 1,300 Python calls of a short run,
``bench/run_start.py``), for two small functions. Added after the tool system's own, the tool-call
counter sits inside its hook chain, where a separate capability listed after it sat too.

Prompts, completions and tool arguments stay out of spans unless
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` (the OpenTelemetry GenAI variable):
they carry what users asked and what the documents say.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability, Hooks, Instrumentation
from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, ModelRetry, ToolRetryError
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.tools import ToolDefinition

from ..observe import metrics, tracing

__all__ = ["CAPTURE_CONTENT_ENV", "model_call_capabilities", "run_capabilities"]

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


def _outcome(error: BaseException) -> str:
    if isinstance(error, asyncio.CancelledError):
        return "cancelled"
    if isinstance(error, ModelRetry | ToolRetryError):
        return "retry"
    if isinstance(error, ApprovalRequired | CallDeferred):
        return "deferred"
    return "error"


async def _count_tool_call(
    ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition, args: dict[str, Any], handler: Any
) -> Any:
    started = time.perf_counter()
    outcome = "success"
    try:
        return await handler(args)
    except BaseException as exc:
        outcome = _outcome(exc)
        raise
    finally:
        metrics.TOOL_CALLS.labels(tool_def.name, outcome).inc()
        metrics.TOOL_DURATION.labels(tool_def.name).observe(time.perf_counter() - started)


async def _count_tokens(
    ctx: RunContext[Any], *, request_context: Any, response: ModelResponse
) -> ModelResponse:
    usage = response.usage
    model = response.model_name or getattr(ctx.model, "model_name", None) or "unknown"
    if usage.input_tokens:
        metrics.MODEL_TOKENS.labels(model, "input").inc(usage.input_tokens)
    if usage.output_tokens:
        metrics.MODEL_TOKENS.labels(model, "output").inc(usage.output_tokens)
    return response


def run_capabilities(tool_hooks: Hooks[Any], *, count_metrics: bool) -> list[AbstractCapability[Any]]:
    """The capabilities a run gets: ``tool_hooks`` (the tool system's), with the metric hooks added
    to it when metrics are on, and pydantic-ai's instrumentation when tracing is on."""
    found: list[AbstractCapability[Any]] = [tool_hooks]
    if count_metrics:
        tool_hooks.on.tool_execute(_count_tool_call)
        tool_hooks.on.after_model_request(_count_tokens)
    if tracing.enabled():
        found.append(_instrumentation())
    return found


def _instrumentation() -> Instrumentation[Any]:
    capture = os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() == "true"
    return Instrumentation(
        settings=InstrumentationSettings(include_content=capture, include_binary_content=capture)
    )


def model_call_capabilities(*, count_metrics: bool) -> list[AbstractCapability[Any]]:
    """What a model call made inside a tool gets (``rag_tools.models.model_run_options``): the token
    counter when metrics are on, and its own agent span (under the tool's) when tracing is on."""
    found: list[AbstractCapability[Any]] = []
    if count_metrics:
        hooks: Hooks[Any] = Hooks()
        hooks.on.after_model_request(_count_tokens)
        found.append(hooks)
    if tracing.enabled():
        found.append(_instrumentation())
    return found
