"""What a client is told when a run fails: the code, words written for it, never the server's internals."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pydantic_ai.exceptions import UserError

from ragstream.agui.adapter import classify
from ragstream.runs.failures import FailureCode


def test_the_agent_frameworks_words_go_to_the_log_and_the_client_gets_a_reference(
    caplog: pytest.LogCaptureFixture,
) -> None:
    internal = "FunctionToolset 'rag-search' defines a tool whose name conflicts with existing tool from 'x'"
    with caplog.at_level(logging.WARNING):
        failure = classify(UserError(internal))
    assert failure.code is FailureCode.INVALID_REQUEST
    assert "rag-search" not in failure.message and "FunctionToolset" not in failure.message
    reference = failure.message.split("(reference ")[1].split(" ")[0]
    logged = [r.getMessage() for r in caplog.records if reference in r.getMessage()]
    assert logged and internal in logged[0]  # the operator can find what it was


async def test_a_run_whose_thread_another_writer_saved_meanwhile_says_so(scenario_config: Any) -> None:
    """Two writers on one thread (a second run after a lost lock, say): the run that saves second
    is told its answer was not saved because the conversation changed, not that the store is down;
    the thread keeps what the other writer saved."""
    import asyncio
    from dataclasses import replace

    import httpx

    from tests.conftest import scenario_app
    from tests.protocol import parse_sse, run_body
    from tests.servers import serve

    app = scenario_app(scenario_config)
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as http:
        assert (await http.post("/agui", json=run_body("shared", "r1", "hello"))).status_code == 200
        before = (await http.get("/threads/shared")).json()["messages"]
        store = app.state.services.store
        slow = asyncio.create_task(http.post("/agui", json=run_body("shared", "r2", "slow")))
        await asyncio.sleep(1.0)  # the run streams its answer
        record = await store.load("shared")
        assert record is not None
        await store.save(replace(record, title="Renamed elsewhere"))  # another writer saves first
        events = [e for _, e in parse_sse((await slow).text)]
        assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "thread_changed", events[-1]
        assert "was not saved" in events[-1]["message"]
        view = (await http.get("/threads/shared")).json()
        assert view["title"] == "Renamed elsewhere" and view["messages"] == before
