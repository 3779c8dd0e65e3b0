"""Per-document access: a document is everyone's or its groups'; every read applies the rule.

KB level: restricted search filters inside the query (k results of the reader's own even when
they are a minority), groups on ingest and regrouping, the format 3 migration. Server level, over
real HTTP with static tokens: two principals in different groups ask the same question and see
only their own documents across search, QA, citations, the documents list, ``GET
/documents/{id}``, originals, thread state and tool attachments; editors change only their groups'
documents; a thread's cached results go once its owner may not read them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import lancedb
import pytest
from pydantic import BaseModel, SecretStr
from pydantic_ai import Agent
from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from rag_tools import build_chat_toolkit, build_toolkit
from rag_tools.deps import AgentDeps
from rag_tools.kb import KnowledgeBase
from rag_tools.kb.access import ALL, InvalidGroups, Reader
from rag_tools.readable import WITHHELD, DocumentNames, drop_unreadable, hides_any
from rag_tools.state import (
    QA_NAMESPACE,
    SEARCH_NAMESPACE,
    SESSION_NAMESPACE,
    Citation,
    QASessionState,
    SearchHitSummary,
    SearchState,
    SessionState,
    ToolContext,
    prepare_context,
)
from rag_tools.tools import (
    ATTACHMENTS_NAMESPACE,
    ToolAttachment,
    ToolAttachments,
    ToolRegistry,
    ToolResult,
    ToolSystem,
)
from rag_tools.tools.outputs import TRUNCATED_KEY
from ragstream.agui.history import (
    CONVERSATION_KEY,
    ThreadConversationStore,
    drop_unreadable_from_thread,
    path_document_names,
    thread_messages,
)
from ragstream.app import create_app
from ragstream.config import StaticToken
from tests.agents import Script
from tests.conftest import scenario_app
from tests.embedders import HashingEmbeddingModel
from tests.protocol import parse_sse
from tests.scenario import _stream as scenario_stream
from tests.scenario import scenario_agent
from tests.servers import serve
from tests.test_documents_api import finished_job

# -- knowledge base --------------------------------------------------------------------------


def _notes(topic: str, n: int) -> str:
    return "\n\n".join(
        f"# {topic} note {i}\n\nThe {topic} rota covers shift {i} of the week." for i in range(n)
    )


async def test_restricted_search_returns_k_of_the_readers_own_documents(tmp_path: Path) -> None:
    """The reader's documents are 2 of 42 and rank below the others: still k hits, all theirs."""
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel(), chunk_max_chars=80) as kb:
        for i in range(40):
            await kb.ingest_bytes(_notes("rota", 6).encode(), name=f"big-{i}.md", groups=["big"])
        await kb.ingest_bytes(_notes("duty", 6).encode(), name="small-1.md", groups=["small"])
        await kb.ingest_bytes(_notes("duty", 6).encode(), name="small-2.md", groups=["small", "other"])
        small = kb.restricted(Reader.member_of(["small"]))
        for mode in ("hybrid", "vector", "text"):
            hits = await small.search("rota covers shift of the week", limit=8, mode=mode)
            assert len(hits) == 8, mode
            assert {h.uri for h in hits} <= {"small-1.md", "small-2.md"}, mode
        everyone = await kb.search("rota covers shift of the week", limit=8)
        assert all(h.uri.startswith("big-") for h in everyone)  # unrestricted: the majority wins
        nobody = kb.restricted(Reader.member_of(["elsewhere"]))
        assert await nobody.search("rota shift", limit=5) == []
        assert (await nobody.list_documents()).total == 0
        assert (await small.list_documents()).total == 2


async def test_groups_on_ingest_regrouping_and_lookups(tmp_path: Path) -> None:
    source = tmp_path / "pay.md"
    source.write_text("# Pay\n\nSalaries are paid on the 25th.")
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as kb:
        (outcome,) = (await kb.ingest_paths([source], groups=["hr"])).outcomes
        doc_id = outcome.document_id
        assert doc_id is not None
        hr, eng = kb.restricted(Reader.member_of(["hr"])), kb.restricted(Reader.member_of(["eng"]))
        assert (await hr.get_document_by_id(doc_id)).groups == ["hr"]  # type: ignore[union-attr]
        for view, visible in ((hr, True), (eng, False)):
            assert (await view.get_document_by_id(doc_id) is not None) is visible
            assert (await view.get_document("pay") is not None) is visible
            assert (await view.get_document_file(doc_id) is not None) is visible
            assert bool(await view.get_chunks(doc_id)) is visible
            assert bool(await view.search("salaries paid", limit=3)) is visible
        # unchanged content, other groups: nothing re-embedded, only the groups change
        again = await kb.ingest_paths([source], groups=["eng"])
        assert again.outcomes[0].status == "unchanged"
        assert await hr.search("salaries paid", limit=3) == []
        assert len(await eng.search("salaries paid", limit=3)) == 1
        # without groups a known document keeps its own, also when its content changes
        source.write_text("# Pay\n\nSalaries are paid on the 28th.")
        assert (await kb.ingest_paths([source])).outcomes[0].status == "updated"
        assert (await kb.get_document_by_id(doc_id)).groups == ["eng"]  # type: ignore[union-attr]
        assert await hr.search("salaries paid", limit=3) == []
        # regrouped to everyone
        assert (await kb.set_document_groups(doc_id, [])).groups == []  # type: ignore[union-attr]
        assert len(await hr.search("salaries paid", limit=3)) == 1
        assert await kb.set_document_groups("nope", ["hr"]) is None
        with pytest.raises(InvalidGroups):
            await kb.set_document_groups(doc_id, ["has space"])
        with pytest.raises(InvalidGroups):
            await kb.ingest_bytes(b"x", name="x.md", groups=["*"])


async def test_tool_results_are_withheld_by_id_source_or_citation_number(tmp_path: Path) -> None:
    """A thread's tool result naming a document its reader may not read, however it names it, is
    withheld whole; results naming readable documents, web pages or nothing stay as they are."""
    pay, open_ = tmp_path / "pay.md", tmp_path / "open.md"
    pay.write_text("# Pay\n\nSalaries are paid on the 25th.")
    open_.write_text("# Open\n\nThe office opens at nine.")
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as kb:
        pay_id = (await kb.ingest_paths([pay], groups=["hr"])).outcomes[0].document_id
        open_id = (await kb.ingest_paths([open_])).outcomes[0].document_id
        assert pay_id and open_id
        context = ToolContext()
        session = context.get_or_create(SESSION_NAMESPACE, SessionState)
        for chunk, document, uri in ((f"{pay_id}:0", pay_id, "pay.md"), (f"{open_id}:0", open_id, "open.md")):
            session.cite(chunk_id=chunk, document_id=document, title=uri, uri=uri, text="...")
        session.citations.clear()  # the cards went long ago: citation 1 is known by the registry only
        hidden = [
            {"document_id": pay_id, "content": "Salaries are paid on the 25th."},
            {"found": True, "uri": "pay.md", "content": "Salaries are paid on the 25th."},
            {"results": [{"citation": 2, "text": "nine"}, {"citation": 1, "text": "the 25th"}]},
        ]
        shown = [
            {"results": [{"citation": 2, "uri": "open.md", "text": "The office opens at nine."}]},
            {"uri": "https://example.com/pay.md", "text": "a page a tool fetched"},
            "plain text",
            [1, 2, 3],
        ]
        for reader, withheld in ((Reader.member_of(["eng"]), hidden), (Reader.member_of(["hr"]), [])):
            named = DocumentNames.of([*hidden, *shown])
            withholding = await drop_unreadable(context.view(), kb.restricted(reader), named)
            assert [r for r in [*hidden, *shown] if withholding(r) == WITHHELD] == withheld
            assert all(withholding(r) is r for r in shown)
        assert not await drop_unreadable(context, kb, DocumentNames.of(hidden))  # a reader of everything
        # what a result names survives being stored beside it
        names = DocumentNames.of(hidden)
        assert DocumentNames.from_json_many([json.loads(json.dumps(names.to_json()))]) == names
        assert names.uris == {"pay.md"} and names.ids == {pay_id} and names.citations == {1, 2}


