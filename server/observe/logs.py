"""Log lines as JSON (``RAGSTREAM_LOG_FORMAT=json``), each carrying who and what it is about.

The ids come from context variables: a request binds its principal (and the thread of its path),
a run binds its thread and run id, and the current OpenTelemetry span gives the trace id when
tracing is on. A task started from there (a run is one) inherits them, so every line a run logs,
in any module, says which run it belongs to. The default format stays plain text.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import re
import time
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Literal

from opentelemetry import trace

__all__ = ["JsonFormatter", "LogFormat", "RedactTokens", "RepeatedLines", "bind", "log_config"]

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


_TOKEN_PARAM = re.compile(r"([?&](?:token|access_token)=)[^&#\s]*", re.IGNORECASE)


class RedactTokens(logging.Filter):
    """Blank the ``token`` of a request path in uvicorn's access lines: the chat page is opened as
    ``/?token=...`` (it moves the token out of the address bar at once), and a bearer token has no
    place in a log file."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(
            isinstance(a, str) and "token=" in a.lower() for a in record.args
        ):
            record.args = tuple(
                _TOKEN_PARAM.sub(r"\1[redacted]", a) if isinstance(a, str) else a for a in record.args
            )
        return True


class RepeatedLines(logging.Filter):
    """Let each line (logger and message template) through once per ``window`` seconds and hold
    back its repeats; the next one let through says how many were held back.

    For loops that log on every retry while a dependency is down (SAQ's upkeep tasks, a pub/sub
    channel resubscribing each second): an outage of an hour is a handful of lines, not thousands
    of tracebacks, and its start is still logged in full at once.
    """

    def __init__(self, window: float = 60.0) -> None:
        super().__init__()
        self.window = window
        self._seen: dict[tuple[str, object], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.msg)
        now = time.monotonic()
        last, held = self._seen.get(key, (-math.inf, 0))
        if now - last < self.window:
            self._seen[key] = (last, held + 1)
            return False
        self._seen[key] = (now, 0)
        if held:
            record.msg = f"{record.msg} (repeated {held} more times in the last {self.window:.0f} s)"
        return True


#: A plain-text line: when, how bad, whose, what (uvicorn's own lines get the time in front too).
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_config(log_format: LogFormat, base: dict[str, Any]) -> dict[str, Any]:
    """uvicorn's ``log_config`` for ``log_format``. ``text``: ``base`` (uvicorn's own) with a
    timestamp in front of each line, and every other logger's lines (ragstream's at INFO, other
    libraries' warnings) on stderr as ``TEXT_FORMAT``. ``json``: every logger's lines go to stderr as
    JSON lines. Either way access lines carry no token (``RedactTokens``)."""
    redact = {"redact_tokens": {"()": f"{__name__}.RedactTokens"}}
    if log_format != "json":
        config = copy.deepcopy(base)
        config["filters"] = {**config.get("filters", {}), **redact}
        config["loggers"].setdefault("uvicorn.access", {})["filters"] = ["redact_tokens"]
        for formatter in config["formatters"].values():
            if "fmt" in formatter and "%(asctime)s" not in formatter["fmt"]:
                formatter["fmt"] = "%(asctime)s " + formatter["fmt"]
        config["formatters"]["ragstream"] = {"format": TEXT_FORMAT}
        config["handlers"]["ragstream"] = {
            "class": "logging.StreamHandler",
            "formatter": "ragstream",
            "stream": "ext://sys.stderr",
        }
        config["root"] = {"handlers": ["ragstream"], "level": "WARNING"}
        config["loggers"]["ragstream"] = {"level": "INFO"}
        return config
    handler = {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": f"{__name__}.JsonFormatter"}},
        "filters": redact,
        "handlers": {"stderr": handler},
        "root": {"handlers": ["stderr"], "level": "WARNING"},
        "loggers": {
            "ragstream": {"level": "INFO"},
            # propagate set again: a process configured with uvicorn's own config before has it off
            "uvicorn": {"level": "INFO", "propagate": True},
            "uvicorn.error": {"level": "INFO", "propagate": True},
            "uvicorn.access": {"level": "INFO", "propagate": True, "filters": ["redact_tokens"]},
        },
    }
