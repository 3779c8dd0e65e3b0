"""``ragstream mcp``: the knowledge base as an MCP server, tested with the real ``mcp`` client.

Over stdio the client starts ``ragstream mcp`` as a subprocess; over streamable HTTP it talks to
uvicorn on a loopback port, both to ``ragstream mcp --http``'s app and to ``/mcp`` inside the chat
server. The knowledge base is the sample corpus plus two restricted documents (hr's payroll, eng's
on-call rota), and every tool is called as principals of different groups: each sees 0 passages,
documents or citations of the other's document. Writes exist only with the flag, for editors. Last,
a pydantic-ai agent reaches ragstream only through ``pydantic_ai.mcp.MCPToolset``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset, load_mcp_toolsets
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from rag_tools.kb import KnowledgeBase
from ragstream.app import create_app, create_mcp_app
from ragstream.config import AppConfig
from tests.conftest import CORPUS_DOCUMENTS
from tests.oidc_provider import AUDIENCE, IdentityProvider
from tests.servers import ROOT, serve, served
from tests.snippets import snippet_json

pytestmark = pytest.mark.timeout(240)

READ_TOOLS = {"search", "list_documents", "read_document", "ask"}
PAY = "# Payroll\n\nSalaries are paid on the 25th of each month by the zebra payroll office.\n"
ROTA = "# On-call rota\n\nThe quokka team's on-call rota hands over every Monday at nine.\n"
TOKENS = {
    "alice": {"token": "alice-secret", "groups": ["hr"]},
    "bob": {"token": "bob-secret", "groups": ["eng"]},
    "carol": {"token": "carol-secret", "groups": ["kb-editors", "hr"]},
    "admin": {"token": "admin-secret"},
}


@pytest.fixture(scope="module")
def mcp_template(corpus_kb_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory: the sample corpus, hr's payroll and eng's rota (copy before writing)."""
    import asyncio

    data = tmp_path_factory.mktemp("mcp") / "data"
    shutil.copytree(corpus_kb_template, data / "kb")

    async def restricted() -> None:
        async with KnowledgeBase(data / "kb") as kb:
            await kb.ingest_bytes(PAY.encode(), name="payroll.md", groups=["hr"])
            await kb.ingest_bytes(ROTA.encode(), name="on-call.md", groups=["eng"])

    asyncio.run(restricted())
    return data


@pytest.fixture
def data(mcp_template: Path, tmp_path: Path) -> Path:
    target = tmp_path / "data"
    shutil.copytree(mcp_template, target)
    return target


def _config(data: Path, **settings: Any) -> AppConfig:
    return AppConfig(
        data_dir=data, tokens=TOKENS, editors=["admin"], editor_groups=["kb-editors"], **settings
    )


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool's structured result; the call must succeed."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def refused(session: ClientSession, tool: str, **arguments: Any) -> str:
    """The message of a tool call that must fail."""
    result = await session.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    return " ".join(getattr(block, "text", "") for block in result.content)


def _docs_entry(name: str) -> dict[str, Any]:
    """The ``ragstream`` entry of the desktop-client configuration of docs/mcp.md marked ``name``
    (``mcp over stdio``: a ``command``; ``mcp over http``: a ``url``)."""
    return snippet_json(name)["mcpServers"]["ragstream"]