async def test_what_a_threads_tool_results_name_is_stored_beside_them() -> None:
    """A stored entry keeps what its tool results name, and a thread stored before that is read the
    same way from the results themselves."""
    extras: dict[str, Any] = {}
    store = ThreadConversationStore(extras)
    search = {"query": "pay", "results": [{"citation": 3, "uri": "pay.md", "text": "the 25th"}]}
    document = {"found": True, "uri": "open.md", "content": "nine"}
    conversation = Conversation(conversation_id="t")
    conversation.messages.extend(
        [
            ModelRequest(parts=[UserPromptPart("pay?")]),
            ModelResponse(parts=[ToolCallPart("search", {"query": "pay"}, "c1")]),
            ModelRequest(
                parts=[ToolReturnPart("search", search, "c1"), ToolReturnPart("get_document", document, "c2")]
            ),
            ModelResponse(parts=[TextPart("On the 25th [3].")]),
        ]
    )
    await store.save(conversation)
    expected = DocumentNames(uris=frozenset({"open.md"}), citations=frozenset({3}))
    assert path_document_names(extras) == expected
    entries = extras[CONVERSATION_KEY]["entries"].values()
    assert [e["names"] for e in entries if "names" in e] == [expected.to_json()]
    for entry in entries:
        entry.pop("names", None)  # as a thread stored before names were
    assert path_document_names(extras) == expected


async def _hr_pay_document(kb: KnowledgeBase) -> str:
    """A small document for the ``hr`` group only; its id."""
    pay_id = (await kb.ingest_bytes(b"# Pay\n\nPaid on the 25th.", name="pay.md", groups=["hr"])).document_id
    assert pay_id
    return pay_id


def _agent(system: ToolSystem, script: Script) -> Agent[AgentDeps, Any]:
    """An agent driven by ``script`` with ``system``'s toolsets and capability."""
    return Agent(
        script.model, deps_type=AgentDeps, toolsets=system.toolsets(), capabilities=[system.capability()]
    )


class PageOfText(BaseModel):
    """A tool output given as a pydantic model, as ``get_document`` gives a document's text."""

    document_id: str
    text: str


async def test_a_cut_result_still_names_what_the_whole_named(tmp_path: Path) -> None:
    """A result cut to the output limit no longer shows which document it came from in its text:
    what the whole named goes with it, so the thread withholds it from a reader who may not read
    that document (an analysis naming its sources the same way), and the kept full text is read
    back only by a reader of the document."""
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as kb:
        pay_id = await _hr_pay_document(kb)
        registry = ToolRegistry()

        def passages() -> dict[str, Any]:
            """The pay passages."""
            return {"results": [{"document_id": pay_id, "text": "Salaries are paid on the 25th. " * 40}]}

        def analysis() -> dict[str, Any]:
            """An analysis that read the pay document."""
            return {"task": "count", "value": 3, "sources": [{"document_id": pay_id, "uri": "pay.md"}]}

        def page() -> PageOfText:
            """The pay document's text, as a model (as ``get_document`` returns it)."""
            return PageOfText(document_id=pay_id, text="Salaries are paid on the 25th. " * 40)

        registry.add_tool(passages)
        registry.add_tool(analysis)
        registry.add_tool(page)
        system = ToolSystem(registry, output_limit=200)

        context = ToolContext()
        script = Script([[("passages", {}), ("analysis", {}), ("page", {})]])
        result = await _agent(system, script).run("go", deps=AgentDeps(client=kb, tool_context=context))
        cut = next(
            p
            for m in result.all_messages()
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, ToolReturnPart) and p.tool_name == "passages"
        )
        assert isinstance(cut.content, str) and "[output truncated:" in cut.content
        assert cut.metadata[TRUNCATED_KEY] == {"ref": "out-1", "documents": [{"document_id": pay_id}]}

        extras: dict[str, Any] = {}
        conversation = Conversation(conversation_id="t")
        conversation.messages.extend(result.all_messages())
        await ThreadConversationStore(extras).save(conversation)
        assert path_document_names(extras).ids == {pay_id}
        hr, eng = kb.restricted(Reader.member_of(["hr"])), kb.restricted(Reader.member_of(["eng"]))
        shown = {}
        for name, reader in (("hr", hr), ("eng", eng)):
            withholding = await drop_unreadable_from_thread(context.view(), reader, extras)
            path = thread_messages(extras, withholding or None).messages
            shown[name] = [m.content for m in path if m.role == "tool"]
        assert shown["hr"][0] == cut.content and '"sources":' in shown["hr"][1]
        assert "Salaries are paid" in shown["hr"][2]
        assert shown["eng"] == [WITHHELD, WITHHELD, WITHHELD]  # a model's output cut too

        # the kept full text: read on by a reader of the document, withheld from one who may not
        for reader, expected in ((hr, "Salaries are paid on the 25th."), (eng, "'out-1' is withheld")):
            more = Script([[("read_tool_output", {"ref": "out-1", "offset": 200})]])
            await _agent(system, more).run("more", deps=AgentDeps(client=reader, tool_context=context))
            (read,) = more.returns["read_tool_output"]
            assert expected in read, read
            assert ("Salaries" in read) == (reader is hr)


async def test_a_result_of_a_document_deleted_after_it_was_taken_away_stays_withheld(tmp_path: Path) -> None:
    """A public document a reader searched is made hr-only, then deleted: its result in the
    reader's thread stays withheld (it came back, whole, once the document was gone)."""
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as kb:
        public = (
            await kb.ingest_bytes(b"# Parking\n\nThe code is MARMALADE.", name="parking.md")
        ).document_id
        registry = ToolRegistry()

        def parking() -> dict[str, Any]:
            """The parking passage."""
            return {"results": [{"document_id": public, "text": "The code is MARMALADE."}]}

        registry.add_tool(parking)
        system = ToolSystem(registry)
        agent = _agent(system, Script([[("parking", {})]]))
        context = ToolContext()
        result = await agent.run("go", deps=AgentDeps(client=kb, tool_context=context))
        extras: dict[str, Any] = {}
        conversation = Conversation(conversation_id="t")
        conversation.messages.extend(result.all_messages())
        await ThreadConversationStore(extras).save(conversation)

        async def shown(reader: KnowledgeBase) -> list[Any]:
            withholding = await drop_unreadable_from_thread(context.view(), reader, extras)
            return [
                m.content for m in thread_messages(extras, withholding or None).messages if m.role == "tool"
            ]

        eng = kb.restricted(Reader.member_of(["eng"]))
        assert "MARMALADE" in (await shown(eng))[0]
        await kb.set_document_groups(public, ["hr"])
        assert await shown(eng) == [WITHHELD]
        await kb.delete_document(public)
        assert await shown(eng) == [WITHHELD]
        assert "MARMALADE" in (await shown(kb))[0]  # the stored thread keeps it for a reader of all


