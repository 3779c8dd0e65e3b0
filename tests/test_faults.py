"""Faults during runs, through the real server on loopback: a clear RUN_ERROR or 503, nothing lost.

Every fault follows the same plan: a thread with good saved state (a successful run first), then the
faulty run. The faulty run changes the thread's state first (a ``note``, sent to the client as a
STATE_DELTA) so that "nothing half-written" is tested both ways: the stream must end with exactly one
RUN_ERROR whose message says what happened without leaking internals (no secret, path or traceback),
applying the stream's state events must bring the client back to the last saved state (the server
restores it with a STATE_SNAPSHOT), and ``GET /threads/{id}`` must show exactly the view it showed
before (state, messages, version, title). Meanwhile and afterwards other threads are served, and
the same thread continues from its last good state.

Faults: a tool raising; the model raising mid-stream; the model hanging past the run timeout; the
data directory becoming read-only (a read-only bind mount of the data directory when the machine
allows it, and a read-only store connection); the knowledge base directory disappearing while the
server runs, and a server started without one.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic_ai import Agent, DeferredToolRequests, FunctionToolset, RunContext
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from rag_tools import ChatDeps, Toolkit, build_chat_toolkit, emit_state_update
from rag_tools.state import StateModel
from tests.protocol import check_stream, last_user_text, parse_sse, run_body
from tests.servers import serve

SECRET = "postgres://admin:hunter2@db.internal:5432/prod"

# -- an agent whose keywords trigger faults -------------------------------------------------------


class Journal(StateModel):
    journal: list[str] = []


@dataclass
class Hooks:
    """What the test lets the ``freeze`` tool do in the middle of a run."""

    freeze: Callable[[], Awaitable[None]] | None = None
    frozen: asyncio.Event = field(default_factory=asyncio.Event)


def fault_toolset(hooks: Hooks) -> FunctionToolset[Any]:
    toolset: FunctionToolset[Any] = FunctionToolset(id="faults")

    @toolset.tool
    async def note(ctx: RunContext[ChatDeps], text: str) -> str:
        """Append to the thread's journal (a state change the client sees at once)."""
        journal = ctx.deps.tool_context.get_or_create("journal", Journal)
        journal.journal = [*journal.journal, text]
        ctx.deps.tool_context.mark_changed("journal")
        await emit_state_update(ctx)
        return f"noted {text}"

    @toolset.tool
    async def explode(ctx: RunContext[ChatDeps]) -> str:
        """A tool that fails with an error carrying internals."""
        raise RuntimeError(f"tool lost its connection to {SECRET} at /srv/ragstream/secret.py:42")

    @toolset.tool
    async def freeze(ctx: RunContext[ChatDeps]) -> str:
        """Make the data directory read-only (what the test put in ``hooks.freeze``)."""
        assert hooks.freeze is not None
        await hooks.freeze()
        hooks.frozen.set()
        return "frozen"

    return toolset


def _call(name: str, args: dict[str, Any], n: int = 0) -> DeltaToolCalls:
    return {n: DeltaToolCall(name=name, json_args=json.dumps(args), tool_call_id=f"{name}-{n}")}


async def _fault_stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    """``<keyword> <text>``: every run first notes ``<keyword> <text>`` in the journal, then

    - ``ok``: answers;
    - ``search``: searches for ``<text>`` too (in parallel with the note) and answers citing;
    - ``toolboom``: calls ``explode``, which raises;
    - ``midstream``: streams part of an answer, then the model raises;
    - ``hang``: the model never answers;
    - ``readonly``: calls ``freeze`` (the data directory becomes read-only), then answers.
    """
    text = last_user_text(messages)
    keyword, _, rest = text.partition(" ")
    last = messages[-1]
    returns = [
        p for p in (last.parts if isinstance(last, ModelRequest) else []) if isinstance(p, ToolReturnPart)
    ]
    if not returns:
        calls = _call("note", {"text": text})
        if keyword == "search":
            calls |= _call("search", {"query": rest}, 1)
        yield calls
        return
    called = {
        p.tool_name
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    }
    if keyword == "toolboom" and "explode" not in called:
        yield _call("explode", {})
    elif keyword == "readonly" and "freeze" not in called:
        yield _call("freeze", {})
    elif keyword == "midstream":
        for word in ("Here", "is", "half", "an"):
            yield word + " "
        raise RuntimeError(f"model stream broke while talking to {SECRET}")
    elif keyword == "hang":
        yield "Thinking "
        await asyncio.sleep(3600)
        yield "never"
    else:
        answer = f"Noted {rest}."
        for part in returns:
            if part.tool_name == "search":
                content = (
                    part.content if isinstance(part.content, dict) else json.loads(part.model_response_str())
                )
                hits = content.get("results", [])
                answer += (
                    f" Found it in {hits[0]['title']} [{hits[0]['citation']}]." if hits else " Nothing found."
                )
        yield answer


