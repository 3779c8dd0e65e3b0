"""Log lines as JSON (``RAGSTREAM_LOG_FORMAT=json``) on a live server's stderr, each carrying the
principal, thread, run and trace ids where known; plain text stays the default."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import uvicorn

from ragstream.observe.logs import JsonFormatter, RedactTokens, bind, log_config
from tests.otlp_receiver import OTLPReceiver
from tests.protocol import parse_sse, run_body
from tests.servers import RAGSTREAM, ROOT, free_port, served

pytestmark = pytest.mark.timeout(600)


async def test_a_live_servers_stderr_is_json_lines_with_the_runs_ids(tmp_path: Path) -> None:
    trace_id = secrets.token_hex(16)
    data = tmp_path / "data"
    corpus = tmp_path / "corpus"  # ingested at start (serve --ingest): no progress bar, JSON lines
    corpus.mkdir()
    (corpus / "tides.md").write_text("# Tides\n\nThe harbour's high tide comes twice a day.\n")
    (corpus / "broken.pdf").write_bytes(b"%PDF-1.4 this is not a PDF")
    with OTLPReceiver() as receiver:
        env = {
            "RAGSTREAM_LOG_FORMAT": "json",
            "RAGSTREAM_TOKENS": json.dumps({"alice": "alice-token"}),
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        }
        async with (
            served(env, data, args=["--ingest", str(corpus)]) as url,
            httpx.AsyncClient(timeout=60) as http,
        ):
            headers = {
                "Authorization": "Bearer alice-token",
                "traceparent": f"00-{trace_id}-{secrets.token_hex(8)}-01",
            }
            response = await http.post(
                f"{url}/agui", json=run_body("logged", "run-logged", "tides?"), headers=headers
            )
            assert parse_sse(response.text)[-1][1]["type"] == "RUN_FINISHED"
            assert (await http.get(f"{url}/threads/nobody-here", headers=headers)).status_code == 404
            await http.get(f"{url}/?token=alice-token")  # how the chat page is opened with a token
        port = url.rsplit(":", 1)[1]
        text = (data / f"serve-{port}.log").read_text()

    lines = [json.loads(line) for line in text.splitlines() if line.strip()]  # every line is JSON
    ingest = [line for line in lines if line["logger"] == "ragstream.ingest"]
    assert [line["level"] for line in ingest] == ["ERROR", "INFO"], ingest
    assert ingest[0]["message"].startswith(f"error: {corpus / 'broken.pdf'}: ")
    assert "1 added" in ingest[1]["message"], ingest
    assert "alice-token" not in text and any("/?token=[redacted]" in line["message"] for line in lines)
    assert {"time", "level", "logger", "message"} <= set(lines[0])
    ended = [line for line in lines if line["logger"] == "ragstream.runs" and "ended" in line["message"]]
    assert len(ended) == 1
    assert ended[0]["level"] == "INFO" and "finished" in ended[0]["message"]
    assert (ended[0]["principal"], ended[0]["thread"], ended[0]["run"]) == ("alice", "logged", "run-logged")
    assert ended[0]["trace_id"] == trace_id  # the caller's trace, carried into the run's task
    (access,) = [line for line in lines if "POST /agui" in line["message"]]
    assert (access["principal"], access["thread"], access["run"], access["trace_id"]) == (
        "alice",
        "logged",
        "run-logged",
        trace_id,
    )
    (missing,) = [line for line in lines if "GET /threads/nobody-here" in line["message"]]
    assert (missing["principal"], missing["thread"]) == ("alice", "nobody-here") and "run" not in missing


def test_an_exception_stays_on_its_line() -> None:
    def format_in_a_run() -> str:
        bind(principal="bob", thread="t-1", run="r-1")
        try:
            raise ValueError("boom")
        except ValueError:
            info = sys.exc_info()
        record = logging.LogRecord(
            "ragstream.runs", logging.ERROR, __file__, 1, "run %s failed", ("r-1",), info
        )
        return JsonFormatter().format(record)

    line = contextvars.copy_context().run(format_in_a_run)  # the ids stay in that context
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["message"] == "run r-1 failed" and (parsed["principal"], parsed["run"]) == ("bob", "r-1")
    assert "ValueError: boom" in parsed["exception"] and "Traceback" in parsed["exception"]
    assert "trace_id" not in parsed  # no span here


def test_plain_text_is_the_default_and_every_line_has_its_time() -> None:
    from ragstream.config import AppConfig

    assert AppConfig(data_dir=Path("x")).log_format == "text"
    config = log_config("text", uvicorn.config.LOGGING_CONFIG)
    for name, formatter in config["formatters"].items():
        assert (formatter.get("fmt") or formatter["format"]).startswith("%(asctime)s "), name
    assert config["root"]["handlers"] == ["ragstream"]
    assert config["loggers"]["ragstream"]["level"] == "INFO"
    default = uvicorn.config.LOGGING_CONFIG["formatters"]["default"]["fmt"]
    assert "asctime" not in default  # a copy was changed
    assert log_config("json", uvicorn.config.LOGGING_CONFIG)["formatters"]["json"]["()"].endswith(
        "JsonFormatter"
    )


def test_access_lines_carry_no_token() -> None:
    """The chat page is opened as /?token=...: uvicorn's access line must not keep the token. The
    filter is attached to uvicorn's access logger in both formats (and checked on a live server's
    log above, where the page is requested with a token)."""
    for path, shown in (
        ("/?token=alice-secret", "/?token=[redacted]"),
        ("/page?x=1&Token=alice-secret#top", "/page?x=1&Token=[redacted]#top"),
        ("/threads?limit=5", "/threads?limit=5"),
    ):
        args = ("127.0.0.1:5000", "GET", path, "1.1", 200)
        record = logging.LogRecord(
            "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d', args, None
        )
        assert RedactTokens().filter(record)
        assert record.getMessage() == f'127.0.0.1:5000 - "GET {shown} HTTP/1.1" 200'
    for log_format in ("text", "json"):
        config = log_config(log_format, uvicorn.config.LOGGING_CONFIG)
        assert config["loggers"]["uvicorn.access"]["filters"] == ["redact_tokens"]
        assert config["filters"]["redact_tokens"]["()"].endswith(".RedactTokens")
    assert "filters" not in uvicorn.config.LOGGING_CONFIG["loggers"]["uvicorn.access"]  # a copy was changed


TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3} ")


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_every_line_a_server_writes_has_its_format_from_the_first(tmp_path: Path, log_format: str) -> None:
    """stdout and stderr together, as a container's log shows them, from the first line (the ingest
    at start, "serving on", uvicorn's start-up) to the last (its shutdown after SIGTERM): in text each
    line starts with its time, in JSON each line is a JSON object with one."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "tides.md").write_text("# Tides\n\nThe harbour's high tide comes twice a day.\n")
    (corpus / "broken.pdf").write_bytes(b"%PDF-1.4 this is not a PDF")
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RAGSTREAM_TOOL_DIRS": "[]",
        "RAGSTREAM_LOG_FORMAT": log_format,
    }
    log = tmp_path / "serve.log"
    data = tmp_path / "data"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [*RAGSTREAM, "serve", "--port", str(port), "--data-dir", str(data), "--ingest", str(corpus)],
            env=env,
            cwd=ROOT,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        with httpx.Client(timeout=60) as http:
            deadline = time.monotonic() + 180  # a hang guard
            while True:
                assert process.poll() is None, log.read_text()
                with contextlib.suppress(httpx.HTTPError):
                    if http.get(f"{url}/ready").status_code == 200:
                        break
                assert time.monotonic() < deadline
                time.sleep(0.2)
            answer = http.post(f"{url}/agui", json=run_body("t", "r", "tides?"))
            assert parse_sse(answer.text)[-1][1]["type"] == "RUN_FINISHED"
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    said = " ".join(lines)
    for expected in ("broken.pdf", "serving on", "Application startup complete", "Shutting down"):
        assert expected in said, said
    if log_format == "text":
        assert [line for line in lines if not TIMESTAMP.match(line)] == []
    else:
        for line in lines:
            assert {"time", "level", "logger", "message"} <= set(json.loads(line)), line