async def test_a_failed_tool_result_naming_a_document_is_withheld_too(tmp_path: Path) -> None:
    """A ``ToolResult`` marked ``is_error`` reaches the model as a failed result whose text is its
    output's JSON: what that names is checked as for any result, so a reader who may not read the
    document gets neither the page's nor the model's copy of it."""
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as kb:
        pay_id = await _hr_pay_document(kb)
        registry = ToolRegistry()

        def pay_day() -> ToolResult:
            """Look up pay day (fails, quoting the document it read)."""
            quoted = {"document_id": pay_id, "error": "ambiguous: 'Paid on the 25th.'"}
            return ToolResult(quoted, is_error=True)

        registry.add_tool(pay_day)
        system = ToolSystem(registry)
        agent = _agent(system, Script([[("pay_day", {})]]))
        result = await agent.run("go", deps=AgentDeps(client=kb, tool_context=ToolContext()))
        failed = next(
            p
            for m in result.all_messages()
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, ToolReturnPart) and p.tool_name == "pay_day"
        )
        assert failed.outcome == "failed" and isinstance(failed.content, str) and pay_id in failed.content

        extras: dict[str, Any] = {}
        conversation = Conversation(conversation_id="t")
        conversation.messages.extend(result.all_messages())
        await ThreadConversationStore(extras).save(conversation)
        assert path_document_names(extras).ids == {pay_id}
        for reader, expected in (("hr", failed.content), ("eng", WITHHELD)):
            restricted = kb.restricted(Reader.member_of([reader]))
            withholding = await drop_unreadable_from_thread(ToolContext(), restricted, extras)
            path = thread_messages(extras, withholding or None).messages
            assert [m.content for m in path if m.role == "tool"] == [expected]
            history = await ThreadConversationStore(extras, withhold=withholding or None).load("t")
            sent = [
                p.content
                for m in history.messages
                if isinstance(m, ModelRequest)
                for p in m.parts
                if isinstance(p, ToolReturnPart)
            ]
            assert sent == [expected]


async def test_a_hidden_attachment_is_kept_and_shown_to_a_reader_of_its_documents(tmp_path: Path) -> None:
    """An attachment whose result named a document its reader may not read is withheld (record and
    bytes), survives saving and loading the thread, and a reader of every document is shown it."""
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as kb:
        pay_id = await _hr_pay_document(kb)
        context = ToolContext()
        kept = context.get_or_create(ATTACHMENTS_NAMESPACE, ToolAttachments)
        pay = kept.keep(
            ToolAttachment("pay.csv", "day\n25\n"),
            "export",
            "c1",
            100,
            DocumentNames(ids=frozenset({pay_id})),
        )
        note = kept.keep(ToolAttachment("note.txt", "mine"), "export", "c2", 100)

        await drop_unreadable(context, kb.restricted(Reader.member_of(["eng"])))
        assert set(context.build_state_snapshot()["tool_attachments"]) == {note.ref}
        assert kept.content(pay.ref) is None and kept.content(note.ref) is not None

        saved = ToolContext.from_dump(context.dump_namespaces())
        loaded = saved.get_or_create(ATTACHMENTS_NAMESPACE, ToolAttachments)
        assert loaded.hides_any() and hides_any(saved)
        await drop_unreadable(saved, kb)  # a reader of every document
        assert list(saved.build_state_snapshot()["tool_attachments"]) == [pay.ref, note.ref]
        assert loaded.content(pay.ref) == (pay, b"day\n25\n") and not hides_any(saved)


async def test_what_a_reader_may_not_read_is_kept_aside_and_comes_back(tmp_path: Path) -> None:
    """Cards, a search's hits and an answer of a document the reader may not read leave the state
    but stay in the thread (saved and loaded with it) and come back, unchanged, when it may read
    the document again; those of a document deleted meanwhile do not. A reader of everything (never
    checked) is shown all of it."""
    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as kb:
        pay_id = await _hr_pay_document(kb)
        old = await kb.ingest_bytes(b"# Old\n\nOld rules.", name="old.md", groups=["hr"])
        public = await kb.ingest_bytes(b"# Hours\n\nNine to five.", name="hours.md")
        documents = {1: pay_id, 2: public.document_id, 3: old.document_id}
        context = prepare_context(ToolContext(), ("search", "qa"))
        session = context.get(SESSION_NAMESPACE, SessionState)
        session.citations = {  # in the order last cited: 1 before 3 before 2
            str(n): Citation(
                index=n, document_id=documents[n], title=f"doc {n}", uri=f"{n}.md", passage=f"text {n}"
            )
            for n in (1, 3, 2)
        }
        searches = context.get(SEARCH_NAMESPACE, SearchState)
        hits = [SearchHitSummary(citation=n, title=f"doc {n}", score=0.5) for n in documents]
        searches.add_search("rules", hits)
        qa = context.get(QA_NAMESPACE, QASessionState)
        for n in documents:
            qa.add_entry(
                {"question": f"q{n}", "answer": f"a{n}", "confidence": 1.0, "citations": (n,)}, [n], limit=9
            )
        whole = context.dump_namespaces()

        eng = kb.restricted(Reader.member_of(["eng"]))
        await drop_unreadable(context, eng)
        shown = context.build_state_snapshot()
        assert list(shown["citations"]) == ["2"] and [e["id"] for e in shown["qa_history"]] == ["qa2"]
        assert [h["citation"] for h in shown["searches"]["s1"]["hits"]] == [2]
        assert hides_any(context) and not hides_any(ToolContext())

        # what is kept aside is the branch's: another branch's state brings none of it
        switched = prepare_context(ToolContext.from_dump(context.dump_namespaces()), ("search", "qa"))
        switched.restore_branch(prepare_context(ToolContext(), ("search", "qa")).branch_dump())
        assert not hides_any(switched)
        await drop_unreadable(switched, kb)
        assert switched.build_state_snapshot()["citations"] == {}

        await kb.delete_document(old.document_id)
        saved = prepare_context(ToolContext.from_dump(context.dump_namespaces()), ("search", "qa"))
        view = saved.view()
        await drop_unreadable(view, kb.restricted(Reader.member_of(["hr"])))  # may read it again
        back = view.dump_namespaces()
        assert list(back[SESSION_NAMESPACE]["citations"]) == ["1", "2"]  # back where it was
        assert [e["id"] for e in back[QA_NAMESPACE]["qa_history"]] == ["qa1", "qa2"]
        assert back[QA_NAMESPACE]["question_embeddings"] == {"qa1": [1.0], "qa2": [2.0]}
        restored = back[SEARCH_NAMESPACE]["searches"]["s1"]
        assert restored == {**whole[SEARCH_NAMESPACE]["searches"]["s1"], "hits": restored["hits"]}
        assert [h["citation"] for h in restored["hits"]] == [1, 2] and not hides_any(view)
        assert hides_any(saved)  # the view changed nothing stored
        # a reader of everything is shown all of it (such a reader is never checked)
        await drop_unreadable(saved, kb)
        assert saved.dump_namespaces() == whole
        assert list(saved.dump_namespaces()[SESSION_NAMESPACE]["citations"]) == ["1", "3", "2"]
        assert not hides_any(saved)