def fault_agent(toolkit: Toolkit, hooks: Hooks) -> Agent[ChatDeps, Any]:
    return Agent(
        FunctionModel(stream_function=_fault_stream, model_name="faults"),
        deps_type=ChatDeps,
        output_type=[str, DeferredToolRequests],
        toolsets=[*toolkit.toolsets, fault_toolset(hooks)],
        capabilities=toolkit.capabilities,
    )


@dataclass
class Server:
    client: httpx.AsyncClient
    services: Any
    hooks: Hooks
    data_dir: Path


@asynccontextmanager
async def fault_server(config: Any) -> AsyncIterator[Server]:
    from ragstream.app import create_app

    hooks = Hooks()
    toolkit = build_chat_toolkit(config)
    toolkit.namespaces["journal"] = Journal
    app = create_app(config, agent=fault_agent(toolkit, hooks), toolkit=toolkit)
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        yield Server(client, app.state.services, hooks, config.data_dir)


@pytest.fixture
def config(scenario_config: Any) -> Any:
    scenario_config.tool_dirs = []
    return scenario_config


# -- the client side ------------------------------------------------------------------------------


async def run(
    client: httpx.AsyncClient, thread: str, run_id: str, text: str, state: Any
) -> tuple[list[dict[str, Any]], Any]:
    """A run as a client makes it: (its events, the client's state after applying them)."""
    response = await client.post("/agui", json=run_body(thread, run_id, text, state))
    assert response.status_code == 200, response.text
    events = [e for _, e in parse_sse(response.text)]
    return events, check_stream(events, state)


async def good_run(client: httpx.AsyncClient, thread: str, run_id: str, text: str, state: Any) -> Any:
    events, state = await run(client, thread, run_id, text, state)
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    view = await thread_view(client, thread)
    assert view["state"] == state
    return state


async def thread_view(client: httpx.AsyncClient, thread: str) -> dict[str, Any]:
    response = await client.get(f"/threads/{thread}")
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def assert_clear_error(event: dict[str, Any], codes: set[str]) -> None:
    """A RUN_ERROR that says what happened and nothing internal."""
    assert event["type"] == "RUN_ERROR", event
    message = event["message"]
    assert message.strip()
    for leak in ("hunter2", "postgres://", "Traceback", "/srv/", "/tmp/", str(Path.cwd()), ".py"):
        assert leak not in message, f"RUN_ERROR leaks {leak!r}: {message}"
    assert event.get("code") in codes, event


async def setup_thread(server: Server, thread: str) -> tuple[Any, dict[str, Any]]:
    """A thread with one successful run: (the client's state, the thread's view)."""
    state = await good_run(server.client, thread, f"{thread}-good", "ok first", {})
    view = await thread_view(server.client, thread)
    assert view["state"]["journal"] == ["ok first"]
    return state, view


async def assert_intact_and_serving(server: Server, thread: str, before: dict[str, Any], state: Any) -> None:
    """The thread shows exactly its last good view; it continues from it; other threads are served."""
    after = await thread_view(server.client, thread)
    assert after == before, "the failed run changed the thread"
    assert after["activeRunId"] is None
    other = await good_run(server.client, f"{thread}-other", f"{thread}-other-1", "ok elsewhere", {})
    assert other["journal"] == ["ok elsewhere"]
    state = await good_run(server.client, thread, f"{thread}-next", "ok again", state)
    assert state["journal"] == [*before["state"]["journal"], "ok again"]
    assert (await thread_view(server.client, thread))["version"] == before["version"] + 1


async def faulty_run(
    server: Server, thread: str, text: str, state: Any, codes: set[str]
) -> list[dict[str, Any]]:
    """The faulty run, alongside a successful run on another thread; returns the faulty run's events."""
    faulty = asyncio.create_task(run(server.client, thread, f"{thread}-faulty", text, state))
    beside = await good_run(server.client, f"{thread}-beside", f"{thread}-beside-1", "ok beside", {})
    assert beside["journal"] == ["ok beside"]
    events, client_state = await asyncio.wait_for(faulty, 60)
    assert_clear_error(events[-1], codes)
    assert client_state == state, "the client was left with state the server did not keep"
    return events


# -- the faults -----------------------------------------------------------------------------------


