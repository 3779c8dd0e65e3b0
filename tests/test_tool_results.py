"""Seed 001 and 004 tool features through the real server and @ag-ui/client: streaming tools,
``lock=True`` (in one process and across two workers sharing Redis), ``ToolResult`` with an
attachment, as an error and truncated, ``race`` and ``ask``, the chat page showing them, and the
tool snippets of docs/tools.md. The tools are tests/seed_tools."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from rag_tools.tools import LocalToolLocks, ToolOutcome
from rag_tools.tools.locks import OnWait
from tests.agui_client import drive
from tests.conftest import ROOT, scenario_app
from tests.protocol import parse_sse, run_body
from tests.redis_helpers import Worker, worker_env
from tests.servers import serve
from tests.snippets import snippet

SEED_TOOLS = ROOT / "tests" / "seed_tools"


@asynccontextmanager
async def seed_server(config: Any) -> AsyncIterator[tuple[str, Any]]:
    """The scenario server with the seed tools; yields its URL and its services."""
    config.tool_dirs = [SEED_TOOLS]
    app = scenario_app(config)
    async with serve(app) as url:
        yield url, app.state.services


@asynccontextmanager
async def seed_chat(config: Any, name: str) -> AsyncIterator[tuple[str, Any]]:
    """The seed-tools server and the chat page open on it in Chromium; yields its URL and the page."""
    from tests.browser.chat import ChatPage, launch_browser, require_built_page

    require_built_page()
    async with seed_server(config) as (url, _), launch_browser() as browser:
        context = await browser.new_context(viewport={"width": 1280, "height": 800})
        chat = ChatPage(await context.new_page(), url, name)
        await chat.open()
        yield url, chat


def seed_workers(config: Any, redis_url: str, prefix: str, log: Path) -> tuple[Worker, Worker]:
    """Two server processes with the seed tools sharing Redis (call ``ready()`` on each)."""
    env = worker_env(
        config,
        redis_url,
        prefix,
        RAGSTREAM_TOOL_DIRS=json.dumps([str(SEED_TOOLS)]),
        SEED_TOOLS_LOG=str(log),
    )
    return Worker(env), Worker(env)


def clean(run: dict[str, Any]) -> dict[str, Any]:
    assert run["warnings"] == [] and run["errors"] == [], (run["warnings"], run["errors"])
    assert run["runError"] is None and run["failed"] is None, (run["runError"], run["failed"])
    return run


def tool_events(run: dict[str, Any], tool: str) -> tuple[int, int, str, list[dict[str, Any]]]:
    """(index of TOOL_CALL_START, index of TOOL_CALL_RESULT, call id, events) of ``tool``'s call."""
    events = run["events"]
    start = next(
        i for i, e in enumerate(events) if e["type"] == "TOOL_CALL_START" and e["toolCallName"] == tool
    )
    call_id = events[start]["toolCallId"]
    result = next(
        i for i, e in enumerate(events) if e["type"] == "TOOL_CALL_RESULT" and e["toolCallId"] == call_id
    )
    return start, result, call_id, events


def custom(run: dict[str, Any], name: str) -> list[tuple[int, Any]]:
    return [
        (i, e["value"]) for i, e in enumerate(run["events"]) if e["type"] == "CUSTOM" and e["name"] == name
    ]


def call(tool: str, **args: Any) -> list[dict[str, Any]]:
    return [{"op": "user", "text": f"call {tool} {json.dumps(args)}"}, {"op": "run"}]


# -- tool options: one declaration -------------------------------------------------------------


def test_tool_options_are_one_declaration_for_the_decorator_and_the_registry() -> None:
    from rag_tools.tools import ToolRegistry, tool_options
    from rag_tools.tools.options import options_of

    @tool_options(lock=True, tags=("io",), timeout=5)
    def fetch(url: str) -> str:
        """Fetch a URL."""
        return url

    assert options_of(fetch) is not None and options_of(fetch).lock
    registry = ToolRegistry()
    spec = registry.add_tool(fetch, tags=["net"], timeout=2)  # given here wins; tags join
    assert (spec.options.lock, spec.options.tags, spec.options.timeout) == (True, {"io", "net"}, 2)
    assert spec.tool.timeout == 2
    with pytest.raises(TypeError, match="locked"):
        tool_options(locked=True)
    with pytest.raises(TypeError, match="retries"):
        registry.add_tool(lambda: 1, name="other", retries=3)