async def test_a_format_3_knowledge_base_gains_groups_when_opened(tmp_path: Path) -> None:
    embedder = HashingEmbeddingModel()
    async with KnowledgeBase(tmp_path / "kb", embedder=embedder) as kb:
        await kb.ingest_bytes(b"# Old\n\nOld backups were kept for 7 days.", name="old.md")
    db = lancedb.connect(tmp_path / "kb")  # as format 3 left it: no groups anywhere
    for name in ("chunks", "documents"):
        db.open_table(name).drop_columns(["groups"])
    db.open_table("meta").update(where="key = 'format_version'", values={"value": "3"})
    async with KnowledgeBase(tmp_path / "kb", embedder=embedder) as kb:
        reader = kb.restricted(Reader.member_of(["anyone"]))
        (hit,) = await reader.search("old backups kept", limit=5)
        assert hit.uri == "old.md"
        (doc,) = (await reader.list_documents()).documents
        assert doc.groups == []
        await kb.set_document_groups(doc.document_id, ["ops"])  # writes into the migrated tables
        assert await reader.search("old backups kept", limit=5) == []
        await kb.ingest_bytes(b"# New\n\nNew backups are kept for 30 days.", name="new.md")
        assert [h.uri for h in await reader.search("new backups kept", limit=5)] == ["new.md"]
    meta = {r["key"]: r["value"] for r in db.open_table("meta").to_arrow().to_pylist()}
    assert meta["format_version"] == "4"


def test_the_read_rule() -> None:
    assert ALL.may_read(["hr"]) and ALL.to_sql() is None
    hr = Reader.member_of(["hr", "o'brien"])
    assert hr.may_read(["*"]) and hr.may_read(["hr", "eng"]) and not hr.may_read(["eng"])
    assert not hr.may_read(None)  # a row without the column is nobody's but an administrator's
    assert hr.to_sql() == "array_has_any(groups, ['*', 'hr', 'o''brien'])"


# -- server --------------------------------------------------------------------------------

HR_DOC = b"# Travel policy\n\nThe travel allowance is 40 euros per day (code HRQUOKKA).\n"
ENG_DOC = b"# Travel policy\n\nThe travel allowance is 65 euros per day (code ENGWOMBAT).\n"
QUESTION = "What is the travel allowance per day?"
TOKENS = {
    "root": StaticToken(token=SecretStr("t-root")),
    "alice": StaticToken(token=SecretStr("t-alice"), groups=("hr",)),
    "bob": StaticToken(token=SecretStr("t-bob"), groups=("eng",)),
    "carol": StaticToken(token=SecretStr("t-carol"), groups=("kb-editors", "hr")),
}