async def test_a_tool_raising_is_a_run_error_and_changes_nothing(config: Any) -> None:
    async with fault_server(config) as server:
        state, before = await setup_thread(server, "tool")
        events = await faulty_run(server, "tool", "toolboom now", state, {"internal_error"})
        types = [e["type"] for e in events]
        assert "STATE_DELTA" in types  # the note reached the client before the tool failed...
        assert types[-2] == "STATE_SNAPSHOT"  # ...and the last saved state was restated before RUN_ERROR
        await assert_intact_and_serving(server, "tool", before, state)
        # a first run that fails leaves no thread behind
        events, _ = await run(server.client, "tool-new", "tool-new-1", "toolboom first", {})
        assert_clear_error(events[-1], {"internal_error"})
        assert (await server.client.get("/threads/tool-new")).status_code == 404


async def test_the_model_raising_mid_stream_is_a_run_error_and_changes_nothing(config: Any) -> None:
    async with fault_server(config) as server:
        state, before = await setup_thread(server, "model")
        events = await faulty_run(server, "model", "midstream please", state, {"internal_error"})
        streamed = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
        assert streamed.startswith("Here is half")  # it failed mid-answer, not before it
        await assert_intact_and_serving(server, "model", before, state)


async def test_the_model_hanging_past_the_run_timeout_is_a_run_error(config: Any) -> None:
    config.run_timeout = 1.0
    async with fault_server(config) as server:
        state, before = await setup_thread(server, "hang")
        events = await faulty_run(server, "hang", "hang forever", state, {"timeout"})
        assert "1 s" in events[-1]["message"]
        await assert_intact_and_serving(server, "hang", before, state)


# -- the data directory becomes read-only ---------------------------------------------------------


