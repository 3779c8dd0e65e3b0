"""The server against loopback model servers speaking the real wire formats (issue 46).

``tests/wire_models.py`` serves OpenAI Chat Completions, OpenAI Responses and Anthropic Messages
as the providers stream them, answered by a scripted model; the server reaches them through
``RAGSTREAM_MODEL`` and the providers' own base-URL variables, as a deployment does, with
pydantic-ai's model classes and the real SDKs in between. Each fault a provider can answer with has
its own RUN_ERROR code.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from ragstream.access import LOCAL_PRINCIPAL
from ragstream.app import create_app
from tests.protocol import check_stream, parse_sse, run_body
from tests.servers import serve
from tests.wire_models import CUT, HANG, Call, Fault, Reply, Text, Thinking, WireModel, WireRequest

APIS: dict[str, tuple[str, dict[str, str]]] = {
    "chat": ("openai-chat:wire", {"OPENAI_BASE_URL": "{url}/v1", "OPENAI_API_KEY": "test-key"}),
    "responses": ("openai:wire", {"OPENAI_BASE_URL": "{url}/v1", "OPENAI_API_KEY": "test-key"}),
    "anthropic": ("anthropic:wire", {"ANTHROPIC_BASE_URL": "{url}", "ANTHROPIC_API_KEY": "test-key"}),
}
ANSWER = "Nightly backups are kept for 35 days [1]."


def rag_script(request: WireRequest) -> Reply:
    """Search for the user's question, then answer citing the first passage."""
    if not request.ends_with_tool_result:
        return [Call("search", {"query": request.user_texts[-1]})]
    return [Text(ANSWER)]


@asynccontextmanager
async def ragstream(
    wire: WireModel,
    api: str,
    config: Any,
    monkeypatch: pytest.MonkeyPatch,
    model: str | None = None,
    **settings: Any,
) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    """The server configured as the docs say for ``api``, against ``wire``; yields a client and the app."""
    async with serve(wire.app) as wire_url:
        default_model, env = APIS[api]
        for variable, value in env.items():
            monkeypatch.setenv(variable, value.format(url=wire_url))
        config.model = model or default_model
        config.model_retry_backoff = 0.0
        for key, value in settings.items():
            setattr(config, key, value)
        app = create_app(config)
        async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as http:
            yield http, app


async def ask(http: httpx.AsyncClient, thread: str, run: str, text: str) -> list[dict[str, Any]]:
    response = await http.post("/agui", json=run_body(thread, run, text))
    assert response.status_code == 200, response.text
    events = [event for _, event in parse_sse(response.text)]
    check_stream(events, {})
    return events