def _as(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer t-{name}"}


def _run(thread: str, text: str, run: str = "r1", message: str = "m1") -> dict[str, Any]:
    return {
        "threadId": thread,
        "runId": run,
        "state": {},
        "messages": [{"id": message, "role": "user", "content": text}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }


@asynccontextmanager
async def _server(config: Any, *, scenario: bool = True, **parts: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The app on ``config`` with the test's tokens and editors: the scenario agent, the offline
    model (``scenario=False``), or the ``agent`` and ``toolkit`` given."""
    config.tokens = TOKENS
    config.editors = ["root"]
    config.editor_groups = ["kb-editors"]
    # the scenario agent, else the agent given, else the offline model
    app = scenario_app(config) if scenario and not parts else create_app(config, **parts)
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        yield client


async def _upload(client: httpx.AsyncClient, who: str, name: str, data: bytes, groups: str | None) -> str:
    response = await client.post(
        "/documents",
        files={"file": (name, data, "text/markdown")},
        data={} if groups is None else {"groups": groups},
        headers=_as(who),
    )
    assert response.status_code == 202, response.text
    client.headers.update(_as(who))
    try:
        job = await finished_job(client, response.json()["jobId"])
    finally:
        del client.headers["Authorization"]
    assert job["files"][0]["status"] in ("added", "updated", "unchanged"), job
    return str(job["files"][0]["documentId"])


async def test_two_principals_see_only_their_own_documents(scenario_config: Any) -> None:
    async with _server(scenario_config, scenario=False) as client:
        hr_id = await _upload(client, "root", "travel-hr.md", HR_DOC, "hr")
        eng_id = await _upload(client, "root", "travel-eng.md", ENG_DOC, "eng")
        mine = {"alice": ("HRQUOKKA", hr_id), "bob": ("ENGWOMBAT", eng_id)}
        for who, (marker, own_id) in mine.items():
            other_marker, other_id = next(v for k, v in mine.items() if k != who)
            headers = _as(who)
            # chat with the offline model: search, answer, citations, state events
            run = await client.post("/agui", json=_run(f"t-{who}", QUESTION), headers=headers)
            assert run.status_code == 200
            assert marker in run.text and other_marker not in run.text
            thread = (await client.get(f"/threads/t-{who}", headers=headers)).json()
            dumped = json.dumps(thread)
            assert marker in dumped and other_marker not in dumped
            cards = thread["state"]["citations"]
            assert own_id in {c["document_id"] for c in cards.values()}
            assert other_id not in {c["document_id"] for c in cards.values()}
            listing = (await client.get("/documents", params={"page_size": 500}, headers=headers)).json()
            ids = {d["document_id"] for d in listing["documents"]}
            assert own_id in ids and other_id not in ids
            assert listing["total"] == len(ids)
            # readiness counts the documents the caller may read, like the listing
            assert (await client.get("/ready", headers=headers)).json()["documents"] == listing["total"]
            own = await client.get(f"/documents/{own_id}", headers=headers)
            assert own.status_code == 200 and own.json()["groups"] == [{"alice": "hr", "bob": "eng"}[who]]
            assert (await client.get(f"/documents/{own_id}?format=file", headers=headers)).status_code == 200
            hidden = await client.get(f"/documents/{other_id}", headers=headers)
            missing = await client.get("/documents/0123456789abcdef01234567", headers=headers)
            assert hidden.status_code == missing.status_code == 404
            assert hidden.json()["error"]["message"] == f"document {other_id!r} not found"
            file = await client.get(f"/documents/{other_id}?format=file", headers=headers)
            assert file.status_code == 404
        # the administrator reads both
        listing = (await client.get("/documents", params={"page_size": 500}, headers=_as("root"))).json()
        assert {hr_id, eng_id} <= {d["document_id"] for d in listing["documents"]}
        assert (await client.get("/ready", headers=_as("root"))).json()["documents"] == listing["total"]


async def test_qa_and_document_tools_answer_only_from_the_callers_documents(scenario_config: Any) -> None:
    async with _server(scenario_config, scenario=True) as client:
        hr_id = await _upload(client, "root", "travel-hr.md", HR_DOC, "hr")
        eng_id = await _upload(client, "root", "travel-eng.md", ENG_DOC, "eng")
        for who, marker, other in (("alice", "HRQUOKKA", "ENGWOMBAT"), ("bob", "ENGWOMBAT", "HRQUOKKA")):
            headers = _as(who)
            calls = [
                f"call ask {json.dumps({'question': QUESTION})}",
                f"call get_document {json.dumps({'query': 'travel'})}",
                f"call list_documents {json.dumps({'page': 1})}",
            ]
            for n, text in enumerate(calls):
                run = await client.post(
                    "/agui", json=_run(f"qa-{who}-{n}", text), headers=headers, timeout=120
                )
                assert run.status_code == 200, run.text
                assert other not in run.text, text
                assert (hr_id if who == "bob" else eng_id) not in run.text, text
            assert marker in run.text or "travel" in run.text
            state = await client.get(f"/threads/qa-{who}-0/state/qa_history", headers=headers)
            assert marker in json.dumps(state.json()) and other not in json.dumps(state.json())


async def test_cached_results_go_once_the_owner_may_not_read_them(scenario_config: Any) -> None:
    async with _server(scenario_config, scenario=True) as client:
        hr_id = await _upload(client, "root", "travel-hr.md", HR_DOC, "hr")
        ask = f"call ask {json.dumps({'question': QUESTION})}"
        first = await client.post("/agui", json=_run("cache", ask), headers=_as("alice"), timeout=120)
        assert "HRQUOKKA" in first.text
        state = (await client.get("/threads/cache", headers=_as("alice"))).json()["state"]
        assert "HRQUOKKA" in json.dumps(state)

        async def whole(field: str) -> Any:
            item = await client.get(f"/threads/cache/state/{field}", headers=_as("alice"))
            assert item.status_code == 200
            return item.json()["value"]

        fields = ("citations", "qa_history", "searches")
        before = {field: await whole(field) for field in fields}
        replay = "/threads/cache/runs/r1/events?after=0"
        assert "HRQUOKKA" in (await client.get(replay, headers=_as("alice"))).text
        # the document moves to another group: the thread's cards, searches and answers are not shown
        moved = await client.patch(f"/documents/{hr_id}", json={"groups": ["finance"]}, headers=_as("root"))
        assert moved.status_code == 200 and moved.json()["groups"] == ["finance"]
        # nor what the run streamed, replayed from its event log: the replay stops before it
        replayed = [event for _, event in parse_sse((await client.get(replay, headers=_as("alice"))).text)]
        assert "HRQUOKKA" not in json.dumps(replayed)
        assert replayed[0]["type"] == "RUN_STARTED"
        assert replayed[-1]["type"] == "RUN_ERROR" and replayed[-1]["code"] == "withheld"
        state = (await client.get("/threads/cache", headers=_as("alice"))).json()["state"]
        assert "HRQUOKKA" not in json.dumps(state)
        for field in fields:
            assert "HRQUOKKA" not in json.dumps(await whole(field))
        # the same question is not recalled from the cached answer: it searches, and finds nothing
        again = await client.post(
            "/agui", json=_run("cache", ask, "r2", "m2"), headers=_as("alice"), timeout=120
        )
        assert again.status_code == 200
        tail = again.text[again.text.index('"runId":"r2"') :]
        assert "HRQUOKKA" not in tail and 'recalled_from\\":null' in tail
        # kept aside, not lost: the run saved the thread, and once alice may read it again the cards,
        # the search's hit and the answer are back, as they were
        back = await client.patch(f"/documents/{hr_id}", json={"groups": ["hr"]}, headers=_as("root"))
        assert back.status_code == 200
        after = {field: await whole(field) for field in fields}  # with what the second run added
        assert {k: after["citations"].get(k) for k in before["citations"]} == before["citations"]
        assert {k: after["searches"].get(k) for k in before["searches"]} == before["searches"]
        assert [e for e in after["qa_history"] if e["id"] in {b["id"] for b in before["qa_history"]}] == (
            before["qa_history"]
        )
        assert "HRQUOKKA" in json.dumps(after["citations"]) and "HRQUOKKA" in json.dumps(after["qa_history"])


async def test_tool_results_of_a_document_the_owner_may_no_longer_read_are_withheld(
    scenario_config: Any,
) -> None:
    """The thread's tool results go through the same rule as its state: once alice may not read the
    HR document, the search result that holds its passage is withheld from her thread view and
    from what the model is sent on her next turn; a result of documents she still reads stays, and
    nothing is lost from storage (readable again, shown again)."""
    sent: list[str] = []  # the tool results the model was sent on each request, as text

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        results = [
            p.model_response_str()
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, ToolReturnPart)
        ]
        sent.append("\n".join(results))
        async for chunk in scenario_stream(messages, info):
            yield chunk

    toolkit = build_chat_toolkit(scenario_config)
    agent = scenario_agent(toolkit, FunctionModel(stream_function=stream, model_name="recorder"))
    alice = _as("alice")
    async with _server(scenario_config, agent=agent, toolkit=toolkit) as client:
        hr_id = await _upload(client, "root", "travel-hr.md", HR_DOC, "hr")
        first = await client.post("/agui", json=_run("held", QUESTION), headers=alice)
        assert first.status_code == 200 and "HRQUOKKA" in first.text
        history = (await client.get("/threads/held", headers=alice)).json()["messages"]
        second = {"id": "m2", "role": "user", "content": "nightly backups"}
        body = {**_run("held", "", "r2"), "messages": [*history, second]}
        assert (await client.post("/agui", json=body, headers=alice)).status_code == 200

        def tool_results(view: dict[str, Any]) -> list[str]:
            return [m["content"] for m in view["messages"] if m["role"] == "tool"]

        before = tool_results((await client.get("/threads/held", headers=alice)).json())
        assert len(before) == 2 and "HRQUOKKA" in before[0] and "HRQUOKKA" not in before[1]
        moved = await client.patch(f"/documents/{hr_id}", json={"groups": ["finance"]}, headers=_as("root"))
        assert moved.status_code == 200

        view = (await client.get("/threads/held", headers=alice)).json()
        assert tool_results(view) == [WITHHELD, before[1]]  # the backups search was all readable
        assert "HRQUOKKA" not in json.dumps(view["state"])
        third = {"id": "m3", "role": "user", "content": "how do restores work"}
        body = {**_run("held", "", "r3"), "messages": [*view["messages"], third]}
        again = await client.post("/agui", json=body, headers=alice)
        assert again.status_code == 200
        assert "HRQUOKKA" not in again.text
        assert "HRQUOKKA" not in sent[-1] and WITHHELD in sent[-1] and before[1][:40] in sent[-1]
        # a run with nothing to answer restates the thread: the same messages a reload gets
        restated = await client.post("/agui", json={**_run("held", "", "r4"), "messages": []}, headers=alice)
        events = [e for _, e in parse_sse(restated.text)]
        (snapshot,) = [e for e in events if e["type"] == "MESSAGES_SNAPSHOT"]
        assert [m["content"] for m in snapshot["messages"] if m["role"] == "tool"][:2] == [
            WITHHELD,
            before[1],
        ]
        assert "HRQUOKKA" not in restated.text

        # the stored thread keeps the result: readable again, it is shown again
        back = await client.patch(f"/documents/{hr_id}", json={"groups": ["hr"]}, headers=_as("root"))
        assert back.status_code == 200
        assert tool_results((await client.get("/threads/held", headers=alice)).json())[:2] == before


EXPORT_TOOLS = """
from pydantic_ai import RunContext

from rag_tools.tools import ToolAttachment, ToolResult


async def export_passages(ctx: RunContext, query: str) -> ToolResult:
    \"\"\"Export the passages found for ``query`` as CSV; the result names their documents.

    Args:
        query: What to search for.
    \"\"\"
    hits = await ctx.deps.client.search(query, limit=3)
    rows = "".join(f"{h.document_id},{h.text!r}\\n" for h in hits)
    return ToolResult(
        f"exported {len(hits)} passages",
        metadata={"sources": [{"document_id": h.document_id} for h in hits]},
        attachments=[ToolAttachment("passages.csv", "document,text\\n" + rows, "text/csv")],
    )


def export_note(text: str) -> ToolResult:
    \"\"\"Export a note of the user's own as a text file.

    Args:
        text: The note.
    \"\"\"
    return ToolResult("exported the note", attachments=[ToolAttachment("note.txt", text, "text/plain")])


TOOLS = [export_passages, export_note]
"""


async def test_an_attachment_of_a_document_the_owner_may_no_longer_read_is_not_served(
    scenario_config: Any, tmp_path: Path
) -> None:
    """A tool's attachment keeps what its result named: once alice may not read the HR document,
    the export made from its passages is neither listed in her thread's state nor downloadable,
    while an attachment whose result named no document (her own note) stays. Hidden, not dropped:
    a run she starts meanwhile saves the thread with it, and readable again, the export is back."""
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "export_tools.py").write_text(EXPORT_TOOLS)
    scenario_config.tool_dirs = [tools]
    alice = _as("alice")
    async with _server(scenario_config) as client:
        hr_id = await _upload(client, "root", "travel-hr.md", HR_DOC, "hr")
        cited = f"call export_passages {json.dumps({'query': QUESTION})}"
        first = await client.post("/agui", json=_run("exp", cited), headers=alice)
        assert first.status_code == 200 and "export_passages: exported 3 passages" in first.text
        history = (await client.get("/threads/exp", headers=alice)).json()["messages"]
        plain = f"call export_note {json.dumps({'text': 'my own note'})}"
        body = {
            **_run("exp", "", "r2"),
            "messages": [*history, {"id": "m2", "role": "user", "content": plain}],
        }
        assert (await client.post("/agui", json=body, headers=alice)).status_code == 200

        async def shown() -> dict[str, int]:
            """The thread's attachments as alice's page sees them: ref -> status of its download."""
            state = (await client.get("/threads/exp", headers=alice)).json()["state"]
            listed = await client.get("/threads/exp/state/tool_attachments", headers=alice)
            assert listed.status_code == 200 and listed.json()["value"] == state["tool_attachments"]
            statuses = {}
            for ref, record in state["tool_attachments"].items():
                download = await client.get(f"/threads/exp/attachments/{ref}", headers=alice)
                statuses[ref] = download.status_code
                expected = {"passages.csv": "HRQUOKKA", "note.txt": "my own note"}[record["name"]]
                assert download.status_code == 200 and expected in download.text
            return statuses

        before = await shown()
        assert list(before.values()) == [200, 200]
        named, unnamed = before
        moved = await client.patch(f"/documents/{hr_id}", json={"groups": ["finance"]}, headers=_as("root"))
        assert moved.status_code == 200
        assert await shown() == {unnamed: 200}
        gone = await client.get(f"/threads/exp/attachments/{named}", headers=alice)
        assert gone.status_code == 404 and "keeps no attachment" in gone.json()["error"]["message"]
        # a run's baseline state for alice does not list it either, and the run saves the thread
        again = await client.post("/agui", json={**_run("exp", "", "r3"), "messages": []}, headers=alice)
        assert named not in again.text and unnamed in again.text
        assert await shown() == {unnamed: 200}
        # hidden, not lost: readable again, it is back
        back = await client.patch(f"/documents/{hr_id}", json={"groups": ["hr"]}, headers=_as("root"))
        assert back.status_code == 200
        assert await shown() == before
        again = await client.post("/agui", json={**_run("exp", "", "r4"), "messages": []}, headers=alice)
        assert named in again.text and unnamed in again.text


async def test_editors_change_only_their_groups_documents(scenario_config: Any) -> None:
    async with _server(scenario_config, scenario=True) as client:
        hr_id = await _upload(client, "carol", "hr-only.md", b"# HR\n\nHR only.\n", "hr")
        eng_id = await _upload(client, "root", "eng-only.md", b"# Eng\n\nEng only.\n", "eng")
        both_id = await _upload(client, "root", "both.md", b"# Both\n\nHR and eng.\n", "hr,eng")
        public_id = await _upload(client, "carol", "public.md", b"# Public\n\nFor all.\n", None)

        async def patch(who: str, doc: str, body: Any) -> httpx.Response:
            return await client.patch(f"/documents/{doc}", json=body, headers=_as(who))

        assert (await patch("carol", hr_id, {"groups": ["hr"]})).status_code == 200
        assert (await patch("carol", public_id, {"groups": ["hr"]})).status_code == 200
        assert (await patch("carol", public_id, {"groups": []})).status_code == 200
        assert (await patch("carol", eng_id, {"groups": ["hr"]})).status_code == 404  # not hers to see
        refused = await patch("carol", both_id, {"groups": ["hr"]})
        assert refused.status_code == 403 and "eng" in refused.json()["error"]["message"]
        outside = await patch("carol", hr_id, {"groups": ["finance"]})
        assert outside.status_code == 403 and "finance" in outside.json()["error"]["message"]
        assert (await client.delete(f"/documents/{both_id}", headers=_as("carol"))).status_code == 403
        assert (await client.delete(f"/documents/{eng_id}", headers=_as("carol"))).status_code == 404
        # an upload replacing a document is a change of it; groups outside the editor's are refused
        replace = await client.post(
            "/documents",
            files={"file": ("both.md", b"# Both\n\nchanged", "text/markdown")},
            headers=_as("carol"),
        )
        assert replace.status_code == 403
        # an upload whose name a document carol may not read holds: taken, and nothing names it
        taken = await client.post(
            "/documents",
            files={"file": ("eng-only.md", b"# Mine\n\nmine", "text/markdown")},
            headers=_as("carol"),
        )
        assert taken.status_code == 409, taken.text
        assert "'eng-only.md' is taken by a document you may not change" in taken.json()["error"]["message"]
        assert eng_id not in taken.text
        foreign = await client.post(
            "/documents",
            files={"file": ("new.md", b"# New\n\nnew", "text/markdown")},
            data={"groups": "eng"},
            headers=_as("carol"),
        )
        assert foreign.status_code == 403
        # readers are not editors; bad input is a clear 4xx
        assert (await patch("alice", hr_id, {"groups": []})).status_code == 403
        for body in ({"groups": ["has space"]}, {"groups": "hr"}, {"group": ["hr"]}, ["hr"]):
            bad = await patch("root", hr_id, body)
            assert bad.status_code == 422, body
        assert (
            "invalid group name"
            in (await patch("root", hr_id, {"groups": ["a,b"]})).json()["error"]["message"]
        )
        bad_upload = await client.post(
            "/documents",
            files={"file": ("x.md", b"# X", "text/markdown")},
            data={"groups": "*"},
            headers=_as("root"),
        )
        assert bad_upload.status_code == 422 and bad_upload.json()["error"]["code"] == "invalid_groups"
        # groups sent as a file part (what some clients do with every field) would otherwise be no groups
        as_file = await client.post(
            "/documents",
            files={"file": ("x.md", b"# X", "text/markdown"), "groups": ("groups.txt", b"hr", "text/plain")},
            headers=_as("root"),
        )
        assert as_file.status_code == 422 and "groups must be a text field" in as_file.text
        assert (await patch("root", "0123456789abcdef01234567", {"groups": []})).status_code == 404
        # the administrator changes anything
        assert (await patch("root", both_id, {"groups": ["eng"]})).json()["groups"] == ["eng"]
        assert (await client.delete(f"/documents/{hr_id}", headers=_as("carol"))).status_code == 204


async def test_a_change_checked_against_a_document_that_changed_meanwhile_is_a_409(
    scenario_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Carol (an hr editor) may change a public document. Between her check and her write another
    editor moves it to eng: her write must not land on a document she may no longer change."""
    scenario_config.tokens = TOKENS
    scenario_config.editors = ["root"]
    scenario_config.editor_groups = ["kb-editors"]
    app = scenario_app(scenario_config)
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        kb = app.state.services.kb
        doc = await _upload(client, "root", "policy.md", b"# Policy\n\nFor all.\n", None)
        for method, path, body in (
            ("PATCH", f"/documents/{doc}", {"groups": ["hr"]}),
            ("DELETE", f"/documents/{doc}", None),
        ):
            await kb.set_document_groups(doc, [])  # public again: carol may change it
            real = kb.get_document_by_id

            async def read_then_moved(document_id: str, real: Any = real) -> Any:
                checked = await real(document_id)  # what carol's check reads...
                await kb.set_document_groups(document_id, ["eng"])  # ...then root moves it
                return checked

            monkeypatch.setattr(kb, "get_document_by_id", read_then_moved)
            answer = await client.request(method, path, json=body, headers=_as("carol"))
            monkeypatch.setattr(kb, "get_document_by_id", real)
            assert answer.status_code == 409, answer.text
            assert answer.json()["error"]["code"] == "document_changed"
            now = await kb.get_document_by_id(doc)
            assert now is not None and now.groups == ["eng"]  # root's change stands, carol's did nothing


@pytest.mark.parametrize(
    ("found", "then", "status"),
    [
        (None, ["eng"], "error"),  # no document when queued; another editor's eng document since
        ([], ["eng"], "error"),  # a public document when queued, moved to eng since
        ([], [], "updated"),  # still the document that was checked
        (None, ["hr"], "updated"),  # this job's own write, left by an attempt that died before saving
    ],
    ids=["created-since", "regrouped-since", "unchanged", "own-write"],
)
async def test_an_upload_lands_only_on_the_document_it_was_checked_against(
    tmp_path: Path, found: list[str] | None, then: list[str], status: str
) -> None:
    """The upload route checks the caller may change the document a name holds; the job runs later.
    It writes a file only while that document is still the one checked (an hr editor's queued
    upload never overwrites a document moved to eng meanwhile, nor one another editor created)."""
    from ragstream.jobs import IngestJob
    from ragstream.jobs.models import CHANGED_SINCE_QUEUED, JobContext, run_job
    from ragstream.runs.locks import MemoryRunLocks

    async with KnowledgeBase(tmp_path / "kb", embedder=HashingEmbeddingModel()) as kb:
        theirs = await kb.ingest_bytes(b"# Plan\n\nThe eng plan: ship in May.", name="plan.md", groups=then)
        job = IngestJob.new("job-1", "ed", ["plan.md"])
        job.groups, job.found = ["hr"], {"plan.md": found}
        saved: list[IngestJob] = []

        async def save(record: IngestJob) -> None:
            saved.append(record.model_copy(deep=True))

        async def read(index: int) -> bytes:
            return b"# Plan\n\nThe hr plan: hire in June."

        async def never() -> bool:
            return False

        finished = await run_job(kb, job, JobContext(save, read, never, MemoryRunLocks()))
        assert finished.state == "done" and finished.files[0].status == status
        document = await kb.get_document_by_id(theirs.document_id)
        assert document is not None
        text = " ".join(hit.text for hit in await kb.get_chunks(theirs.document_id))
        if status == "error":
            assert finished.files[0].error == CHANGED_SINCE_QUEUED
            assert document.groups == then and "ship in May" in text
        else:
            assert document.groups == ["hr"] and "hire in June" in text
        assert "found" not in finished.public()  # what the job checks stays on the server


async def test_a_session_summary_of_answers_the_owner_may_no_longer_read_is_withheld(
    scenario_config: Any,
) -> None:
    """With a model, the thread's session summary (``session_context``) is written from its QA
    answers, and so says what their passages said. Once alice may not read the HR document, the
    summary goes with the answers: not in her thread's state, nor in the instructions of her next
    question's answer. Kept aside, not lost: readable again, it is back, unless a summary was
    written since."""
    instructions: list[str] = []

    def qa_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        instructions.append(info.instructions or "")
        (prompt,) = [p.content for m in messages for p in m.parts if isinstance(p, UserPromptPart)]
        assert isinstance(prompt, str)
        if info.output_tools:  # the answer: it quotes the passages, as a model may
            args = {"answer": f"From [1]: {prompt.partition('Passages:')[2].strip()}", "confidence": 0.9}
            return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, args)])
        return ModelResponse(parts=[TextPart(f"The user was told: {prompt}")])  # the summary

    toolkit = build_toolkit(scenario_config, ["search", "documents", "qa"], model=FunctionModel(qa_model))
    alice = _as("alice")

    async def summary() -> Any:
        view = (await client.get("/threads/sum", headers=alice)).json()
        item = await client.get("/threads/sum/state/session_context", headers=alice)
        assert item.status_code == 200 and item.json()["value"] == view["state"]["session_context"]
        return view["state"]["session_context"]

    async with _server(scenario_config, agent=scenario_agent(toolkit), toolkit=toolkit) as client:
        hr_id = await _upload(client, "root", "travel-hr.md", HR_DOC, "hr")
        ask = f"call ask {json.dumps({'question': QUESTION})}"
        first = await client.post("/agui", json=_run("sum", ask), headers=alice)
        assert first.status_code == 200 and "HRQUOKKA" in first.text
        for _ in range(500):  # the summary is written in the background after the run
            if await summary() is not None:
                break
            await asyncio.sleep(0.01)
        before = await summary()
        assert "HRQUOKKA" in before["summary"]

        async def move(groups: list[str]) -> None:
            moved = await client.patch(f"/documents/{hr_id}", json={"groups": groups}, headers=_as("root"))
            assert moved.status_code == 200

        await move(["finance"])
        assert await summary() is None
        await move(["hr"])  # kept aside, not lost
        assert await summary() == before
        await move(["finance"])
        again = {"question": "Who approves expenses?"}
        second = await client.post(
            "/agui", json=_run("sum", f"call ask {json.dumps(again)}", "r2", "m2"), headers=alice
        )
        assert second.status_code == 200 and "HRQUOKKA" not in second.text
        assert "Earlier in this conversation" not in instructions[-1]  # no summary to go on
        for _ in range(500):
            if await summary() is not None:
                break
            await asyncio.sleep(0.01)
        newer = await summary()
        assert "Who approves expenses?" in newer["summary"] and "HRQUOKKA" not in newer["summary"]
        await move(["hr"])  # a summary written since is the thread's: the older one stays out
        assert await summary() == newer


