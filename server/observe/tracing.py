"""OpenTelemetry traces: off unless the standard ``OTEL_*`` variables ask for them.

Tracing is on when ``OTEL_TRACES_EXPORTER`` names an exporter (``otlp``, or ``console`` to print
spans) or an OTLP endpoint is set (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``), and ``OTEL_SDK_DISABLED`` is not ``true``. Everything else
(service name, resource attributes, sampler, batch sizes, headers, timeouts) is read by the
OpenTelemetry SDK itself from its own variables. Spans go out over OTLP/HTTP (protobuf).

The provider is configured once per process (each uvicorn worker configures its own) and set as
the global one, so libraries that trace through the OpenTelemetry API (pydantic-ai, the ASGI
instrumentation) reach it. With tracing off nothing is configured: ``enabled()`` is false and the
callers add no middleware, capability or span at all.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace

from rag_tools.extras import extra_imports

__all__ = [
    "TRACER_NAME",
    "configure_tracing",
    "current_trace_id",
    "enabled",
    "end_run",
    "span",
    "tracer",
    "tracing_problem",
    "tracing_requested",
]

TRACER_NAME = "ragstream"
_EXPORTERS = ("otlp", "console")
_provider: Any = None


def _flag(env: Mapping[str, str], name: str) -> str:
    return env.get(name, "").strip().lower()


def tracing_requested(env: Mapping[str, str] | None = None) -> bool:
    """Whether the ``OTEL_*`` variables ask for traces (see the module's docstring)."""
    env = os.environ if env is None else env
    if _flag(env, "OTEL_SDK_DISABLED") == "true":
        return False
    exporter = _flag(env, "OTEL_TRACES_EXPORTER")
    if exporter:
        return exporter != "none"
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def tracing_problem(env: Mapping[str, str] | None = None) -> str | None:
    """Why the requested tracing cannot be set up, in one line; ``None`` when it can (or is off)."""
    env = os.environ if env is None else env
    if not tracing_requested(env):
        return None
    exporter = _flag(env, "OTEL_TRACES_EXPORTER") or "otlp"
    if exporter not in _EXPORTERS:
        return (
            f"OTEL_TRACES_EXPORTER={exporter!r} is not supported; use otlp (OTLP over HTTP), console or none"
        )
    protocol = _flag(env, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or _flag(env, "OTEL_EXPORTER_OTLP_PROTOCOL")
    if exporter == "otlp" and protocol not in ("", "http/protobuf"):
        return f"OTLP protocol {protocol!r} is not supported; ragstream sends traces as http/protobuf"
    return None


def configure_tracing(env: Mapping[str, str] | None = None) -> bool:
    """Set up this process's tracer provider if the environment asks for traces; returns ``enabled()``.

    Idempotent: the first call that finds tracing requested configures the provider, later calls
    keep it.
    """
    global _provider
    env = os.environ if env is None else env
    if _provider is not None or not tracing_requested(env):
        return _provider is not None
    with extra_imports("otel"):
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

    named = "OTEL_SERVICE_NAME" in env or "service.name=" in env.get("OTEL_RESOURCE_ATTRIBUTES", "")
    provider = TracerProvider(resource=Resource.create({} if named else {SERVICE_NAME: TRACER_NAME}))
    exporter: SpanExporter
    if (_flag(env, "OTEL_TRACES_EXPORTER") or "otlp") == "console":
        exporter = ConsoleSpanExporter()
    else:
        with extra_imports("otel"):
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    _provider = provider
    return True


def enabled() -> bool:
    """Whether this process sends traces."""
    return _provider is not None


def tracer() -> trace.Tracer:
    """ragstream's tracer (the global provider's)."""
    return trace.get_tracer(TRACER_NAME)


@contextmanager
def span(name: str, **attributes: Any) -> Iterator[trace.Span | None]:
    """A span named ``name`` around the block when tracing is on; nothing otherwise.

    Exceptions are recorded on the span (status ERROR) and propagate unchanged.
    """
    if _provider is None:
        yield None
        return
    with tracer().start_as_current_span(
        name, attributes={k: v for k, v in attributes.items() if v is not None}
    ) as current:
        yield current


def end_run(outcome: str, code: str | None) -> None:
    """Record how a run ended on the current (run) span; an error outcome marks the span failed."""
    current = trace.get_current_span()
    current.set_attribute("ragstream.run.outcome", outcome)
    if code:
        current.set_attribute("ragstream.run.error_code", code)
    if outcome == "error":
        current.set_status(trace.StatusCode.ERROR, code or None)


def current_trace_id() -> str | None:
    """The current trace's id as 32 hex digits, or ``None`` outside a recorded trace."""
    if _provider is None:
        return None
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None
