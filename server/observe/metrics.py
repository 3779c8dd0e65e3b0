"""Prometheus metrics, all named ``ragstream_*``, counted per run, tool call, search or job.

The metric objects live in prometheus-client's default registry. With several uvicorn workers
``ragstream serve`` sets ``PROMETHEUS_MULTIPROC_DIR`` (an empty directory) before any worker
starts, so every worker writes its values to files there and ``render`` adds them up: whichever
worker answers ``GET /metrics`` reports the whole server. Gauges count the live processes only
(``livesum``; a worker marks itself dead on shutdown).

Nothing here is per streamed token: the run engine counts a run when it ends, the AG-UI binding
times the first token once per run, the tool capability counts a call when it ends.
"""

from __future__ import annotations

import os
from pathlib import Path

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

__all__ = [
    "ACTIVE_RUNS",
    "ACTIVE_STREAMS",
    "CHUNKS_EMBEDDED",
    "CONTENT_TYPE",
    "INGEST_JOBS",
    "MODEL_TOKENS",
    "MULTIPROC_ENV",
    "REDIS_ERRORS",
    "RUNS",
    "RUN_DURATION",
    "SEARCH_DURATION",
    "STORE_ERRORS",
    "TIME_TO_FIRST_TOKEN",
    "TOOL_CALLS",
    "TOOL_DURATION",
    "mark_process_dead",
    "prepare_multiprocess_dir",
    "registry",
    "render",
]

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = CONTENT_TYPE_LATEST

RUNS = Counter(
    "ragstream_runs",
    "Runs ended, by outcome (finished, error, cancelled, interrupted) and RUN_ERROR code.",
    ["outcome", "code"],
)
RUN_DURATION = Histogram(
    "ragstream_run_duration_seconds",
    "Time from a run's start to its terminal event, by outcome.",
    ["outcome"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
)
TIME_TO_FIRST_TOKEN = Histogram(
    "ragstream_time_to_first_token_seconds",
    "Time from a run's request to its first streamed text token.",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
ACTIVE_STREAMS = Gauge(
    "ragstream_active_streams",
    "Event streams (SSE responses) open to clients.",
    multiprocess_mode="livesum",
)
ACTIVE_RUNS = Gauge("ragstream_active_runs", "Runs executing.", multiprocess_mode="livesum")
TOOL_CALLS = Counter(
    "ragstream_tool_calls",
    "Tool calls ended, by tool and outcome (success, error, retry, deferred, cancelled).",
    ["tool", "outcome"],
)
TOOL_DURATION = Histogram(
    "ragstream_tool_call_duration_seconds",
    "Duration of tool calls, by tool.",
    ["tool"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
SEARCH_DURATION = Histogram(
    "ragstream_search_duration_seconds",
    "Knowledge-base search latency, by mode (hybrid, vector, text).",
    ["mode"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
INGEST_JOBS = Counter(
    "ragstream_ingest_jobs",
    "Ingestion jobs by state reached: queued (submitted), running (an attempt started), done, "
    "failed (an attempt failed; a job is retried once).",
    ["state"],
)
CHUNKS_EMBEDDED = Counter("ragstream_chunks_embedded", "Chunks embedded and written by ingestion jobs.")
MODEL_TOKENS = Counter(
    "ragstream_model_tokens",
    "Language-model tokens by model and type (input, output), from pydantic-ai's usage.",
    ["model", "type"],
)
STORE_ERRORS = Counter(
    "ragstream_thread_store_errors", "Thread-store operations that failed, by operation.", ["operation"]
)
REDIS_ERRORS = Counter(
    "ragstream_redis_errors", "Redis operations of the run engine (locks, event logs, stops) that failed."
)

_registry: CollectorRegistry | None = None


def registry() -> CollectorRegistry:
    """The registry to expose: every worker's values in multiprocess mode, else this process's."""
    global _registry
    if _registry is None:
        if os.environ.get(MULTIPROC_ENV):
            _registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(_registry)
        else:
            _registry = REGISTRY
    return _registry


def render() -> bytes:
    """The metrics in Prometheus's text format."""
    return generate_latest(registry())


def prepare_multiprocess_dir(path: Path) -> None:
    """Make ``path`` a directory without value files (those of an earlier server go) for multiprocess
    mode; files that are not prometheus-client's ``*.db`` are left alone."""
    path.mkdir(parents=True, exist_ok=True)
    for stale in path.glob("*.db"):
        stale.unlink(missing_ok=True)


def mark_process_dead(pid: int | None = None) -> None:
    """In multiprocess mode, drop this process's live gauges (a worker shutting down)."""
    path = os.environ.get(MULTIPROC_ENV)
    if path:
        multiprocess.mark_process_dead(pid if pid is not None else os.getpid(), path)