async def test_a_document_sharing_its_display_source_with_a_restricted_one_is_not_withheld(
    scenario_config: Any,
) -> None:
    """An upload and a synced (or ingested) file may show as the same ``uri``. Bob reads the public
    ``handbook.md``; an HR document is shown as ``handbook.md`` too. His results of the public one
    (read, listed) stay his: never withheld as if they came from the document he may not read,
    which would also tell him that a document he may not read is shown under that name."""
    async with KnowledgeBase.from_config(scenario_config) as kb:
        hr = await kb.ingest_bytes(
            b"# HR handbook\n\nThe HR handbook: HRQUOKKA.",
            name="handbook.md",
            uri="handbook.md",
            groups=["hr"],
        )
    bob = _as("bob")
    async with _server(scenario_config) as client:
        await _upload(client, "root", "handbook.md", b"# Handbook\n\nThe public handbook: PUBWALLABY.", None)
        calls = [
            f"call get_document {json.dumps({'query': 'handbook.md'})}",
            f"call summarize_document {json.dumps({'query': 'handbook.md'})}",
            f"call list_documents {json.dumps({'page': 1})}",
        ]
        for n, call in enumerate(calls):
            run = await client.post("/agui", json=_run(f"hb-{n}", call), headers=bob)
            assert run.status_code == 200 and "HRQUOKKA" not in run.text
            view = (await client.get(f"/threads/hb-{n}", headers=bob)).json()
            (result,) = [m["content"] for m in view["messages"] if m["role"] == "tool"]
            assert result != WITHHELD and "handbook.md" in result, call
            replay = await client.get(f"/threads/hb-{n}/runs/r1/events?after=0", headers=bob)
            assert '"code":"withheld"' not in replay.text, call
        # alice reads the HR one: her result of it is still withheld once she may not read it
        alice = _as("alice")
        hr_read = f"call get_document {json.dumps({'query': 'HR handbook'})}"
        assert "HRQUOKKA" in (await client.post("/agui", json=_run("hb-hr", hr_read), headers=alice)).text
        moved = await client.patch(
            f"/documents/{hr.document_id}", json={"groups": ["finance"]}, headers=_as("root")
        )
        assert moved.status_code == 200
        view = (await client.get("/threads/hb-hr", headers=alice)).json()
        assert [m["content"] for m in view["messages"] if m["role"] == "tool"] == [WITHHELD]