# -- streaming tools ---------------------------------------------------------------------------


async def test_a_streaming_tool_streams_each_value_before_its_result_and_the_model_gets_the_last(
    scenario_config: Any, tmp_path: Path
) -> None:
    async with seed_server(scenario_config) as (url, _):
        report = await drive(tmp_path, url, "stream", call("count_up", to=3) + call("count_and_sum", to=4))
    counted, summed = (clean(s) for s in report["steps"] if s["op"] == "run")
    start, result, call_id, events = tool_events(counted, "count_up")
    streamed = custom(counted, "ragstream.tool_stream")
    assert [v["value"] for _, v in streamed] == [{"step": n, "of": 3} for n in (1, 2, 3)]
    assert [v["index"] for _, v in streamed] == [0, 1, 2]
    assert all(
        start < i < result and v["toolCallId"] == call_id and v["tool"] == "count_up" for i, v in streamed
    )
    assert json.loads(events[result]["content"]) == {"step": 3, "of": 3}
    assert counted["messages"][-1]["content"] == "count_up: {'step': 3, 'of': 3}"
    # an explicit final result: streamed values 1..4, then the ToolResult is what the model gets
    start, result, _, events = tool_events(summed, "count_and_sum")
    assert [v["value"] for _, v in custom(summed, "ragstream.tool_stream")] == [1, 2, 3, 4]
    assert events[result]["content"] == "sum=10"
    assert [v["title"] for _, v in custom(summed, "ragstream.tool_result")] == ["Sum"]
    assert summed["messages"][-1]["content"] == "count_and_sum: sum=10"


# -- lock=True ---------------------------------------------------------------------------------