def _mount(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", *args], capture_output=True, text=True, check=False)


def bind_mounts_work(tmp: Path) -> bool:
    probe = tmp / "mount-probe"
    probe.mkdir()
    if _mount("--bind", str(probe), str(probe)).returncode != 0:
        return False
    try:
        return _mount("-o", "remount,bind,ro", str(probe)).returncode == 0
    finally:
        subprocess.run(["umount", "-l", str(probe)], check=False)


@asynccontextmanager
async def read_only(server: Server, how: str) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """A ``freeze`` that makes the data directory read-only; undone when the block ends.

    ``mount``: a read-only bind mount over the data directory. The store's open connection was made
    through the writable mount and would keep writing, so freezing also closes it: the store reopens
    through the read-only mount (as after a restart on a read-only volume). ``connection``: the
    store's connection is swapped for a read-only one (reads work, writes fail).
    """
    store = server.services.store.inner  # the SQLite store under the metrics' and traces' wrapper
    data = server.data_dir
    mounted = False

    async def freeze() -> None:
        nonlocal mounted
        await store.close()
        if how == "mount":
            assert _mount("--bind", str(data), str(data)).returncode == 0
            mounted = True
            result = _mount("-o", "remount,bind,ro", str(data))
            assert result.returncode == 0, result.stderr
        else:
            store._conn = sqlite3.connect(
                f"file:{store.path}?mode=ro", uri=True, check_same_thread=False, isolation_level=None
            )

    try:
        yield freeze
    finally:
        if mounted:
            # lazily: LanceDB keeps files it opened through the mount; they stay readable
            subprocess.run(["umount", "-l", str(data)], check=True)
        await store.close()  # the next call reopens the store through the writable directory


@pytest.mark.parametrize("how", ["mount", "connection"])
async def test_a_read_only_data_directory_fails_the_save_and_keeps_the_last_state(
    config: Any, tmp_path: Path, how: str
) -> None:
    if how == "mount" and not bind_mounts_work(tmp_path):
        pytest.skip("bind mounts are not permitted here (needs root with CAP_SYS_ADMIN)")
    async with fault_server(config) as server:
        state, before = await setup_thread(server, "ro")
        async with read_only(server, how) as freeze:
            server.hooks.freeze = freeze
            events, client_state = await run(server.client, "ro", "ro-faulty", "readonly now", state)
            assert server.hooks.frozen.is_set()
            assert_clear_error(events[-1], {"store_unavailable"})
            assert "unchanged" in events[-1]["message"]
            assert client_state == state, "the client was left with state the server did not keep"
            if how == "connection":  # the store still reads: the thread is shown as it was
                assert await thread_view(server.client, "ro") == before
            # while the store cannot write, new runs are refused or fail cleanly, never 500
            response = await server.client.post("/agui", json=run_body("ro-new", "ro-new-1", "ok new", {}))
            if response.status_code == 200:
                events = [e for _, e in parse_sse(response.text)]
                check_stream(events, {})
                assert_clear_error(events[-1], {"store_unavailable"})
            else:
                assert response.status_code == 503, response.text
                assert response.json()["error"]["code"] == "store_unavailable"
                assert response.headers["retry-after"] == "5"
            readiness = await server.client.get("/ready")
            if how == "mount":
                assert readiness.status_code == 503, readiness.text
                assert readiness.json()["error"]["code"] == "store_unavailable"
        # writable again: nothing was lost, runs work on this thread and others
        await assert_intact_and_serving(server, "ro", before, state)
        assert (await server.client.get("/threads/ro-new")).status_code == 404
        assert (await server.client.get("/ready")).status_code == 200


async def test_a_store_that_cannot_open_does_not_leak_file_descriptors(config: Any, tmp_path: Path) -> None:
    """Every request while the data directory is read-only opens the SQLite file once more; each
    attempt must close what it opened (here without help from the garbage collector)."""
    if not bind_mounts_work(tmp_path):
        pytest.skip("bind mounts are not permitted here (needs root with CAP_SYS_ADMIN)")
    async with fault_server(config) as server:
        await setup_thread(server, "fds")
        store_file = str(server.services.store.inner.path)

        def store_fds() -> int:
            count = 0
            for fd in os.listdir("/proc/self/fd"):
                with suppress(OSError):
                    count += os.readlink(f"/proc/self/fd/{fd}").startswith(store_file)
            return count

        async with read_only(server, "mount") as freeze:
            await freeze()
            gc.collect()
            gc.disable()
            try:
                for _ in range(20):
                    assert (await server.client.get("/ready")).status_code == 503
                leaked = store_fds()
            finally:
                gc.enable()
                gc.collect()
        assert leaked == 0, f"{leaked} descriptors of {store_file} left open by 20 failed opens"


# -- the knowledge base goes missing --------------------------------------------------------------


@asynccontextmanager
async def kb_moved_away(data_dir: Path) -> AsyncIterator[None]:
    kb, away = data_dir / "kb", data_dir / "kb-away"
    kb.rename(away)
    try:
        yield
    finally:
        if kb.exists():  # something recreated it meanwhile: put the real one back
            shutil.rmtree(kb)
        away.rename(kb)


async def test_a_missing_knowledge_base_is_a_clear_run_error_and_ready_503(config: Any) -> None:
    async with fault_server(config) as server:
        state = await good_run(server.client, "kb", "kb-good", "search nightly backups", {})
        before = await thread_view(server.client, "kb")
        assert "Found it in" in before["messages"][-1]["content"]
        async with kb_moved_away(server.data_dir):
            readiness = await server.client.get("/ready")
            assert readiness.status_code == 503, readiness.text
            assert readiness.json()["error"]["code"] == "knowledge_base_unavailable"
            assert readiness.json()["error"]["message"] == "not ready: the knowledge base is unavailable"
            assert (await server.client.get("/health")).status_code == 200
            events, client_state = await run(server.client, "kb", "kb-faulty", "search opening hours", state)
            assert events[-1]["type"] == "RUN_ERROR", events[-1]
            assert client_state == state, "the client was left with state the server did not keep"
            assert await thread_view(server.client, "kb") == before
            # runs that do not need the knowledge base are served meanwhile
            other = await good_run(server.client, "kb-other", "kb-other-1", "ok without kb", {})
            assert other["journal"] == ["ok without kb"]
            failed = events[-1]
        assert (await server.client.get("/ready")).status_code == 200
        state = await good_run(server.client, "kb", "kb-again", "search opening hours", state)
        assert len(state["journal"]) == 2
        assert_clear_error(failed, {"knowledge_base_unavailable"})


async def test_documents_listing_is_503_while_the_knowledge_base_is_missing(config: Any) -> None:
    async with fault_server(config) as server:
        assert (await server.client.get("/documents")).status_code == 200
        async with kb_moved_away(server.data_dir):
            response = await server.client.get("/documents")
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == "knowledge_base_unavailable"
        assert response.headers["retry-after"] == "5"
        assert (await server.client.get("/documents")).status_code == 200


async def test_a_server_started_without_a_knowledge_base_answers_clearly(config: Any) -> None:
    shutil.rmtree(config.data_dir / "kb")
    async with fault_server(config) as server:
        readiness = await server.client.get("/ready")
        assert readiness.status_code in (200, 503), readiness.text
        if readiness.status_code == 200:
            assert readiness.json()["documents"] == 0  # says plainly that there is nothing to search
        else:
            assert readiness.json()["error"]["code"] == "knowledge_base_unavailable"
        events, _ = await run(server.client, "nokb", "nokb-1", "search nightly backups", {})
        if events[-1]["type"] == "RUN_ERROR":
            assert_clear_error(events[-1], {"knowledge_base_unavailable"})
        else:
            assert "Nothing found" in (await thread_view(server.client, "nokb"))["messages"][-1]["content"]
        await good_run(server.client, "nokb-other", "nokb-other-1", "ok anyway", {})