async def test_a_replayed_search_stops_before_the_hits_the_reader_may_no_longer_read(
    scenario_config: Any,
) -> None:
    """A search's result and the state change recording its hits name passages by the thread's
    citation numbers; they name their documents too, so a replay of the run for alice, once she
    may not read the HR document, ends before either: no passage text, no title."""
    alice = _as("alice")
    async with _server(scenario_config) as client:
        hr_id = await _upload(client, "root", "travel-hr.md", HR_DOC, "hr")
        run = await client.post("/agui", json=_run("replay", QUESTION), headers=alice)
        assert run.status_code == 200 and "HRQUOKKA" in run.text
        replay = "/threads/replay/runs/r1/events?after=0"
        whole = [e for _, e in parse_sse((await client.get(replay, headers=alice)).text)]
        assert whole[-1]["type"] == "RUN_FINISHED" and "HRQUOKKA" in json.dumps(whole)
        moved = await client.patch(f"/documents/{hr_id}", json={"groups": ["finance"]}, headers=_as("root"))
        assert moved.status_code == 200
        replayed = [e for _, e in parse_sse((await client.get(replay, headers=alice)).text)]
        assert replayed[-1]["type"] == "RUN_ERROR" and replayed[-1]["code"] == "withheld"
        shown = json.dumps(replayed[:-1])
        assert "HRQUOKKA" not in shown and "Travel policy" not in shown and "travel-hr.md" not in shown
        assert "TOOL_CALL_START" in shown  # what came before the search's hits is replayed


