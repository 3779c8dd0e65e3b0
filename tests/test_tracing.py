"""OpenTelemetry traces of a live ``ragstream serve``, received by an OTLP/HTTP receiver in the test.

The server is configured only by the standard ``OTEL_*`` variables; the real ``@ag-ui/client``
sends a W3C ``traceparent`` and gets back, in RUN_STARTED's metadata, the trace id every span of
its run was recorded under: the HTTP request, the run, pydantic-ai's agent run, model requests and
tool call, the knowledge-base search and the thread store's load and save. An upload's ingestion
job is a trace of its own. Without ``OTEL_*`` nothing of it is there.
"""

from __future__ import annotations

import asyncio
import secrets
import subprocess
from pathlib import Path

import httpx
import pytest

from ragstream.agui.execution import TRACE_ID_KEY
from ragstream.observe import tracing
from tests.agui_client import drive
from tests.otlp_receiver import OTLPReceiver, ReceivedSpan
from tests.servers import RAGSTREAM, ROOT, served
from tests.snippets import snippet_env

pytestmark = pytest.mark.timeout(600)

TIDES = b"# Tides at Brest\n\nThe tide at Brest rises about six metres twice a day, pulled by the moon.\n"
SERVER_KIND = 2  # OTLP SpanKind SERVER


def otel_env(receiver: OTLPReceiver) -> dict[str, str]:
    """The settings docs/operating.md's "Traces" block gives (export every 200 ms instead of 5 s: a
    short test), pointed at the test's receiver."""
    given = snippet_env("traces")
    assert set(given) == {"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME", "OTEL_BSP_SCHEDULE_DELAY"}
    return {**given, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}


async def upload(http: httpx.AsyncClient, url: str, name: str, body: bytes) -> dict:
    response = await http.post(f"{url}/documents", files={"file": (name, body)})
    assert response.status_code == 202, response.text
    job_id = response.json()["jobId"]
    for _ in range(600):
        job = (await http.get(f"{url}/documents/jobs/{job_id}")).json()
        if job["state"] in ("done", "failed"):
            assert job["state"] == "done", job
            return job
        await asyncio.sleep(0.2)
    raise AssertionError(f"job {job_id} did not finish")


def named(spans: list[ReceivedSpan], name: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.name == name]


