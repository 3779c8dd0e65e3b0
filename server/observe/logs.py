"""Log lines as JSON (``RAGSTREAM_LOG_FORMAT=json``), each carrying who and what it is about.

The ids come from context variables: a request binds its principal (and the thread of its path),
a run binds its thread and run id, and the current OpenTelemetry span gives the trace id when
tracing is on. A task started from there (a run is one) inherits them, so every line a run logs,
in any module, says which run it belongs to. The default format stays plain text.
"""

from __future__ import annotations

import json
import logging
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Literal

from opentelemetry import trace

__all__ = ["JsonFormatter", "LogFormat", "bind", "log_config"]

LogFormat = Literal["text", "json"]

_principal: ContextVar[str | None] = ContextVar("ragstream_principal", default=None)
_thread: ContextVar[str | None] = ContextVar("ragstream_thread", default=None)
_run: ContextVar[str | None] = ContextVar("ragstream_run", default=None)


def bind(*, principal: str | None = None, thread: str | None = None, run: str | None = None) -> None:
    """Attach ids to the current context (a request's or a run's); ``None`` keeps what is there."""
    if principal is not None:
        _principal.set(principal)
    if thread is not None:
        _thread.set(thread)
    if run is not None:
        _run.set(run)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time``, ``level``, ``logger``, ``message``, then ``principal``,
    ``thread``, ``run``, ``trace_id`` and ``span_id`` where known, and ``exception`` with its
    traceback when the record has one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, var in (("principal", _principal), ("thread", _thread), ("run", _run)):
            value = var.get()
            if value is not None:
                line[key] = value
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            line["trace_id"] = format(context.trace_id, "032x")
            line["span_id"] = format(context.span_id, "016x")
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        return json.dumps(line, ensure_ascii=False, default=str)


def log_config(log_format: LogFormat) -> dict[str, Any] | None:
    """uvicorn's ``log_config`` for ``log_format``: ``None`` keeps uvicorn's own (plain text); ``json``
    sends every logger's lines (ragstream's at INFO, uvicorn's, other libraries' warnings) to
    stderr as JSON lines."""
    if log_format != "json":
        return None
    handler = {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": f"{__name__}.JsonFormatter"}},
        "handlers": {"stderr": handler},
        "root": {"handlers": ["stderr"], "level": "WARNING"},
        "loggers": {
            "ragstream": {"level": "INFO"},
            "uvicorn": {"level": "INFO"},
            "uvicorn.error": {"level": "INFO"},
            "uvicorn.access": {"level": "INFO"},
        },
    }
