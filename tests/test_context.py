"""A bounded context (issue 46): what a provider's model is sent of a long thread's earlier turns.

The server runs against the loopback Chat Completions server (``tests/wire_models.py``); what the
model receives is read from the requests it got, what the thread keeps from ``GET /threads``.
"""

from __future__ import annotations

from typing import Any

import pytest

from rag_tools.context import shape_history
from tests.test_models_wire import ask, ragstream
from tests.wire_models import Call, Reply, Text, WireModel, WireRequest

QUESTIONS = [
    "How long are nightly backups kept?",
    "Who is on call for incidents?",
    "What does the advanced audit log add-on cost?",
    "How are production database changes approved?",
    "Which version of Python do I need?",
    "How often are access reviews done?",
]


def cite_first(request: WireRequest) -> Reply:
    if not request.ends_with_tool_result:
        return [Call("search", {"query": request.user_texts[-1]})]
    return [Text("The documents say so [1].")]


async def test_earlier_turns_are_sent_as_references_and_the_thread_keeps_them_whole(
    scenario_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    wire = WireModel(cite_first)
    async with ragstream(wire, "chat", scenario_config, monkeypatch) as (http, _):
        for n, question in enumerate(QUESTIONS, 1):
            events = await ask(http, "long", f"r{n}", question)
            assert events[-1]["type"] == "RUN_FINISHED", events[-1]
        thread = (await http.get("/threads/long")).json()

    first_results = wire.requests[1].tool_results[0]  # turn 1's passages, as the model first read them
    last = wire.requests[-1]  # turn 6's answer request
    assert last.user_texts[-1] == QUESTIONS[-1]
    history = [r for r in last.tool_results[:-1]]
    assert history, "no earlier turn was sent"
    assert all("Earlier search for" in r and "call search again" in r for r in history)
    assert all(len(r) < 1_000 for r in history)  # a few hundred characters, not the passages
    assert last.tool_results[-1].startswith("{")  # the current turn's results are whole
    assert len(first_results) > 3_000
    # turn 1 is out of the budget by turn 6; what is sent does not grow with the thread
    assert QUESTIONS[0] not in last.user_texts
    sizes = [r.size for r in wire.requests[1::2]]
    assert max(sizes[1:]) < 1.5 * sizes[0]
    # the thread keeps every turn's results whole
    kept = [m for m in thread["messages"] if m["role"] == "tool"]
    assert len(kept) == len(QUESTIONS) and all(len(m["content"]) > 1_000 for m in kept)


async def test_without_a_history_budget_every_earlier_turn_is_sent_whole(
    scenario_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``RAGSTREAM_HISTORY_TOKENS=none``: what the server sent before issue 46 (the bench's ``old``)."""
    wire = WireModel(cite_first)
    async with ragstream(wire, "chat", scenario_config, monkeypatch, history_tokens=None) as (http, _):
        for n, question in enumerate(QUESTIONS[:3], 1):
            await ask(http, "long", f"r{n}", question)
    assert wire.requests[-1].user_texts == QUESTIONS[:3]
    assert all(r.startswith("{") for r in wire.requests[-1].tool_results)


def test_the_context_window_bounds_the_history_before_its_budget() -> None:
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

    turns = []
    for n in range(10):
        turns += [
            ModelRequest(parts=[UserPromptPart(f"question {n} " + "x" * 400)]),
            ModelResponse(parts=[TextPart(f"answer {n} " + "y" * 400)]),
        ]
    current = [ModelRequest(parts=[UserPromptPart("now " + "z" * 2000)])]
    whole = shape_history(turns + current, history_tokens=None, limit_tokens=None)
    assert len(whole) == 21
    budgeted = shape_history(turns + current, history_tokens=1000, limit_tokens=None)
    assert len(budgeted) == 1 + 2 * 4  # four turns of about 226 tokens each fit 1000
    windowed = shape_history(turns + current, history_tokens=1000, limit_tokens=1000)
    assert len(windowed) == 1 + 2 * 2  # the current turn takes 511 of the window's 1000: two fit
    assert windowed[-1] is current[0]
    assert shape_history(current, history_tokens=0, limit_tokens=1) == current  # the turn itself is sent