def answer_of(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


@pytest.mark.parametrize("api", list(APIS))
async def test_a_two_turn_conversation_over_each_wire_format(
    api: str, scenario_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    wire = WireModel(rag_script)
    async with ragstream(wire, api, scenario_config, monkeypatch) as (http, _):
        first = await ask(http, "t", "r1", "How long are nightly backups kept?")
        second = await ask(http, "t", "r2", "And who restores them?")
        thread = (await http.get("/threads/t")).json()

    assert first[-1]["type"] == "RUN_FINISHED" and second[-1]["type"] == "RUN_FINISHED", second[-1]
    assert answer_of(first) == ANSWER and answer_of(second) == ANSWER
    assert [e["toolCallName"] for e in first if e["type"] == "TOOL_CALL_START"] == ["search"]
    assert len(wire.requests) == 4 and all(r.body["stream"] for r in wire.requests)
    assert wire.requests[1].tool_results and "Kiteline" in wire.requests[1].tool_results[0]
    assert wire.requests[2].user_texts == ["How long are nightly backups kept?", "And who restores them?"]
    assert [m["role"] for m in thread["messages"] if m["role"] == "user"] == ["user", "user"]
    body = wire.requests[0].body
    # the settings' defaults on the wire: max_tokens, temperature, and nothing stored by the provider
    assert body.get("max_tokens", body.get("max_completion_tokens", body.get("max_output_tokens"))) == 4096
    assert body["temperature"] == 0.2
    if api == "responses":
        assert body["store"] is False


FAULTS: dict[str, tuple[Reply, str, int]] = {
    # reply, RUN_ERROR code, requests made (model_retries=2: a passing fault is tried 3 times)
    "401": (Fault(401, "invalid api key"), "model_refused", 1),
    "404": (Fault(404, "model not found"), "model_refused", 1),
    "429": (Fault(429, "slow down", {"Retry-After": "120"}), "model_rate_limited", 1),
    "500": (Fault(500, "boom"), "model_unavailable", 3),
    "cut": ([Text("Nightly backups are"), CUT], "model_stream_cut", 1),
}


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("api", list(APIS))
async def test_each_provider_fault_has_its_own_code_and_saves_nothing(
    api: str, fault: str, scenario_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    reply, code, attempts = FAULTS[fault]

    def script(request: WireRequest) -> Reply:
        return reply if request.user_texts[-1] == "now fail" else rag_script(request)

    wire = WireModel(script)
    async with ragstream(wire, api, scenario_config, monkeypatch) as (http, _):
        await ask(http, "t", "r1", "How long are nightly backups kept?")
        before = (await http.get("/threads/t")).json()
        sent = len(wire.requests)
        events = await ask(http, "t", "r2", "now fail")
        after = (await http.get("/threads/t")).json()

    error = events[-1]
    assert error["type"] == "RUN_ERROR" and error["code"] == code, error
    assert len(wire.requests) - sent == attempts
    assert after["messages"] == before["messages"]  # the fragment of a cut stream is not the answer
    assert "scripted" not in error["message"] and "127.0.0.1" not in error["message"]
    if fault == "429":
        assert error["metadata"]["ragstream.retryAfter"] == 120
        assert "in 120 s" in error["message"]
    if fault == "cut":
        assert "Nightly backups are" in answer_of(events)  # it streamed, then was taken back


async def test_a_short_retry_after_is_waited_out_and_the_run_answers(
    scenario_config: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    refused: list[int] = []

    def script(request: WireRequest) -> Reply:
        if not refused:
            refused.append(1)
            return Fault(429, "slow down", {"Retry-After": "0"})
        return rag_script(request)

    wire = WireModel(script)
    with caplog.at_level(logging.WARNING, logger="ragstream.models"):
        async with ragstream(wire, "chat", scenario_config, monkeypatch) as (http, _):
            events = await ask(http, "t", "r1", "How long are nightly backups kept?")
    assert events[-1]["type"] == "RUN_FINISHED" and answer_of(events) == ANSWER
    assert len(wire.requests) == 3  # the refused one, then the search call and the answer
    assert any("HTTP 429); retry 1 of 2" in r.getMessage() for r in caplog.records)


async def test_a_provider_that_stops_answering_is_unavailable(
    scenario_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    wire = WireModel(lambda request: [HANG])
    async with ragstream(wire, "chat", scenario_config, monkeypatch, model_timeout=0.5) as (http, _):
        events = await ask(http, "t", "r1", "How long are nightly backups kept?")
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "model_unavailable", events[-1]


async def test_a_chat_completions_only_server_says_which_api_url_and_setting_then_works_as_documented(
    scenario_config: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``openai:`` is the Responses API: a server speaking only Chat Completions answers 404, and the
    log line says so and what to set; ``openai-chat:`` (the docs' setting for such servers) works."""
    wire = WireModel(rag_script, apis=("chat",))
    with caplog.at_level(logging.ERROR, logger="ragstream.runs"):
        async with ragstream(wire, "responses", scenario_config, monkeypatch) as (http, _):
            events = await ask(http, "t", "r1", "How long are nightly backups kept?")
    error = events[-1]
    assert error["code"] == "model_refused" and "OpenAI Responses" in error["message"], error
    (line,) = [r.getMessage() for r in caplog.records if "model provider refused" in r.getMessage()]
    assert "OpenAI Responses" in line and "/v1/responses" in line
    assert "RAGSTREAM_MODEL=openai-chat:<model>" in line

    # the docs' row for such a server, its host moved to this one's
    model, env, _ = provider_rows()["llama.cpp (`llama-server`)"]
    monkeypatch.delenv("OPENAI_API_KEY")  # a local server needs none
    async with serve(wire.app) as wire_url:
        for variable, value in env.items():
            monkeypatch.setenv(variable, value.replace("http://localhost:8080", wire_url))
        scenario_config.model = placeholders_filled(model)
        async with (
            serve(create_app(scenario_config)) as url,
            httpx.AsyncClient(base_url=url, timeout=60) as http,
        ):
            events = await ask(http, "t2", "r1", "How long are nightly backups kept?")
    assert events[-1]["type"] == "RUN_FINISHED" and answer_of(events) == ANSWER


def ask_script(request: WireRequest) -> Reply:
    """The chat model calls ``ask``; the answer writer answers; a summary is written after."""
    if "Summarise this Q&A session" in request.system:
        return [Text("The user asked about backups.")]
    if "final_result" in request.tool_names:  # ask's answer writer (structured output)
        return [Call("final_result", {"answer": ANSWER, "confidence": 0.9})]
    if not request.ends_with_tool_result:
        return [Call("ask", {"question": request.user_texts[-1]})]
    return [Text(ANSWER)]


async def until(check: Any, timeout: float = 30.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("timed out")


async def test_model_calls_inside_tools_count_in_metrics_and_the_days_budget(
    scenario_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    wire = WireModel(ask_script)
    async with ragstream(
        wire, "chat", scenario_config, monkeypatch, metrics=True, limit_tokens_per_day=1_000_000
    ) as (http, app):

        async def tokens_counted() -> float:  # the process's counter: what earlier tests counted too
            page = (await http.get("/metrics")).text
            return sum(
                float(line.rsplit(" ", 1)[1])
                for line in page.splitlines()
                if line.startswith("ragstream_model_tokens_total{")
            )

        before = await tokens_counted()
        events = await ask(http, "t", "r1", "How long are nightly backups kept?")
        await until(lambda: len(wire.requests) == 4)  # the background summary too
        spent = sum(r.size + wire.usage_output for r in wire.requests)
        quotas = app.state.services.quotas
        used: int | None = None
        counted = 0.0
        for _ in range(600):  # the summary's response is counted as it lands, after its request
            used = await quotas.tokens_used(LOCAL_PRINCIPAL)
            counted = await tokens_counted() - before
            if used == spent and counted == spent:
                break
            await asyncio.sleep(0.05)

    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    kinds = ["ask writer" if "final_result" in r.tool_names else r.system[:9] for r in wire.requests]
    assert sorted(kinds) == ["Summarise", "You are t", "You are t", "ask writer"]  # in any order
    assert used == spent
    assert counted == spent


async def test_a_tool_model_call_is_refused_past_the_days_budget(
    scenario_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The day's tokens run out inside ``ask``: the answer writer's call is the one refused, the run
    fails with ``quota_exceeded`` and the day is not overspent by the tool."""
    wire = WireModel(ask_script)
    async with ragstream(wire, "chat", scenario_config, monkeypatch, limit_tokens_per_day=1) as (http, app):
        events = await ask(http, "t", "r1", "How long are nightly backups kept?")
        used = await app.state.services.quotas.tokens_used(LOCAL_PRINCIPAL)
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "quota_exceeded", events[-1]
    assert len(wire.requests) == 1  # the chat model's call of ask; the writer was not asked
    assert used == wire.requests[0].size + wire.usage_output


# -- the providers table (docs/models.md) --------------------------------------------------------

PROVIDER_VARIABLES = ("OPENAI", "ANTHROPIC", "AZURE", "GOOGLE", "GEMINI", "AWS", "OLLAMA", "VLLM")


def provider_rows() -> dict[str, tuple[str, dict[str, str], str]]:
    """The providers table: provider -> (model string, variables to set, the API it names)."""
    from tests.snippets import page

    rows: dict[str, tuple[str, dict[str, str], str]] = {}
    lines = iter(page("models").splitlines())
    for line in lines:
        if line.startswith("| provider | `RAGSTREAM_MODEL` |"):
            break
    next(lines)
    for line in lines:
        if not line.startswith("|"):
            break
        provider, model, settings, api = (cell.strip() for cell in line.strip("|").split("|"))
        env: dict[str, str] = {}
        for setting in settings.split(", "):
            name, _, value = setting.split(" ")[0].strip("`").partition("=")
            env[name] = value or "test-key"
        rows[provider] = (model.strip("`"), env, api)
    return rows


def placeholders_filled(text: str) -> str:
    return (
        text.replace("<resource>", "example")
        .replace("<deployment>", "gpt-4o")
        .replace("<model>", "wire")
        .replace("<served model name>", "served")
    )


def test_the_providers_table_names_every_provider_teams_use() -> None:
    rows = provider_rows()
    for provider in (
        "OpenAI",
        "Azure OpenAI",
        "Anthropic",
        "Google Gemini API",
        "AWS Bedrock",
        "Groq",
        "Mistral",
    ):
        assert provider in rows
    for local in ("Ollama", "vLLM", "llama.cpp (`llama-server`)", "LM Studio"):
        assert rows[local][2] == "OpenAI Chat Completions", local


@pytest.mark.parametrize("provider", list(provider_rows()))
def test_each_documented_provider_setting_resolves_to_its_api(
    provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from pydantic_ai.models import infer_model

    from rag_tools.models import api_of
    from ragstream.commands import model_problem

    model, env, api = provider_rows()[provider]
    for variable in list(os.environ):
        if variable.startswith(PROVIDER_VARIABLES):
            monkeypatch.delenv(variable)
    for variable, value in env.items():
        monkeypatch.setenv(variable, placeholders_filled(value))
    model = placeholders_filled(model)
    assert model_problem(model) is None  # serve's check at start takes it
    resolved = infer_model(model)
    assert api_of(resolved) == api
    base = next(
        (placeholders_filled(v) for k, v in env.items() if k.endswith(("_BASE_URL", "_ENDPOINT"))), None
    )
    if base is not None:
        assert str(getattr(resolved, "base_url", "")).startswith(base)


def thinking_script(request: WireRequest) -> Reply:
    if not request.ends_with_tool_result:
        return [
            Thinking("The question is about backups: search."),
            Call("search", {"query": request.user_texts[-1]}),
        ]
    return [Thinking("Passage 1 gives the retention."), Text(ANSWER)]


@pytest.mark.parametrize("api", list(APIS))
async def test_a_thinking_models_reasoning_streams_as_reasoning_events_and_stays_in_the_thread(
    api: str, scenario_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    wire = WireModel(thinking_script)
    async with ragstream(wire, api, scenario_config, monkeypatch) as (http, _):
        events = await ask(http, "t", "r1", "How long are nightly backups kept?")
        thread = (await http.get("/threads/t")).json()
        await ask(http, "t", "r2", "And who restores them?")

    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    reasoning = [e for e in events if e["type"].startswith("REASONING_")]
    assert [e["type"] for e in reasoning if e["type"] != "REASONING_MESSAGE_CONTENT"][:4] == [
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_END",
        "REASONING_ENCRYPTED_VALUE",
    ]
    streamed = "".join(e["delta"] for e in reasoning if e["type"] == "REASONING_MESSAGE_CONTENT")
    assert streamed == "The question is about backups: search.Passage 1 gives the retention."
    kept = [m["content"] for m in thread["messages"] if m["role"] == "reasoning"]
    assert kept == ["The question is about backups: search.", "Passage 1 gives the retention."]
    roles = [m["role"] for m in thread["messages"]]
    assert roles.index("reasoning") < roles.index("tool")  # in the order it was thought
    # the next turn's answer request carries the current turn's thinking only, not the last turn's
    sent = json.dumps(wire.requests[-1].body)
    assert "Passage 1 gives the retention." not in sent


async def test_the_thinking_setting_reaches_a_model_that_thinks(
    scenario_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    wire = WireModel(thinking_script)
    async with ragstream(
        wire,
        "anthropic",
        scenario_config,
        monkeypatch,
        model="anthropic:claude-sonnet-4-5",
        model_thinking="low",
    ) as (http, _):
        events = await ask(http, "t", "r1", "How long are nightly backups kept?")
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    assert wire.requests[0].body["thinking"]["type"] == "enabled"
