"""Where a run's start goes: ragstream against the bare adapter, in-process, segment by segment.

    python -m bench.run_start [--trials 300] [--profile]

Three apps of ``bench/stream_servers.py`` (ragstream as served, pydantic-ai's
``AGUIAdapter.dispatch_request`` in a plain route, and that adapter's events sent through the
sse-starlette response ragstream uses) are called as ASGI apps in this process, with no sockets, on the same short run (one tool call, three tokens). Each trial times, from the request,
when the response's first ``RUN_STARTED`` frame and first text token are handed to ``send``, and
counts the Python calls made up to each point (``sys.setprofile``): calls do not depend on what
else the machine is doing, so they say where the work is even when the times are noisy. Trials
alternate between the apps. ``--per-event`` counts the calls per streamed token on one long
run of each (what a feature costs per event, which wall-clock events/s cannot resolve below a few
per cent on these machines). ``--profile`` prints, for ragstream, the functions that take the
most calls before ``RUN_STARTED`` and between it and the first token (cProfile, cumulative).

This is the instrument of issue 29.4; ``bench/stream.py`` gives the figures over HTTP.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import pstats
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._util import median, table

COUNTED = 7
Send = Callable[[dict[str, Any]], Any]


@dataclass
class Marks:
    """The times (s from the request) of RUN_STARTED and of the first token."""

    run_started: float = 0.0
    first_token: float = 0.0


_PACKAGES = (
    "server",
    "rag_tools",
    "pydantic_ai",
    "pydantic",
    "ag_ui",
    "starlette",
    "sse_starlette",
    "anyio",
    "asyncio",
    "opentelemetry",
    "prometheus_client",
)


def _package(frame: Any) -> str:
    name = frame.f_globals.get("__name__", "") or ""
    top = name.split(".", 1)[0]
    return top if top in _PACKAGES else "other"


class _CallCounter:
    """Counts Python calls (and C calls) made, in all and by the package of the calling code."""

    def __init__(self) -> None:
        self.calls = 0
        self.by_package: Counter[str] = Counter()
        self.marks: list[Counter[str]] = []

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call" or event == "c_call":
            self.calls += 1
            self.by_package[_package(frame)] += 1

    def mark(self) -> None:
        self.marks.append(Counter(self.by_package))


def _body(trial: str, tokens: int = 3) -> bytes:
    return json.dumps(
        {
            "threadId": f"t-{trial}",
            "runId": f"r-{trial}",
            "state": {},
            "tools": [],
            "context": [],
            "forwardedProps": {},
            "messages": [{"id": f"u-{trial}", "role": "user", "content": f"{tokens} 0"}],
        }
    ).encode()


async def _one(
    app: Any,
    trial: str,
    *,
    counter: _CallCounter | None = None,
    profile: list[cProfile.Profile] | None = None,
    tokens: int = 3,
) -> Marks:
    body = _body(trial, tokens)
    marks = Marks()
    done = asyncio.Event()
    received = False
    started = time.perf_counter()

    async def receive() -> dict[str, Any]:
        nonlocal received
        if not received:
            received = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] != "http.response.body":
            return
        chunk = message.get("body", b"")
        now = time.perf_counter() - started
        if not marks.run_started and b'"RUN_STARTED"' in chunk:
            marks.run_started = now
            if counter is not None:
                counter.mark()
            if profile:
                profile[0].disable()
                profile[1].enable()
        if not marks.first_token and b'"TEXT_MESSAGE_CONTENT"' in chunk:
            marks.first_token = now
            if counter is not None:
                counter.mark()
            if profile:
                profile[1].disable()
        if b'"RUN_FINISHED"' in chunk or not message.get("more_body", False):
            if counter is not None and not done.is_set():
                counter.mark()
            done.set()

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/agui",
        "raw_path": b"/agui",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"accept", b"text/event-stream"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    if counter is not None:
        sys.setprofile(counter)
    if profile:
        profile[0].enable()
    try:
        await app(scope, receive, send)
    finally:
        sys.setprofile(None)
    return marks


def _segment(counter: _CallCounter, index: int) -> Counter[str]:
    """The calls by package in segment ``index``: to RUN_STARTED (0), from it to the first token (1)."""
    if index == 0:
        return counter.marks[0]
    return counter.marks[1] - counter.marks[0]


async def _lifespan(app: Any) -> Callable[[], Any]:
    """Run the app's lifespan startup; returns a coroutine function that shuts it down."""
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    started = asyncio.Event()
    await queue.put({"type": "lifespan.startup"})

    async def receive() -> dict[str, Any]:
        return await queue.get()

    async def send(message: dict[str, Any]) -> None:
        if message["type"].startswith("lifespan.startup"):
            started.set()

    task = asyncio.create_task(
        app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send)
    )
    await started.wait()

    async def stop() -> None:
        await queue.put({"type": "lifespan.shutdown"})
        await task

    return stop


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--per-event",
        type=int,
        default=2000,
        metavar="TOKENS",
        help="also count the calls per streamed token on one run of TOKENS tokens (0: skip)",
    )
    args = parser.parse_args()

    from .stream_servers import bare_app, bare_sse_app, ragstream_app

    data = Path(tempfile.mkdtemp(prefix="ragstream-bench-start-"))
    apps = {
        "bare": bare_app(data / "bare"),
        "bare-sse": bare_sse_app(data / "bare-sse"),
        "ragstream": ragstream_app(data / "ragstream"),
    }
    stops = [await _lifespan(app) for app in apps.values()]
    for name, app in apps.items():  # warm up: imports, schemas, caches
        for i in range(20):
            await _one(app, f"warm-{name}-{i}")
    times: dict[str, list[Marks]] = {name: [] for name in apps}
    counters: dict[str, list[_CallCounter]] = {name: [] for name in apps}
    for i in range(COUNTED):
        for name, app in apps.items():
            counter = _CallCounter()
            await _one(app, f"count-{name}-{i}", counter=counter)
            counters[name].append(counter)
    for trial in range(args.trials):
        for name, app in apps.items():
            times[name].append(await _one(app, f"{name}-{trial}"))
    rows = []
    for label, attr in (("ms to RUN_STARTED", "run_started"), ("ms to first token", "first_token")):
        bare, sse, ours = (median([getattr(m, attr) for m in times[n]]) * 1000 for n in apps)
        rows.append([label + " (median)", bare, sse, ours, f"{bare / ours:.2f}x", f"{sse / ours:.2f}x"])
    for label, index in (("calls to RUN_STARTED", 0), ("calls to first token", 1)):
        bare, sse, ours = (median([sum(c.marks[index].values()) for c in counters[n]]) for n in apps)
        rows.append(
            [label + f" (median of {COUNTED})", bare, sse, ours, f"{bare / ours:.2f}x", f"{sse / ours:.2f}x"]
        )
    print(
        table(
            [
                "in-process, per run",
                "bare adapter",
                "bare adapter, sse-starlette",
                "ragstream",
                "ragstream vs bare",
                "ragstream vs bare on sse-starlette",
            ],
            rows,
        )
    )
    print("\nCalls by the package of the calling code (median of the counted runs):\n")
    rows = []
    for package in (*_PACKAGES, "other"):
        row: list[object] = [package]
        for index in (0, 1):
            for name in apps:
                row.append(median([_segment(c, index)[package] for c in counters[name]]))
        rows.append(row)
    print(
        table(
            [
                "package",
                "to RUN_STARTED: bare",
                "bare-sse",
                "ragstream",
                "RUN_STARTED to token: bare",
                "bare-sse",
                "ragstream",
            ],
            rows,
        )
    )
    if args.per_event:
        rows = []
        for name, app in apps.items():
            counter = _CallCounter()
            await _one(app, f"per-event-{name}", counter=counter, tokens=args.per_event)
            streamed = sum(counter.marks[2].values()) - sum(counter.marks[1].values())
            rows.append([name, f"{streamed / args.per_event:.1f}"])
        print(
            f"\nPython calls per streamed token, first token to RUN_FINISHED ({args.per_event:,} tokens):\n"
        )
        print(table(["app", "calls per token"], rows))
    if args.profile:
        profiles = [cProfile.Profile(), cProfile.Profile()]
        await _one(apps["ragstream"], "profiled", profile=profiles)
        for title, profile in zip(
            ("request to RUN_STARTED", "RUN_STARTED to first token"), profiles, strict=True
        ):
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(40)
            print(f"\n## ragstream, {title}\n{out.getvalue()}")
    for stop in stops:
        await stop()


if __name__ == "__main__":
    asyncio.run(main())
