"""Prometheus metrics: what ``GET /metrics`` counts, scraped by Debian's real ``prometheus``.

- a live ``ragstream serve`` with tokens is scraped by ``/usr/bin/prometheus`` through the shipped
  example config (examples/prometheus/prometheus.yml, pointed at the test server), and rates come
  back over Prometheus's HTTP API; every query of the shipped Grafana dashboard evaluates there;
- with ``--workers 2`` the counts of both workers add up, whichever worker answers the scrape;
- on ``RAGSTREAM_METRICS_ADDRESS`` the metrics have a listener of their own;
- in process: runs by outcome and error code, tool calls, tokens, searches and streams are
  counted as a client sees them at ``/metrics``, and ``RAGSTREAM_METRICS=false`` turns it all off.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from tests.protocol import parse_sse, run_body
from tests.servers import ROOT, free_port, serve, served

pytestmark = pytest.mark.timeout(600)

EXAMPLE_CONFIG = ROOT / "examples" / "prometheus" / "prometheus.yml"
DASHBOARD = ROOT / "examples" / "grafana" / "ragstream-dashboard.json"
TOKENS = {"alice": "alice-token", "monitor": "monitor-token"}
TIDES = b"# Tides at Brest\n\nThe tide at Brest rises about six metres twice a day, pulled by the moon.\n"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``{(sample name, sorted labels): value}`` of a Prometheus text page."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(page: dict, name: str, **labels: str) -> float:
    return page.get((name, tuple(sorted(labels.items()))), 0.0)


def families(text: str) -> set[str]:
    return {family.name for family in text_string_to_metric_families(text)}


def dashboard_queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in board["panels"] for t in panel.get("targets", [])]
    exprs += [v["query"]["query"] for v in board["templating"]["list"] if isinstance(v.get("query"), dict)]
    return exprs


def as_promql(expr: str) -> str:
    """A dashboard query as Prometheus evaluates it (Grafana's variables filled in)."""
    return expr.replace("$__rate_interval", "1m").replace('"$job"', '".*"')


async def run(http: httpx.AsyncClient, url: str, thread: str, text: str, headers: Any = None) -> list[dict]:
    response = await http.post(f"{url}/agui", json=run_body(thread, f"run-{thread}", text), headers=headers)
    assert response.status_code == 200, response.text
    return [event for _, event in parse_sse(response.text)]


async def upload(http: httpx.AsyncClient, url: str, headers: Any = None) -> None:
    response = await http.post(f"{url}/documents", files={"file": ("tides.md", TIDES)}, headers=headers)
    assert response.status_code == 202, response.text
    job_id = response.json()["jobId"]
    for _ in range(600):
        job = (await http.get(f"{url}/documents/jobs/{job_id}", headers=headers)).json()
        if job["state"] in ("done", "failed"):
            assert job["state"] == "done", job
            return
        await asyncio.sleep(0.2)
    raise AssertionError("the upload's job did not finish")


# -- Prometheus ---------------------------------------------------------------------------------


@contextmanager
def prometheus(tmp_path: Path, target: str, token: str) -> Iterator[str]:
    """Debian's prometheus scraping ``target`` every second with the example config; yields its URL."""
    config = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    config["global"]["scrape_interval"] = "1s"
    (job,) = config["scrape_configs"]
    token_file = tmp_path / "ragstream-token"
    token_file.write_text(token)
    job["authorization"]["credentials_file"] = str(token_file)
    job["static_configs"] = [{"targets": [target]}]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    log = (tmp_path / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            "/usr/bin/prometheus",
            f"--config.file={path}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=log,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(20)
        log.close()


async def query(http: httpx.AsyncClient, prom: str, promql: str) -> list[dict]:
    response = await http.get(f"{prom}/api/v1/query", params={"query": promql})
    body = response.json()
    assert response.status_code == 200 and body["status"] == "success", (promql, body)
    return body["data"]["result"]


async def until(check: Any, what: str, timeout: float = 60.0) -> Any:
    """Poll ``check()`` (a coroutine function) until it returns a truthy value; bounded."""
    deadline = time.monotonic() + timeout
    while True:
        result = await check()
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.5)


async def test_prometheus_scrapes_a_live_server_and_queries_rates_back(tmp_path: Path) -> None:
    alice = {"Authorization": f"Bearer {TOKENS['alice']}"}
    env = {"RAGSTREAM_TOKENS": json.dumps(TOKENS), "RAGSTREAM_EDITORS": json.dumps(["alice"])}
    async with served(env, tmp_path / "data") as url, httpx.AsyncClient(timeout=60) as http:
        assert (await http.get(f"{url}/metrics")).status_code == 401  # a token, like every route
        await upload(http, url, alice)
        with prometheus(tmp_path, url.removeprefix("http://"), TOKENS["monitor"]) as prom:

            async def target_up() -> bool:
                try:
                    response = await http.get(f"{prom}/api/v1/targets")
                except httpx.ConnectError:  # still starting
                    return False
                targets = response.json()["data"]["activeTargets"] if response.status_code == 200 else []
                return bool(targets) and targets[0]["health"] == "up"

            await until(target_up, "prometheus to scrape ragstream with the monitor's token")
            await run(http, url, "first", "How high is the tide at Brest?", alice)

            async def finished_runs() -> float:
                found = await query(http, prom, 'sum(ragstream_runs_total{outcome="finished"})')
                return float(found[0]["value"][1]) if found else 0.0

            await until(lambda: _equals(finished_runs, 1), "the first run in prometheus")
            for i in range(4):
                await run(http, url, f"more-{i}", "Why does the tide rise at Brest?", alice)
            await until(lambda: _equals(finished_runs, 5), "five runs in prometheus")

            increase = await query(http, prom, 'sum(increase(ragstream_runs_total{outcome="finished"}[2m]))')
            assert float(increase[0]["value"][1]) > 0
            searches = await query(
                http, prom, 'sum(rate(ragstream_tool_calls_total{tool="search",outcome="success"}[1m]))'
            )
            assert float(searches[0]["value"][1]) > 0
            tokens = await query(http, prom, "sum by (model, type) (ragstream_model_tokens_total)")
            assert {(r["metric"]["model"], r["metric"]["type"]) for r in tokens} == {
                ("extractive", "input"),
                ("extractive", "output"),
            }
            jobs = await query(http, prom, "ragstream_ingest_jobs_total")
            assert {r["metric"]["state"]: float(r["value"][1]) for r in jobs} == {
                "queued": 1,
                "running": 1,
                "done": 1,
            }
            p95 = await query(
                http,
                prom,
                "histogram_quantile(0.95, sum by (le) (rate(ragstream_run_duration_seconds_bucket[1m])))",
            )
            assert float(p95[0]["value"][1]) > 0
            for expr in dashboard_queries():  # every panel of the shipped dashboard is valid PromQL here
                if not expr.startswith("label_values"):
                    await query(http, prom, as_promql(expr))


async def _equals(check: Any, expected: float) -> bool:
    return await check() == expected


def test_example_config_is_valid_for_promtool(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t")
    config = tmp_path / "prometheus.yml"
    config.write_text(EXAMPLE_CONFIG.read_text().replace("/etc/prometheus/ragstream-token", str(token)))
    result = subprocess.run(
        ["/usr/bin/promtool", "check", "config", str(config)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


# -- several workers ------------------------------------------------------------------------------


def runs_by_worker(directory: Path) -> dict[str, float]:
    """Finished runs each worker process counted, read from its own multiprocess file."""
    counted: dict[str, float] = {}
    for path in directory.glob("counter_*.db"):
        pid = path.stem.removeprefix("counter_")
        for metric in MultiProcessCollector.merge([str(path)], accumulate=True):
            for sample in metric.samples:
                if sample.name == "ragstream_runs_total" and sample.labels.get("outcome") == "finished":
                    counted[pid] = counted.get(pid, 0.0) + sample.value
    return counted


async def test_two_workers_add_up(tmp_path: Path, redis_url: str, redis_prefix: str) -> None:
    directory = tmp_path / "metrics"
    directory.mkdir()
    (directory / "counter_1.db").write_bytes(b"left by an earlier server, not a value file")
    env = {
        "RAGSTREAM_WORKERS": "2",
        "RAGSTREAM_REDIS_URL": redis_url,
        "RAGSTREAM_REDIS_PREFIX": redis_prefix,
        "PROMETHEUS_MULTIPROC_DIR": str(directory),
    }
    async with served(env, tmp_path / "data") as url, httpx.AsyncClient(timeout=60) as http:
        assert not (directory / "counter_1.db").exists()  # cleaned at start
        made = 0

        async def fresh_connection_run(name: str) -> list[dict]:
            async with httpx.AsyncClient(timeout=60, headers={"Connection": "close"}) as own:
                return await run(own, url, name, "anything about tides?")

        for burst in range(20):  # until both workers have served runs (the kernel picks the worker)
            results = await asyncio.gather(*(fresh_connection_run(f"w{burst}-{i}") for i in range(3)))
            assert all(events[-1]["type"] == "RUN_FINISHED" for events in results)
            made += len(results)
            if len([n for n in runs_by_worker(directory).values() if n > 0]) >= 2:
                break
            await asyncio.sleep(0.2)
        per_worker = runs_by_worker(directory)
        assert len([n for n in per_worker.values() if n > 0]) == 2, per_worker
        assert sum(per_worker.values()) == made
        for _ in range(4):  # whichever worker answers reports both
            page = samples((await http.get(f"{url}/metrics")).text)
            assert value(page, "ragstream_runs_total", outcome="finished", code="") == made
            assert value(page, "ragstream_active_streams") == 0


# -- its own listener --------------------------------------------------------------------------------


async def test_metrics_on_their_own_address(tmp_path: Path) -> None:
    port = free_port()
    env = {"RAGSTREAM_TOKENS": json.dumps(TOKENS), "RAGSTREAM_METRICS_ADDRESS": f"127.0.0.1:{port}"}
    alice = {"Authorization": f"Bearer {TOKENS['alice']}"}
    async with served(env, tmp_path / "data") as url, httpx.AsyncClient(timeout=60) as http:
        assert (await http.get(f"{url}/metrics", headers=alice)).status_code == 404  # not on the main app
        await run(http, url, "own", "tides?", alice)
        response = await http.get(f"http://127.0.0.1:{port}/metrics")  # no token on the private port
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        assert value(samples(response.text), "ragstream_runs_total", outcome="finished", code="") == 1


def test_a_bad_metrics_address_is_refused(tmp_path: Path) -> None:
    from pydantic import ValidationError

    from ragstream.config import AppConfig

    with pytest.raises(ValidationError, match="host:port"):
        AppConfig(data_dir=tmp_path, metrics_address="9464")
    assert AppConfig(data_dir=tmp_path, metrics_address="[::1]:9464").metrics_listen == ("::1", 9464)


# -- in process: what is counted -----------------------------------------------------------------------


@asynccontextmanager
async def scenario(scenario_config: Any, **settings: Any) -> AsyncIterator[str]:
    from tests.conftest import scenario_app

    for key, setting in settings.items():
        setattr(scenario_config, key, setting)
    async with serve(scenario_app(scenario_config)) as url:
        yield url


async def test_runs_tools_tokens_and_searches_are_counted(scenario_config: Any) -> None:
    async with scenario(scenario_config) as url, httpx.AsyncClient(timeout=60) as http:
        before = samples((await http.get(f"{url}/metrics")).text)
        answered = await run(http, url, "counted", "nightly backups")
        failed = await run(http, url, "broken", "fail")
        after = samples((await http.get(f"{url}/metrics")).text)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert answered[-1]["type"] == "RUN_FINISHED" and failed[-1]["type"] == "RUN_ERROR"
    code = failed[-1]["code"]
    assert grew("ragstream_runs_total", outcome="finished", code="") == 1
    assert grew("ragstream_runs_total", outcome="error", code=code) == 1
    assert grew("ragstream_run_duration_seconds_count", outcome="finished") == 1
    assert grew("ragstream_run_duration_seconds_count", outcome="error") == 1
    assert grew("ragstream_time_to_first_token_seconds_count") == 1  # the failed run streamed no text
    assert grew("ragstream_tool_calls_total", tool="search", outcome="success") == 1
    assert grew("ragstream_tool_call_duration_seconds_count", tool="search") == 1
    assert grew("ragstream_search_duration_seconds_count", mode="hybrid") == 1
    assert sum(v for (name, _), v in after.items() if name == "ragstream_model_tokens_total") > sum(
        v for (name, _), v in before.items() if name == "ragstream_model_tokens_total"
    )
    assert value(after, "ragstream_active_streams") == 0 and value(after, "ragstream_active_runs") == 0
    # every thread-store operation has its error series from the start (a rate of 0, not "no data")
    for operation in ("open", "load", "save", "version", "delete", "list"):
        assert (("ragstream_thread_store_errors_total", (("operation", operation),))) in before, operation
        assert grew("ragstream_thread_store_errors_total", operation=operation) == 0


async def test_the_dashboard_queries_only_exported_metrics(scenario_config: Any) -> None:
    async with scenario(scenario_config) as url, httpx.AsyncClient(timeout=60) as http:
        page = (await http.get(f"{url}/metrics")).text
    exported = families(page)
    suffixes = ("_total", "_bucket", "_count", "_sum", "_created")
    queried = {name for expr in dashboard_queries() for name in re.findall(r"\bragstream_[a-z_]+", expr)}
    assert len(queried) >= 12
    missing = {
        name
        for name in queried
        if name not in exported
        and not any(name.endswith(s) and name.removesuffix(s) in exported for s in suffixes)
    }
    assert missing == set()


async def test_metrics_can_be_turned_off(scenario_config: Any) -> None:
    async with scenario(scenario_config, metrics=False) as url, httpx.AsyncClient(timeout=60) as http:
        assert (await http.get(f"{url}/metrics")).status_code == 404
        assert (await run(http, url, "quiet", "nightly backups"))[-1]["type"] == "RUN_FINISHED"