class GatedLocks(LocalToolLocks):
    """The server's local locks, counting who arrived, so a test knows when callers are queued."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived = 0

    @asynccontextmanager
    async def hold(self, name: str, on_wait: OnWait | None = None) -> AsyncIterator[None]:
        self.arrived += 1
        async with super().hold(name, on_wait):
            yield


def intervals(log: Path) -> list[dict[str, Any]]:
    records = (json.loads(line) for line in log.read_text().splitlines())
    return sorted((r for r in records if "enter" in r), key=lambda r: r["enter"])


def assert_no_overlap(records: list[dict[str, Any]]) -> None:
    for earlier, later in itertools.pairwise(records):
        assert earlier["exit"] <= later["enter"], f"{earlier} overlaps {later}"


async def test_a_locked_tool_never_runs_twice_at_once_across_runs_and_waiting_shows_as_progress(
    scenario_config: Any, tmp_path: Path, tool_log: Path
) -> None:
    hooked: list[float] = []
    async with seed_server(scenario_config) as (url, services):
        gate = GatedLocks()
        services.tools.locks = gate
        services.tools.hooks.add_pre(lambda *_: hooked.append(time.time()), tool="exclusive_step")
        async with gate.hold("exclusive_step"):  # hold the tool so both runs have to queue
            runs = [
                asyncio.create_task(drive(tmp_path, url, f"lock-{n}", call("exclusive_step", label=f"t{n}")))
                for n in (1, 2)
            ]
            for _ in range(6000):
                if gate.arrived == 3 or any(r.done() for r in runs):
                    break
                await asyncio.sleep(0.01)
            released = time.time()
        reports = await asyncio.gather(*runs)
    records = intervals(tool_log)
    assert sorted(r["label"] for r in records) == ["t1", "t2"]
    assert all(r["enter"] >= released for r in records)
    assert len(hooked) == 2 and all(t < released for t in hooked)  # hooks ran without waiting
    assert_no_overlap(records)
    for n, report in zip((1, 2), reports, strict=True):
        run = clean(report["steps"][-1])
        start, result, call_id, _ = tool_events(run, "exclusive_step")
        waits = [
            (i, v)
            for i, v in custom(run, "ragstream.progress")
            if v["message"] == "waiting for exclusive_step"
        ]
        assert len(waits) == 1 and start < waits[0][0] < result and waits[0][1]["toolCallId"] == call_id
        assert run["messages"][-1]["content"] == f"exclusive_step: done t{n}"


async def test_a_locked_tool_never_runs_twice_at_once_across_two_workers_sharing_redis(
    scenario_config: Any, tmp_path: Path, tool_log: Path, redis_url: str, redis_prefix: str
) -> None:
    from ragstream.runs import lease_name
    from ragstream.runs.redis import RedisRunLocks, redis_client

    a, b = seed_workers(scenario_config, redis_url, redis_prefix, tool_log)
    client = redis_client(redis_url)
    leases = RedisRunLocks(client, redis_prefix)
    try:
        await asyncio.gather(a.ready(timeout=240), b.ready(timeout=240))  # slow on a loaded machine
        assert await leases.acquire(
            lease_name("tool", "exclusive_step"), "the-test", 30
        )  # both workers must wait
        runs = [
            asyncio.create_task(
                drive(tmp_path, w.url, f"lock-{n}", call("exclusive_step", label=f"w{n}") * 2)
            )
            for n, w in ((1, a), (2, b))
        ]
        await asyncio.sleep(1.0)  # let them queue (correctness does not depend on it)
        released = time.time()
        await leases.release(lease_name("tool", "exclusive_step"), "the-test")
        reports = await asyncio.gather(*runs)
    finally:
        a.stop()
        b.stop()
        await client.aclose()
    for report in reports:
        for step in report["steps"]:
            if step["op"] == "run":
                assert clean(step)["messages"][-1]["content"].startswith("exclusive_step: done w")
    records = intervals(tool_log)
    assert len(records) == 4 and len({r["pid"] for r in records}) == 2  # two calls on each worker
    assert all(r["enter"] >= released for r in records)
    assert_no_overlap(records)


# -- ToolResult ---------------------------------------------------------------------------------


async def test_a_tool_result_shows_title_metadata_and_a_downloadable_attachment_only_to_its_owner(
    scenario_config: Any, tmp_path: Path
) -> None:
    scenario_config.tokens = {"alice": SecretStr("a-token"), "bob": SecretStr("b-token")}
    async with seed_server(scenario_config) as (url, _):
        report = await drive(tmp_path, url, "report", call("make_report", rows=3), token="a-token")
        run = clean(report["steps"][-1])
        start, result, _, events = tool_events(run, "make_report")
        [(index, shown)] = custom(run, "ragstream.tool_result")
        assert start < index < result
        assert shown["title"] == "Squares" and shown["metadata"] == {"rows": 3}
        assert shown["isError"] is False and shown["wasTruncated"] is False
        [attachment] = shown["attachments"]
        assert (attachment["name"], attachment["mime_type"], attachment["size"]) == (
            "squares.csv",
            "text/csv",
            21,
        )
        assert events[result]["content"] == "report with 3 rows"  # the model sees the output only
        assert run["messages"][-1]["content"] == "make_report: report with 3 rows"
        assert run["state"]["tool_attachments"][attachment["ref"]]["name"] == "squares.csv"
        path = f"/threads/report/attachments/{attachment['ref']}"
        async with httpx.AsyncClient(base_url=url) as http:
            mine = await http.get(path, headers={"Authorization": "Bearer a-token"})
            theirs = await http.get(path, headers={"Authorization": "Bearer b-token"})
            missing = await http.get(
                "/threads/report/attachments/att-nope", headers={"Authorization": "Bearer a-token"}
            )
    assert mine.status_code == 200
    assert mine.text == "n,square\n0,0\n1,1\n2,4\n"
    assert mine.headers["content-type"].startswith("text/csv")
    assert "squares.csv" in mine.headers["content-disposition"]
    assert theirs.status_code == 404 and missing.status_code == 404


async def test_an_attachment_over_the_limit_is_recorded_but_not_kept(
    scenario_config: Any, tmp_path: Path
) -> None:
    scenario_config.tool_attachment_max_bytes = 10
    async with seed_server(scenario_config) as (url, _):
        report = await drive(tmp_path, url, "big", call("make_report", rows=3))
        run = clean(report["steps"][-1])
        [(_, shown)] = custom(run, "ragstream.tool_result")
        [attachment] = shown["attachments"]
        async with httpx.AsyncClient(base_url=url) as http:
            fetched = await http.get(f"/threads/big/attachments/{attachment['ref']}")
    assert attachment["omitted"] == "larger than the 10 bytes an attachment may have"
    assert attachment["size"] == 21
    assert fetched.status_code == 404
    assert run["messages"][-1]["content"] == "make_report: report with 3 rows"  # the call itself worked


async def test_an_error_tool_result_reaches_the_post_hooks_and_the_model_as_an_error(
    scenario_config: Any, tmp_path: Path
) -> None:
    seen: list[bool] = []
    async with seed_server(scenario_config) as (url, services):

        def record(_: Any, outcome: ToolOutcome) -> None:
            seen.append(outcome.is_error)

        services.tools.hooks.add_post(record, tool="broken_lookup")
        report = await drive(
            tmp_path, url, "broken", call("broken_lookup", key="k1") + call("long_answer", size=30000)
        )
    broken, long = (clean(s) for s in report["steps"] if s["op"] == "run")
    assert seen == [True]
    [(_, shown)] = custom(broken, "ragstream.tool_result")
    assert shown["isError"] is True and shown["title"] == "Lookup failed"
    assert broken["messages"][-1]["content"] == "Failed: the store is down, 'k1' not found"
    [(_, shown)] = custom(long, "ragstream.tool_result")
    assert shown["wasTruncated"] is True and shown["originalBytes"] == 30000
    _, result, _, events = tool_events(long, "long_answer")
    assert "[output truncated: 30000 characters" in events[result]["content"]


# -- race and ask --------------------------------------------------------------------------------


async def test_race_gives_up_at_its_timeout_and_cleans_up(scenario_config: Any, tmp_path: Path) -> None:
    async with seed_server(scenario_config) as (url, _):
        report = await drive(tmp_path, url, "race", call("slow_fetch", seconds=30, timeout=0.2))
    run = clean(report["steps"][-1])
    assert run["messages"][-1]["content"] == "Failed: slow_fetch gave up after 0.2 s without a result."
    assert run["finished"]["outcome"] == "success"


async def test_race_ends_cleanly_when_the_run_is_stopped(scenario_config: Any, tool_log: Path) -> None:
    async with seed_server(scenario_config) as (url, _), httpx.AsyncClient(base_url=url, timeout=30) as http:
        text = 'call slow_fetch {"seconds": 30, "timeout": 60}'
        frames: list[dict[str, Any]] = []
        async with http.stream("POST", "/agui", json=run_body("race-stop", "r1", text)) as response:
            buffer = ""
            async for chunk in response.aiter_text():
                buffer += chunk
                while "\n\n" in buffer:
                    block, buffer = buffer.split("\n\n", 1)
                    frames += [event for _, event in parse_sse(block + "\n\n")]
                    if frames and frames[-1]["type"] == "TOOL_CALL_END":
                        await asyncio.sleep(0.1)
                        stopped = await http.post("/threads/race-stop/runs/r1/stop")
                        assert stopped.status_code == 202
    assert frames[-1]["type"] == "RUN_FINISHED" and frames[-1]["outcome"]["type"] == "cancelled"
    call_id = next(f["toolCallId"] for f in frames if f["type"] == "TOOL_CALL_END")
    # the raced fetch was cancelled and its cleanup ran
    assert [json.loads(line) for line in tool_log.read_text().splitlines()] == [{"cleanup": call_id}]


async def test_ask_interrupts_the_run_and_reruns_the_tool_with_the_answer(
    scenario_config: Any, tmp_path: Path
) -> None:
    async with seed_server(scenario_config) as (url, _):
        first = await drive(tmp_path, url, "ask", call("pick_year", topic="taxes"))
        async with httpx.AsyncClient(base_url=url) as http:
            view = (await http.get("/threads/ask")).json()
        interrupt_id = first["steps"][-1]["finished"]["interrupts"][0]["id"]
        answer = {
            "interruptId": interrupt_id,
            "status": "resolved",
            "payload": {"approved": True, "answer": "2024"},
        }
        second = await drive(tmp_path, url, "ask", [{"op": "hydrate"}, {"op": "run", "resume": [answer]}])
    asked, answered = clean(first["steps"][-1]), clean(second["steps"][-1])
    assert asked["finished"]["outcome"] == "interrupt"
    [interrupt] = asked["finished"]["interrupts"]
    assert interrupt["metadata"]["kind"] == "question"
    assert interrupt["message"] == interrupt["metadata"]["question"] == "Which year for taxes?"
    schema = interrupt["responseSchema"]
    assert schema["properties"]["answer"] == {"type": "string"} and "answer" in schema["required"]
    assert view["interrupts"] == [interrupt]  # a reloaded page gets the same question
    assert answered["finished"]["outcome"] == "success"
    assert answered["messages"][-1]["content"] == "pick_year: taxes in 2024"


# -- the chat page -------------------------------------------------------------------------------


@pytest.mark.timeout(180)
async def test_the_chat_page_shows_streamed_values_results_attachments_and_questions(
    scenario_config: Any,
) -> None:
    from playwright.async_api import expect

    async with seed_chat(scenario_config, "seed-tools") as (_, chat):
        page = chat.page
        # streamed values appear under the tool call while it still runs
        await chat.type_question('call count_up {"to": 6, "delay": 0.5}')
        tool = page.locator("#log .tool").last
        await expect(tool.locator(".tool-stream li")).to_have_count(2)
        await expect(tool.locator(".tool-status")).to_have_text("running…")
        await chat.wait_idle()
        await expect(tool.locator(".tool-stream li")).to_have_count(6)
        await expect(tool.locator(".tool-stream li").last).to_have_text('{"step":6,"of":6}')
        await expect(chat.answers().last).to_have_text("count_up: {'step': 6, 'of': 6}")
        # a ToolResult: title, metadata and the attachment, downloaded with the page's own request
        await chat.ask('call make_report {"rows": 3}')
        tool = page.locator("#log .tool").last
        await expect(tool.locator(".tool-title")).to_have_text("Squares")
        await expect(tool.locator(".tool-metadata")).to_contain_text("rows")
        async with page.expect_download() as downloading:
            await tool.get_by_role("button", name="Download squares.csv (21 bytes)").click()
        download = await downloading.value
        assert download.suggested_filename == "squares.csv"
        assert Path(await download.path()).read_text() == "n,square\n0,0\n1,1\n2,4\n"
        await chat.reload()  # the thread keeps the attachment: its button is back after a reload
        tool = page.locator("#log .tool").last
        await expect(tool.get_by_role("button", name="Download squares.csv (21 bytes)")).to_be_visible()
        # a tool's question: answered in a card, the tool runs again with the answer
        await chat.type_question('call pick_year {"topic": "taxes"}')
        question = page.locator("#approvals .approval-question")
        await expect(question.locator("h3")).to_have_text("Which year for taxes?")
        before = await chat.answers().count()
        await question.locator("input.question-answer").fill("2024")
        await question.get_by_role("button", name="Answer").click()
        await chat.wait_for_new_answer(before)
        await expect(chat.answers().last).to_have_text("pick_year: taxes in 2024")
        await chat.screenshot("seed-tools")
        chat.assert_clean_console()


@pytest.mark.timeout(180)
async def test_the_chat_page_gives_sizes_in_bytes_kb_and_mb(scenario_config: Any) -> None:
    from playwright.async_api import expect

    scenario_config.tool_attachment_max_bytes = 3_000_000
    async with seed_chat(scenario_config, "seed-sizes") as (_, chat):
        page = chat.page
        for rows, label in ((200, "1.7 KB"), (150_000, "2.5 MB")):  # 1,753 and 2,592,650 bytes
            await chat.ask(f'call make_report {{"rows": {rows}}}')
            tool = page.locator("#log .tool").last
            await expect(tool.locator(".tool-attachment")).to_have_text(f"Download squares.csv ({label})")
        await chat.ask('call long_answer {"size": 30000}')
        await expect(page.locator("#log .tool").last.locator(".tool-truncated")).to_have_text(
            "The model saw part of a 29.3 KB result."
        )
        await chat.reload()  # the attachments' sizes come from the saved state alike
        await expect(page.locator("#log .tool-attachment")).to_have_text(
            ["Download squares.csv (1.7 KB)", "Download squares.csv (2.5 MB)"]
        )
        chat.assert_clean_console()


# -- the snippets of docs/tools.md, run verbatim -----------------------------------------------


async def test_the_docs_tool_snippets_work_as_written(scenario_config: Any, tmp_path: Path) -> None:
    tools_dir = tmp_path / "readme_tools"
    tools_dir.mkdir()
    for marker, file in (
        ("a streaming tool", "streaming.py"),
        ("a locked tool", "locked.py"),
        ("a ToolResult with an attachment", "result.py"),
    ):
        (tools_dir / file).write_text(snippet(marker))
    scenario_config.tool_dirs = [tools_dir]
    app = scenario_app(scenario_config)
    async with serve(app) as url:
        services = app.state.services
        assert sorted(services.tools.registry.tools) == [
            "check_links",
            "export_orders",
            "rebuild_search_index",
        ]
        assert services.tools.registry.tools["rebuild_search_index"].options.lock
        gate = GatedLocks()
        services.tools.locks = gate
        async with gate.hold("rebuild_search_index"):
            rebuilds = [
                asyncio.create_task(drive(tmp_path, url, f"readme-lock-{n}", call("rebuild_search_index")))
                for n in (1, 2)
            ]
            for _ in range(6000):
                if gate.arrived == 3 or any(r.done() for r in rebuilds):
                    break
                await asyncio.sleep(0.01)
        urls = ["https://ok.example", "http://plain.example"]
        report = await drive(
            tmp_path, url, "readme", call("check_links", urls=urls) + call("export_orders", month="2026-10")
        )
        checked, exported = (clean(s) for s in report["steps"] if s["op"] == "run")
        [(_, shown)] = custom(exported, "ragstream.tool_result")
        async with httpx.AsyncClient(base_url=url) as http:
            download = await http.get(f"/threads/readme/attachments/{shown['attachments'][0]['ref']}")
        for rebuilt in await asyncio.gather(*rebuilds):
            run = clean(rebuilt["steps"][-1])
            assert run["messages"][-1]["content"] == "rebuild_search_index: index rebuilt"
            waits = [v["message"] for _, v in custom(run, "ragstream.progress")]
            assert waits == ["waiting for rebuild_search_index"]
    assert [v["value"]["url"] for _, v in custom(checked, "ragstream.tool_stream")] == urls
    assert checked["messages"][-1]["content"] == (
        "check_links: 1 of 2 links are broken: ['http://plain.example']"
    )
    assert shown["title"] == "Orders 2026-10" and shown["metadata"] == {"orders": 2, "month": "2026-10"}
    assert (
        exported["messages"][-1]["content"]
        == "export_orders: Exported 2 orders for 2026-10; the user has the file."
    )
    assert download.status_code == 200 and download.text == "order,total\n1001,25.00\n1002,12.50\n"
