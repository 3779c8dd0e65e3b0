"""What a client is told when a run fails: the code, words written for it, never the server's internals."""

from __future__ import annotations

import logging

import pytest
from pydantic_ai.exceptions import UserError

from server.agui.adapter import classify
from server.runs.failures import FailureCode


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