@asynccontextmanager
async def stdio_session(
    data: Path, *args: str, env: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    """The desktop configuration of docs/mcp.md (``ragstream mcp --data-dir DIR``) on ``data``, plus
    ``args``, started as a subprocess, and a client session over its stdio."""
    entry = _docs_entry("mcp over stdio")
    command = Path(sys.executable).parent / entry["command"]  # the console script of this install
    given = list(entry["args"])
    given[given.index("--data-dir") + 1] = str(data)
    params = StdioServerParameters(
        command=str(command),
        args=[*given, *args],
        env={"LANCEDB_LOG": "error", **(env or {})},
        cwd=str(ROOT),
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@asynccontextmanager
async def http_session(url: str, token: str | None) -> AsyncIterator[ClientSession]:
    """A client session over streamable HTTP to ``url``/mcp, bearing ``token``."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=120) as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def _leaves(error: BaseException) -> list[type[BaseException]]:
    """The types of the errors an error groups (itself when it groups none)."""
    if isinstance(error, BaseExceptionGroup):
        return [kind for inner in error.exceptions for kind in _leaves(inner)]
    return [type(error)]


async def _tools(session: ClientSession) -> set[str]:
    return {tool.name for tool in (await session.list_tools()).tools}


async def _document_id(session: ClientSession, query: str) -> str:
    (found,) = (await call(session, "list_documents", query=query))["documents"]
    return str(found["document_id"])


# -- stdio -----------------------------------------------------------------------------------


async def test_every_tool_over_stdio_as_the_local_operator(data: Path) -> None:
    """The local operator (no token) reads every document, restricted ones included; each tool
    answers, bad input is a clear tool error, and there are no write tools without the flag."""
    async with stdio_session(data) as session:
        assert await _tools(session) == READ_TOOLS
        listing = await call(session, "list_documents", page_size=200)
        assert listing["total"] == CORPUS_DOCUMENTS + 2
        pay_id = await _document_id(session, "payroll")

        found = await call(session, "search", query="When are salaries paid?", limit=3)
        top = found["passages"][0]
        assert (top["document_id"], top["title"]) == (pay_id, "Payroll")
        assert "25th" in top["text"]
        text_only = await call(session, "search", query="salaries", mode="text", documents=["payroll"])
        assert {p["document_id"] for p in text_only["passages"]} == {pay_id}

        whole = await call(session, "read_document", document=pay_id)
        assert whole["document"]["uri"] == "payroll.md"
        assert "zebra payroll office" in whole["content"]
        assert whole["next_offset"] is None
        by_uri = await call(session, "read_document", document="payroll.md", offset=10, max_chars=20)
        assert by_uri["content"] == whole["content"][10:30]
        assert by_uri["next_offset"] == 30
        cited = await call(session, "read_document", document=pay_id, passage_id=top["passage_id"])
        assert cited["passage"]["text"] == top["text"]
        assert cited["content"] is None

        answer = await call(session, "ask", question="When are salaries paid?")
        assert "25th" in answer["answer"]
        assert answer["citations"]
        for citation in answer["citations"]:  # each citation reads back as the passage it quotes
            assert f"[{citation['index']}]" in answer["answer"]
            passage = await call(
                session, "read_document", document=citation["document_id"], passage_id=citation["passage_id"]
            )
            assert passage["passage"]["text"].startswith(citation["text"][:200])

        assert "limit" in await refused(session, "search", query="pay", limit=0)
        assert "not found" in await refused(session, "read_document", document="no-such-document")
        assert "no passage" in await refused(session, "read_document", document=pay_id, passage_id="nope")
        assert "ingest_document" in await refused(session, "ingest_document", name="a.md", content="x")


async def test_stdio_writes_need_the_flag_and_an_editor(data: Path) -> None:
    """With --allow-writes the local operator ingests and deletes; as a --token principal who is
    no editor, writes are refused, and reads are that principal's own."""
    async with stdio_session(data, "--allow-writes") as session:
        assert await _tools(session) == READ_TOOLS | {"ingest_document", "delete_document"}
        added = await call(
            session,
            "ingest_document",
            name="ledger.md",
            content="# Ledger\n\nThe capybara ledger closes at noon.",
        )
        assert (added["status"], added["chunks"]) == ("added", 1)
        hits = await call(session, "search", query="capybara ledger", limit=1)
        assert hits["passages"][0]["document_id"] == added["document_id"]
        assert (await call(session, "delete_document", document_id=added["document_id"]))[
            "status"
        ] == "deleted"
        hits = await call(session, "search", query="capybara ledger", limit=3)
        assert added["document_id"] not in {p["document_id"] for p in hits["passages"]}

    env = {"RAGSTREAM_TOKENS": json.dumps(TOKENS), "RAGSTREAM_EDITORS": '["admin"]'}
    async with stdio_session(data, "--allow-writes", "--token", "bob-secret", env=env) as session:
        listing = await call(session, "list_documents", page_size=200)
        assert listing["total"] == CORPUS_DOCUMENTS + 1  # the public ones and eng's rota
        assert "payroll.md" not in {d["uri"] for d in listing["documents"]}
        message = await refused(session, "ingest_document", name="ledger.md", content="# Ledger\n\nText.")
        assert "may read and search the knowledge base but not change it" in message


def test_a_bad_token_or_a_missing_extra_is_one_line(data: Path) -> None:
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAGSTREAM_TOKENS": json.dumps(TOKENS)}
    done = subprocess.run(
        [sys.executable, "-m", "ragstream.cli", "mcp", "--data-dir", str(data), "--token", "wrong"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.strip() == "ragstream: --token: invalid bearer token"
    # as without the extra: the SDK cannot be imported
    blocker = data / "no-mcp"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text("import sys\nsys.modules['mcp'] = None\n")
    done = subprocess.run(
        [sys.executable, "-m", "ragstream.cli", "mcp", "--data-dir", str(data)],
        env={**env, "PYTHONPATH": f"{blocker}{os.pathsep}{ROOT}"},
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2
    assert (
        done.stderr.strip() == "ragstream: the MCP server needs the mcp extra: pip install 'ragstream[mcp]'"
    )


# -- streamable HTTP -------------------------------------------------------------------------


async def test_two_principals_see_only_their_documents_through_every_tool(data: Path) -> None:
    """alice (hr) and bob (eng) call every tool over HTTP: neither gets a passage, a listing, a
    read or a citation of the other's document, by id, uri, title or question."""
    async with serve(create_mcp_app(_config(data))) as url:
        async with http_session(url, "admin-secret") as admin:
            pay_id = await _document_id(admin, "payroll")
            rota_id = await _document_id(admin, "on-call")
        async with http_session(url, "alice-secret") as alice, http_session(url, "bob-secret") as bob:
            assert await _tools(alice) == READ_TOOLS  # read-only without the flag
            for own, other, session, question in (
                (pay_id, rota_id, alice, "When are salaries paid by the zebra payroll office?"),
                (rota_id, pay_id, bob, "When does the quokka team's on-call rota hand over?"),
            ):
                for q in (question, "When are salaries paid?", "quokka on-call rota Monday"):
                    for mode in ("hybrid", "vector", "text"):
                        hits = await call(session, "search", query=q, limit=20, mode=mode)
                        assert other not in {p["document_id"] for p in hits["passages"]}
                mine = await call(session, "search", query=question, limit=1)
                assert mine["passages"][0]["document_id"] == own
                listing = await call(session, "list_documents", page_size=200)
                assert listing["total"] == CORPUS_DOCUMENTS + 1
                assert other not in {d["document_id"] for d in listing["documents"]}
                for query in ("payroll", "on-call"):
                    found = await call(session, "list_documents", query=query)
                    assert other not in {d["document_id"] for d in found["documents"]}
                uri = "payroll.md" if other == pay_id else "on-call.md"
                for document in (other, uri, "Payroll" if other == pay_id else "On-call rota"):
                    assert "not found" in await refused(session, "read_document", document=document)
                assert "not found" in await refused(
                    session, "read_document", document=other, passage_id=f"{other}:x:0"
                )
                for q in (question, "When are salaries paid?", "When does the on-call rota hand over?"):
                    answer = await call(session, "ask", question=q)
                    assert other not in {c["document_id"] for c in answer["citations"]}
                secret = "zebra" if other == pay_id else "quokka"
                answer = await call(session, "ask", question=f"What does the {secret} do?")
                assert secret not in answer["answer"]
            answer = await call(alice, "ask", question="When are salaries paid?")
            assert pay_id in {c["document_id"] for c in answer["citations"]}


async def test_ragstream_mcp_http_serves_on_the_given_port(data: Path) -> None:
    """``ragstream mcp --http --port N`` as its own process, signing callers in from the environment."""
    env = {"RAGSTREAM_TOKENS": json.dumps(TOKENS)}
    async with (
        served(env, data, command=("mcp", "--http"), probe="POST /mcp", ready=401) as url,
        http_session(url, "alice-secret") as alice,
    ):
        hits = await call(alice, "search", query="When are salaries paid?", limit=1)
        assert hits["passages"][0]["title"] == "Payroll"


async def test_unauthenticated_requests_are_refused_with_401(data: Path) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    headers = {"Accept": "application/json, text/event-stream"}
    async with serve(create_mcp_app(_config(data))) as url, httpx.AsyncClient(base_url=url) as http:
        missing = await http.post("/mcp", json=initialize, headers=headers)
        assert missing.status_code == 401
        assert missing.json()["error"]["message"] == "missing bearer token"
        assert missing.headers["www-authenticate"] == "Bearer"
        wrong = await http.post("/mcp", json=initialize, headers={**headers, "Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        assert wrong.json()["error"]["message"] == "invalid bearer token"
        signed_in = await http.post(
            "/mcp", json=initialize, headers={**headers, "Authorization": "Bearer bob-secret"}
        )
        assert signed_in.status_code == 200
        with pytest.raises(BaseExceptionGroup) as raised:  # the SDK's client cannot even initialize
            async with http_session(url, None):
                pass
        assert _leaves(raised.value) == [MCPError]


async def test_writes_only_with_the_flag_and_only_for_editors(data: Path) -> None:
    async with serve(create_mcp_app(_config(data), allow_writes=True)) as url:
        async with http_session(url, "admin-secret") as admin:
            assert await _tools(admin) == READ_TOOLS | {"ingest_document", "delete_document"}
            pay_id = await _document_id(admin, "payroll")
            rota_id = await _document_id(admin, "on-call")
        async with (
            http_session(url, "bob-secret") as bob,
            http_session(url, "carol-secret") as carol,
            http_session(url, "alice-secret") as alice,
            http_session(url, "admin-secret") as admin,
        ):
            not_editor = "may read and search the knowledge base but not change it"
            assert not_editor in await refused(bob, "ingest_document", name="x.md", content="# X\n\nx")
            assert not_editor in await refused(bob, "delete_document", document_id=rota_id)
            # a group editor: not another group's document (it does not exist for carol) ...
            assert "not found" in await refused(carol, "delete_document", document_id=rota_id)
            taken = await refused(carol, "ingest_document", name="on-call.md", content="# Mine\n\ntext")
            assert "taken by a document you may not change" in taken
            # ... nor groups carol is not a member of
            message = await refused(
                carol, "ingest_document", name="x.md", content="# X\n\nThe ocelot memo.", groups=["eng"]
            )
            assert "may only give documents groups it is a member of" in message
            added = await call(
                carol,
                "ingest_document",
                name="memo.md",
                content="# Memo\n\nThe ocelot memo is due.",
                groups=["hr"],
            )
            assert added["status"] == "added"
            hits = await call(alice, "search", query="ocelot memo", limit=1)
            assert hits["passages"][0]["document_id"] == added["document_id"]
            hits = await call(bob, "search", query="ocelot memo", limit=20)
            assert added["document_id"] not in {p["document_id"] for p in hits["passages"]}
            assert (await call(carol, "delete_document", document_id=added["document_id"]))[
                "status"
            ] == "deleted"
            assert (await call(admin, "delete_document", document_id=pay_id))["status"] == "deleted"
            assert "not found" in await refused(alice, "read_document", document=pay_id)


async def test_mcp_inside_the_chat_server_behind_the_setting(data: Path) -> None:
    """``RAGSTREAM_MCP=true`` serves /mcp in ``create_app``, signed in as /agui is; off by default."""
    async with serve(create_app(_config(data))) as url, httpx.AsyncClient(base_url=url) as http:
        assert (
            await http.post("/mcp", json={}, headers={"Authorization": "Bearer bob-secret"})
        ).status_code == 404
    async with serve(create_app(_config(data, mcp=True))) as url:
        async with http_session(url, "alice-secret") as alice, http_session(url, "bob-secret") as bob:
            assert await _tools(alice) == READ_TOOLS
            pay = await call(alice, "search", query="When are salaries paid?", limit=1)
            assert pay["passages"][0]["title"] == "Payroll"
            hits = await call(bob, "search", query="When are salaries paid?", limit=20)
            assert "Payroll" not in {p["title"] for p in hits["passages"]}
        async with httpx.AsyncClient(base_url=url) as http:
            assert (await http.post("/mcp", json={})).status_code == 401


async def test_oidc_groups_decide_what_mcp_callers_read(data: Path) -> None:
    provider = IdentityProvider()
    async with serve(provider.app()) as issuer:
        provider.issuer = issuer
        config = AppConfig(data_dir=data, mcp=True, oidc_issuer=issuer, oidc_audience=AUDIENCE)
        assert config.oidc_audience == AUDIENCE
        async with serve(create_app(config)) as url:
            hr, eng = provider.token("hana", groups=["hr"]), provider.token("erik", groups=["eng"])
            async with http_session(url, hr) as hana, http_session(url, eng) as erik:
                question = "When are salaries paid?"
                assert (await call(hana, "search", query=question, limit=1))["passages"][0][
                    "title"
                ] == "Payroll"
                answer = await call(erik, "ask", question=question)
                assert "Payroll" not in {c["title"] for c in answer["citations"]}
                assert "25th" not in answer["answer"]


# -- a pydantic-ai agent through MCP ----------------------------------------------------------


def _searching_model(tool: str) -> FunctionModel:
    """Calls ragstream's search (named ``tool``) once, then answers with what it returned."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        assert tool in {t.name for t in info.function_tools}
        returned = [
            part for message in messages for part in message.parts if isinstance(part, ToolReturnPart)
        ]
        if not returned:
            return ModelResponse(parts=[ToolCallPart(tool, {"query": "When are salaries paid?", "limit": 5})])
        return ModelResponse(parts=[TextPart(json.dumps(returned[-1].content))])

    return FunctionModel(respond)


async def _passages_found(agent: Agent[None, str]) -> list[dict[str, Any]]:
    async with agent:
        result = await agent.run("When are salaries paid?")
    return list(json.loads(result.output)["passages"])


async def test_a_pydantic_ai_agent_uses_ragstream_only_through_mcp(data: Path, tmp_path: Path) -> None:
    """An agent whose only tools are ragstream's over streamable HTTP, as ``MCPToolset`` and as the
    URL configuration of docs/mcp.md loaded by ``load_mcp_toolsets``, gets the passages its token may read."""
    async with serve(create_mcp_app(_config(data))) as url:
        for token, sees_payroll in (("alice-secret", True), ("bob-secret", False)):
            toolset = MCPToolset(f"{url}/mcp", headers={"Authorization": f"Bearer {token}"})
            passages = await _passages_found(Agent(_searching_model("search"), toolsets=[toolset]))
            assert passages
            assert (passages[0]["title"] == "Payroll") is sees_payroll
            assert any("25th" in p["text"] for p in passages) is sees_payroll

        entry = _docs_entry("mcp over http")  # the page's block, pointed at this server with alice's token
        assert entry["url"].endswith("/mcp")
        entry["url"] = f"{url}/mcp"
        entry["headers"]["Authorization"] = "Bearer alice-secret"
        (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": {"ragstream": entry}}))
        toolsets = load_mcp_toolsets(tmp_path / "mcp.json")
        passages = await _passages_found(Agent(_searching_model("ragstream_search"), toolsets=toolsets))
        assert passages[0]["title"] == "Payroll"
