"""User tools for the seed-feature tests (tests/test_tool_results.py): a streaming tool, a locked
tool, ``ToolResult`` with an attachment and as an error, ``race`` and ``ask`` (answered after a
re-run, and live: ``book_trip`` logs each start of the tool when ``SEED_TOOLS_LOG`` is set).

The locked tool appends ``{"label", "pid", "enter", "exit"}`` lines to the file named by
``SEED_TOOLS_LOG`` (so the test can check calls never overlapped, across processes too), and the
raced fetch a ``{"cleanup": call id}`` line when it ends.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pydantic_ai import RunContext

from rag_tools.tools import ToolAttachment, ToolResult, ask, race, tool_options


def log(record: dict[str, Any]) -> None:
    with Path(os.environ["SEED_TOOLS_LOG"]).open("a") as file:
        file.write(json.dumps(record) + "\n")


async def count_up(to: int, delay: float = 0.02) -> AsyncIterator[dict[str, int]]:
    """Count from 1 to ``to``, reporting each step.

    Args:
        to: The last number.
        delay: Seconds before each step.
    """
    for n in range(1, to + 1):
        await asyncio.sleep(delay)
        yield {"step": n, "of": to}


async def count_and_sum(to: int) -> AsyncIterator[Any]:
    """Count from 1 to ``to``, then give the sum as the result.

    Args:
        to: The last number.
    """
    for n in range(1, to + 1):
        yield n
    yield ToolResult(f"sum={to * (to + 1) // 2}", title="Sum")


@tool_options(lock=True)
async def exclusive_step(label: str) -> str:
    """A step that must never run twice at once.

    Args:
        label: Which caller this is.
    """
    enter = time.time()
    await asyncio.sleep(0.3)
    log({"label": label, "pid": os.getpid(), "enter": enter, "exit": time.time()})
    return f"done {label}"


def make_report(rows: int) -> ToolResult:
    """A CSV report of ``rows`` rows.

    Args:
        rows: How many rows.
    """
    csv = "n,square\n" + "".join(f"{n},{n * n}\n" for n in range(rows))
    return ToolResult(
        f"report with {rows} rows",
        title="Squares",
        metadata={"rows": rows},
        attachments=[ToolAttachment("squares.csv", csv, "text/csv")],
    )


def broken_lookup(key: str) -> ToolResult:
    """Look ``key`` up in a store that is down.

    Args:
        key: What to look up.
    """
    return ToolResult(f"the store is down, {key!r} not found", title="Lookup failed", is_error=True)


def long_answer(size: int) -> ToolResult:
    """A long answer.

    Args:
        size: Characters.
    """
    return ToolResult("x" * size, title="Long")


async def slow_fetch(ctx: RunContext[Any], seconds: float, timeout: float) -> str:
    """Fetch something that takes ``seconds``, giving up after ``timeout``.

    Args:
        seconds: How long the fetch takes.
        timeout: How long to wait for it.
    """

    async def fetch() -> str:
        try:
            await asyncio.sleep(seconds)
            return "fetched"
        finally:
            log({"cleanup": ctx.tool_call_id})

    return await race(ctx, fetch(), timeout)


async def pick_year(ctx: RunContext[Any], topic: str) -> str:
    """Ask the user which year they mean.

    Args:
        topic: What the year is for.
    """
    year = await ask(ctx, f"Which year for {topic}?")
    return f"{topic} in {year}"


async def book_trip(ctx: RunContext[Any], city: str, timeout: float | None = None) -> str:
    """Book a trip, asking the user for the date.

    Args:
        city: Where to.
        timeout: Seconds to wait for the answer (the server's default when not given).
    """
    if "SEED_TOOLS_LOG" in os.environ:
        log({"book_trip": ctx.tool_call_id})  # once per start of the tool
    when = await ask(ctx, f"When do you travel to {city}?", timeout=timeout)
    return f"{city} booked for {when}"


TOOLS = [
    book_trip,
    count_up,
    count_and_sum,
    exclusive_step,
    make_report,
    broken_lookup,
    long_answer,
    slow_fetch,
    pick_year,
]