async def test_a_replayed_session_summary_names_the_documents_it_came_from(scenario_config: Any) -> None:
    """The session summary of the latest answers goes with every run's first state snapshot, long
    after the cards of the passages those answers cited have left the snapshot's window. It names
    their documents, so a replay for alice, once she may not read the HR document, ends before it."""

    def qa_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        (prompt,) = [p.content for m in messages for p in m.parts if isinstance(p, UserPromptPart)]
        assert isinstance(prompt, str)
        if info.output_tools:  # cites every passage, quoting them
            cited = " ".join(f"[{n}]" for n in range(1, 20))
            args = {"answer": f"{cited}: {prompt.partition('Passages:')[2].strip()}", "confidence": 0.9}
            return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, args)])
        return ModelResponse(parts=[TextPart(f"The user was told: {prompt}")])

    toolkit = build_toolkit(scenario_config, ["search", "documents", "qa"], model=FunctionModel(qa_model))
    alice = _as("alice")
    async with _server(scenario_config, agent=scenario_agent(toolkit), toolkit=toolkit) as client:
        hr_id = await _upload(client, "root", "travel-hr.md", HR_DOC, "hr")

        async def ask(run: str, question: str) -> None:
            body = _run("sums", f"call ask {json.dumps({'question': question})}", run, f"m-{run}")
            assert (await client.post("/agui", json=body, headers=alice)).status_code == 200
            for _ in range(500):  # the summary of this answer lands in the background
                state = (await client.get("/threads/sums", headers=alice)).json()["state"]
                if question in json.dumps(state["session_context"]):
                    return
                await asyncio.sleep(0.01)
            raise AssertionError("no summary")

        await ask("r1", QUESTION)
        await ask("r2", "How long are nightly backups kept?")  # its cards fill the window
        run = await client.post("/agui", json=_run("sums", "archive a note", "r3", "m-r3"), headers=alice)
        assert run.status_code == 200 and "archive_note" in run.text  # a turn that reads no document
        (snapshot,) = [e for _, e in parse_sse(run.text) if e["type"] == "STATE_SNAPSHOT"]
        assert "HRQUOKKA" in json.dumps(snapshot["snapshot"]["session_context"])
        assert hr_id not in {c["document_id"] for c in snapshot["snapshot"]["citations"].values()}
        moved = await client.patch(f"/documents/{hr_id}", json={"groups": ["finance"]}, headers=_as("root"))
        assert moved.status_code == 200
        replay = await client.get("/threads/sums/runs/r3/events?after=0", headers=alice)
        events = [e for _, e in parse_sse(replay.text)]
        assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "withheld"
        assert "HRQUOKKA" not in replay.text


PARKING_DOC = (
    b"# Parking\n\nThe parking validation word for visitors this quarter is MARMALADE-TANGERINE, "
    b"given at the front desk on request and changed every quarter by facilities. Cars without it "
    b"are towed after two hours. Visitors park on level minus two of the north garage, behind the "
    b"blue gate next to the bicycle racks, and take the lift to the lobby.\n"
)


async def test_a_replayed_patch_of_a_card_names_the_cards_document(scenario_config: Any) -> None:
    """A later answer quoting another sentence of a card already shown changes only that card's
    passage (a patch to ``/citations/{n}/passage``, naming no document). A replay for alice, once she
    may not read the document, still stops before it, even when asked to start right there."""
    alice = _as("alice")
    async with _server(scenario_config, scenario=False) as client:
        parking = await _upload(client, "root", "parking.md", PARKING_DOC, "hr")
        for run, question in (
            ("r1", "What is the parking validation word for visitors?"),
            ("r2", "Where do visitors park in the north garage?"),
        ):
            body = _run("parking", question, run, f"m-{run}")
            response = await client.post("/agui", json=body, headers=alice, timeout=120)
            assert response.status_code == 200 and "RUN_FINISHED" in response.text
        events = parse_sse((await client.get("/threads/parking/runs/r2/events?after=0", headers=alice)).text)
        patches = [
            (seq, e)
            for seq, e in events
            if e["type"] == "STATE_DELTA" and any(op["path"].startswith("/citations/") for op in e["delta"])
        ]
        (seq, patch), *_ = [(seq, e) for seq, e in patches if parking not in json.dumps(e)]
        assert "behind the blue gate" in json.dumps(patch)  # the card's passage, no document named
        moved = await client.patch(f"/documents/{parking}", json={"groups": ["finance"]}, headers=_as("root"))
        assert moved.status_code == 200
        replay = await client.get(f"/threads/parking/runs/r2/events?after={int(seq) - 1}", headers=alice)
        replayed = [e for _, e in parse_sse(replay.text)]
        assert replayed[-1]["type"] == "RUN_ERROR" and replayed[-1]["code"] == "withheld", replayed
        assert "blue gate" not in replay.text
        await client.delete(f"/documents/{parking}", headers=_as("root"))  # gone: still not shown
        replay = await client.get(f"/threads/parking/runs/r2/events?after={int(seq) - 1}", headers=alice)
        assert "blue gate" not in replay.text and '"code":"withheld"' in replay.text