@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_a_run_that_times_out_leaves_its_end_line_with_its_tokens_at_info(
    tmp_path: Path, log_format: str
) -> None:
    """The model answers a search call, then stops answering: the run times out, and its end line
    (outcome, code, duration, tokens) is in the log at INFO in either format."""
    from tests.servers import serve
    from tests.wire_models import HANG, Call, WireModel

    wire = WireModel(lambda r: [HANG] if r.ends_with_tool_result else [Call("search", {"query": "tides"})])
    async with serve(wire.app) as model_url:
        env = {
            "RAGSTREAM_LOG_FORMAT": log_format,
            "RAGSTREAM_MODEL": "openai-chat:wire",
            "OPENAI_BASE_URL": f"{model_url}/v1",
            "OPENAI_API_KEY": "test-key",
            "RAGSTREAM_RUN_TIMEOUT": "3",
        }
        async with served(env, tmp_path / "data") as url, httpx.AsyncClient(timeout=60) as http:
            response = await http.post(f"{url}/agui", json=run_body("slow", "run-slow", "tides?"))
            assert parse_sse(response.text)[-1][1]["code"] == "timeout"
            port = url.rsplit(":", 1)[1]
            for _ in range(100):  # the end line is written as the run's task ends
                text = (tmp_path / "data" / f"serve-{port}.log").read_text()
                if "ended" in text:
                    break
                await asyncio.sleep(0.05)
    (line,) = [line for line in text.splitlines() if "run-slow ended" in line]
    tokens = sum(r.size + wire.usage_output for r in wire.requests[:1])  # the hung one reported nothing
    if log_format == "json":
        record = json.loads(line)
        assert (record["level"], record["logger"]) == ("INFO", "ragstream.runs")
        message = record["message"]
    else:
        assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ INFO ragstream.runs: ", line), line
        message = line
    assert re.search(r"ended: error \(timeout\) after \d+\.\d{3} s, ", message), message
    assert message.endswith(f", {tokens} tokens ({wire.requests[0].size} in, {wire.usage_output} out)")