def one(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    found = named(spans, name)
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


def run_started(report: dict) -> dict:
    (run,) = [s for s in report["steps"] if s["op"] == "run"]
    assert run["failed"] is None and run["runError"] is None, run
    assert run["finished"]["outcome"] == "success"
    return next(e for e in run["events"] if e["type"] == "RUN_STARTED")


async def test_one_run_is_one_trace_under_the_callers_trace_id(tmp_path: Path) -> None:
    trace_id, caller_span = secrets.token_hex(16), secrets.token_hex(8)
    with OTLPReceiver() as receiver:
        async with served(otel_env(receiver), tmp_path / "data") as url:
            async with httpx.AsyncClient(timeout=60) as http:
                job = await upload(http, url, "tides.md", TIDES)
            report = await drive(
                tmp_path,
                url,
                "tides",
                [{"op": "user", "text": "How high does the tide rise at Brest?"}, {"op": "run"}],
                headers={"traceparent": f"00-{trace_id}-{caller_span}-01"},
            )
            expected = {
                "POST /agui",
                "ragstream.run",
                "invoke_agent ragstream",
                "chat extractive",
                "execute_tool search",
                "kb.search",
                "thread_store.load",
                "thread_store.save",
            }
            spans = receiver.wait_for(lambda got: expected <= {s.name for s in got if s.trace_id == trace_id})
            # a run without a traceparent starts a trace of its own, and says which
            fresh = run_started(
                await drive(tmp_path, url, "moon", [{"op": "user", "text": "moon?"}, {"op": "run"}])
            )
            own_trace = fresh["metadata"][TRACE_ID_KEY]
            receiver.wait_for(
                lambda got: any(s.trace_id == own_trace and s.name == "ragstream.run" for s in got)
            )

    # the client learns the trace id its run was recorded under
    started = run_started(report)
    assert started["metadata"] == {TRACE_ID_KEY: trace_id}
    assert own_trace != trace_id and len(own_trace) == 32

    run = [s for s in spans if s.trace_id == trace_id]
    assert {s.service for s in run} == {"ragstream-test"}
    http_span = one(run, "POST /agui")
    assert http_span.kind == SERVER_KIND and http_span.parent_span_id == caller_span
    assert http_span.attributes["http.route"] == "/agui"
    assert http_span.attributes["http.status_code"] == 200
    run_span = one(run, "ragstream.run")
    assert run_span.parent_span_id == http_span.span_id  # carried from the request into the run's task
    assert run_span.attributes["ragstream.thread_id"] == "tides"
    assert run_span.attributes["ragstream.run.outcome"] == "finished"
    agent = one(run, "invoke_agent ragstream")
    assert agent.parent_span_id == run_span.span_id
    requests = named(run, "chat extractive")
    assert len(requests) == 2 and {r.parent_span_id for r in requests} == {
        agent.span_id
    }  # search, then answer
    assert all(r.attributes["gen_ai.usage.output_tokens"] > 0 for r in requests)
    tool = one(run, "execute_tool search")
    assert tool.parent_span_id == agent.span_id
    search = one(run, "kb.search")
    assert search.parent_span_id == tool.span_id
    assert (
        search.attributes["ragstream.search.mode"] == "hybrid"
        and search.attributes["ragstream.search.hits"] >= 1
    )
    assert one(run, "thread_store.load").parent_span_id in {s.span_id for s in run}
    assert one(run, "thread_store.save").parent_span_id in {run_span.span_id, agent.span_id}
    # prompts and document text stay out of spans unless asked for
    assert not any("Brest" in str(v) for s in run for v in s.attributes.values())

    # the upload's ingestion job is a trace of its own: the job, and each file's ingestion in it
    job_span = next(
        s for s in spans if s.name == "ingest.job" and s.attributes["ragstream.job_id"] == job["id"]
    )
    file_span = one([s for s in spans if s.trace_id == job_span.trace_id], "kb.ingest")
    assert file_span.parent_span_id == job_span.span_id
    assert file_span.attributes["ragstream.ingest.status"] == "added"


async def test_without_otel_variables_nothing_is_traced(tmp_path: Path) -> None:
    with OTLPReceiver() as receiver:
        async with served({}, tmp_path / "data") as url:
            report = await drive(
                tmp_path,
                url,
                "quiet",
                [{"op": "user", "text": "anything?"}, {"op": "run"}],
                headers={"traceparent": f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"},
            )
        assert "metadata" not in run_started(report)
        assert receiver.requests == 0


def test_which_otel_variables_turn_tracing_on() -> None:
    assert not tracing.tracing_requested({})
    assert tracing.tracing_requested({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert tracing.tracing_requested(
        {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}
    )
    assert tracing.tracing_requested({"OTEL_TRACES_EXPORTER": "console"})
    assert not tracing.tracing_requested(
        {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}
    )
    assert not tracing.tracing_requested(
        {"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}
    )
    assert tracing.tracing_problem({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}) is None


@pytest.mark.parametrize(
    ("env", "says"),
    [
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "grpc",
        ),
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "zipkin"),
    ],
)
def test_serve_refuses_tracing_it_cannot_send(tmp_path: Path, env: dict[str, str], says: str) -> None:
    result = subprocess.run(
        [*RAGSTREAM, "serve", "--data-dir", str(tmp_path), "--port", "0"],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(tmp_path), **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert says in result.stderr and "Traceback" not in result.stderr


async def test_a_model_call_inside_a_tool_is_a_span_under_the_tool(tmp_path: Path) -> None:
    """The chat model calls ``ask``, whose answer writer is a model call of its own: it is traced
    as an agent run with its model request, under the tool's span, in the run's trace."""
    from tests.protocol import parse_sse, run_body
    from tests.servers import serve
    from tests.test_models_wire import ask_script
    from tests.wire_models import WireModel

    trace_id = secrets.token_hex(16)
    wire = WireModel(ask_script)
    with OTLPReceiver() as receiver:
        async with serve(wire.app) as model_url:
            env = {
                **otel_env(receiver),
                "RAGSTREAM_MODEL": "openai-chat:wire",
                "OPENAI_BASE_URL": f"{model_url}/v1",
                "OPENAI_API_KEY": "test-key",
            }
            async with served(env, tmp_path / "data") as url, httpx.AsyncClient(timeout=60) as http:
                response = await http.post(
                    f"{url}/agui",
                    json=run_body("traced", "r1", "How long are backups kept?"),
                    headers={"traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01"},
                )
                assert parse_sse(response.text)[-1][1]["type"] == "RUN_FINISHED"
                spans = receiver.wait_for(
                    lambda got: len(named([s for s in got if s.trace_id == trace_id], "chat wire")) >= 3
                )
    run = [s for s in spans if s.trace_id == trace_id]
    by_id = {s.span_id: s for s in run}

    def ancestors(span: ReceivedSpan) -> list[str]:
        names = []
        while span.parent_span_id in by_id:
            span = by_id[span.parent_span_id]
            names.append(span.name)
        return names

    tool = one(run, "execute_tool ask")
    inner = [s for s in named(run, "chat wire") if "execute_tool ask" in ancestors(s)]
    assert len(inner) == 1, [ancestors(s) for s in named(run, "chat wire")]
    assert ancestors(inner[0])[0].startswith("invoke_agent") and ancestors(inner[0])[1] == tool.name
    assert inner[0].attributes["gen_ai.usage.input_tokens"] > 0
