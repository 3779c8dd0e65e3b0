"""ToolContext, field ownership, citations, the RAG namespaces and prepare_context."""

from __future__ import annotations

from typing import ClassVar

import pytest
from pydantic import BaseModel, ValidationError

from rag_tools.state import (
    QA_NAMESPACE,
    SEARCH_NAMESPACE,
    SESSION_NAMESPACE,
    QASessionState,
    SearchHitSummary,
    SearchState,
    SessionState,
    StateCollisionError,
    StateModel,
    ToolContext,
    prepare_context,
)


class Notes(StateModel):
    client_fields: ClassVar[frozenset[str]] = frozenset({"draft"})
    server_only_fields: ClassVar[frozenset[str]] = frozenset({"secret"})

    draft: str = ""
    count: int = 0
    tags: list[str] = []
    secret: str = "hidden"


class Other(BaseModel):
    count: int = 5


def cite(session: SessionState, chunk: str, limit: int = 200) -> int:
    return session.cite(
        chunk_id=chunk, document_id="d1", title="Doc", uri="mem://d1", text=f"text {chunk}", limit=limit
    )


def test_register_get_and_get_or_create() -> None:
    ctx = ToolContext()
    notes = Notes(count=2)
    ctx.register("notes", notes)
    assert ctx.get("notes") is notes
    assert ctx.get("notes", Notes) is notes
    assert ctx.get("notes", SessionState) is None  # wrong type: None, not an error
    assert ctx.get("absent") is None
    assert ctx.get_or_create("notes", Notes) is notes
    created = ctx.get_or_create("session", SessionState)
    assert isinstance(created, SessionState)
    assert ctx.get("session", SessionState) is created
    with pytest.raises(TypeError, match="holds Notes, not SessionState"):
        ctx.get_or_create("notes", SessionState)


def test_field_collision_names_both_namespaces() -> None:
    ctx = ToolContext()
    ctx.register("notes", Notes())
    with pytest.raises(StateCollisionError) as err:
        ctx.register("other", Other())
    message = str(err.value)
    assert "'count'" in message
    assert "'other'" in message
    assert "'notes'" in message
    assert ctx.get("other") is None
    ctx.register("notes", Notes(count=9))  # replacing a namespace is not a collision with itself


def test_snapshot_is_flat_hides_server_only_and_honours_state_key() -> None:
    ctx = ToolContext()
    ctx.register("notes", Notes(draft="d", count=3, tags=["a"]))
    ctx.register("session", SessionState())
    snapshot = ctx.build_state_snapshot()
    assert snapshot == {"draft": "d", "count": 3, "tags": ["a"], "document_filter": [], "citations": {}}
    assert "secret" not in snapshot
    assert "citation_registry" not in snapshot
    ctx.state_key = "rag"
    assert ctx.build_state_snapshot() == {"rag": snapshot}


def test_dump_and_load_round_trip_keeps_server_only_fields() -> None:
    ctx = ToolContext()
    ctx.register("notes", Notes(draft="x", secret="kept"))
    dump = ctx.dump_namespaces()
    assert dump == {"notes": {"draft": "x", "count": 0, "tags": [], "secret": "kept"}}
    fresh = ToolContext()
    loaded = fresh.load_namespace("notes", Notes, dump["notes"])
    assert loaded.secret == "kept"
    assert fresh.build_state_snapshot() == ctx.build_state_snapshot()


def test_from_dump_types_namespaces_lazily_and_keeps_unknown_ones() -> None:
    ctx = ToolContext.from_dump({"notes": {"draft": "y", "count": 4}, "plugin": {"anything": [1, 2]}})
    assert ctx.build_state_snapshot() == {}  # nothing typed yet
    assert ctx.get_or_create("notes", Notes).count == 4
    assert ctx.dump_namespaces()["plugin"] == {"anything": [1, 2]}


def test_restore_updates_in_place_and_ignores_unknown_keys() -> None:
    ctx = ToolContext()
    notes = Notes()
    ctx.register("notes", notes)
    ctx.restore_state_snapshot({"draft": "r", "count": 7, "tags": ["t"], "unknown": 1, "secret": "no"})
    assert ctx.get("notes") is notes
    assert (notes.draft, notes.count, notes.tags) == ("r", 7, ["t"])
    assert notes.secret == "hidden"  # server-only fields are not part of a snapshot


def test_restore_with_wrong_types_names_the_field_and_changes_nothing() -> None:
    ctx = ToolContext()
    ctx.register("notes", Notes(count=1))
    ctx.register("session", SessionState(document_filter=["a"]))
    before = ctx.build_state_snapshot()
    with pytest.raises(ValidationError) as err:
        ctx.restore_state_snapshot({"count": 2, "document_filter": "not-a-list", "tags": "nope"})
    fields = {e["loc"][0] for e in err.value.errors()}
    assert fields == {"document_filter", "tags"}
    assert ctx.build_state_snapshot() == before  # count=2 was valid but nothing was applied


def test_restoring_a_contexts_own_snapshot_loses_nothing() -> None:
    """A snapshot carries excerpts of cards and only the latest items of windowed fields; restoring
    it keeps the whole passages and the older items, and a change in it still lands."""
    ctx = prepare_context(ToolContext(), ["search", "qa"])
    ctx.set_emit_limits({"citations": 2, "qa_history": 1})
    session = ctx.get(SESSION_NAMESPACE, SessionState)
    long_text = "Backups are kept for thirty days. " * 40
    for chunk in "abc":
        session.cite(chunk_id=chunk, document_id="d1", title="Doc", uri="mem://d1", text=long_text, limit=10)
    session.citations = {
        k: card.model_copy(update={"excerpt": card.passage[:40]}) for k, card in session.citations.items()
    }
    qa = ctx.get(QA_NAMESPACE, QASessionState)
    for n in range(3):
        qa.add_entry({"question": f"q{n}", "answer": "a" * 400, "confidence": 0.5}, [0.1, 0.2], limit=10)
    ctx.mark_changed(SESSION_NAMESPACE)
    ctx.mark_changed(QA_NAMESPACE)
    whole = ctx.dump_namespaces()
    snapshot = ctx.build_state_snapshot()
    assert len(snapshot["citations"]) == 2 and len(snapshot["qa_history"]) == 1

    ctx.restore_state_snapshot(snapshot)
    assert ctx.dump_namespaces() == whole

    changed = {
        **snapshot,
        "citations": {**snapshot["citations"], "3": {**snapshot["citations"]["3"], "title": "Renamed"}},
    }
    ctx.restore_state_snapshot(changed)
    cards = ctx.get(SESSION_NAMESPACE, SessionState).citations
    assert sorted(cards, key=int) == ["1", "2", "3"]  # "1" is beyond the window: kept
    assert cards["3"].title == "Renamed"
    assert cards["2"].passage == whole[SESSION_NAMESPACE]["citations"]["2"]["passage"]  # the whole card stays
    assert len(cards["2"].passage) > len(snapshot["citations"]["2"]["passage"])  # it carried the excerpt
    assert [e.question for e in ctx.get(QA_NAMESPACE, QASessionState).qa_history] == ["q0", "q1", "q2"]


def test_a_document_filter_name_is_as_long_as_a_filter_takes() -> None:
    """The session's filter takes no name the document filter would refuse at search time."""
    ctx = prepare_context(ToolContext(), ["search"])
    with pytest.raises(ValidationError, match="document_filter"):
        ctx.apply_client_proposal({"document_filter": ["x" * 501]})
    assert ctx.get(SESSION_NAMESPACE, SessionState).document_filter == []
    ctx.apply_client_proposal({"document_filter": ["x" * 500]})
    assert ctx.get(SESSION_NAMESPACE, SessionState).document_filter == ["x" * 500]


def test_client_proposal_takes_only_client_owned_fields() -> None:
    ctx = ToolContext()
    prepare_context(ctx, ["search"])
    cite(ctx.get(SESSION_NAMESPACE, SessionState), "c1")
    server = ctx.build_state_snapshot()

    same = ctx.apply_client_proposal(server)
    assert same is False

    proposal = {**server, "document_filter": ["guide"], "citations": {"1": {"forged": True}}, "searches": {}}
    proposal["searches"] = {"x": 1}
    diverged = ctx.apply_client_proposal(proposal)
    session = ctx.get(SESSION_NAMESPACE, SessionState)
    assert session.document_filter == ["guide"]
    assert session.citations["1"].passage == "text c1"  # untouched
    assert diverged is True  # the client's citations and searches differ: it needs a snapshot

    assert ctx.apply_client_proposal({**ctx.build_state_snapshot()}) is False
    assert ctx.apply_client_proposal({}) is True  # an empty client state is behind the server
    assert session.document_filter == ["guide"]  # a missing field is not a proposal to clear it

    with pytest.raises(ValidationError, match="document_filter"):
        ctx.apply_client_proposal({"document_filter": [{"not": "a name"}]})
    assert session.document_filter == ["guide"]


def test_client_proposal_under_a_state_key() -> None:
    ctx = prepare_context(ToolContext(), ["documents"], state_key="rag")
    assert ctx.apply_client_proposal({"rag": {"document_filter": ["x"], "citations": {}}}) is False
    assert ctx.get(SESSION_NAMESPACE, SessionState).document_filter == ["x"]
    assert ctx.apply_client_proposal({"document_filter": ["y"]}) is True  # outside the key: not ours
    assert ctx.get(SESSION_NAMESPACE, SessionState).document_filter == ["x"]
    with pytest.raises(TypeError, match="state\\['rag'\\] must be a JSON object"):
        ctx.apply_client_proposal({"rag": [1]})


def test_citation_indices_are_stable_first_occurrence_wins() -> None:
    session = SessionState()
    assert [cite(session, c) for c in ["a", "b", "a", "c", "b"]] == [1, 2, 1, 3, 2]
    assert session.citations["1"].passage == "text a"


def test_citation_eviction_keeps_indices() -> None:
    session = SessionState()
    for chunk in "abcde":
        cite(session, chunk, limit=3)
    assert sorted(session.citations, key=int) == ["3", "4", "5"]
    assert cite(session, "a", limit=3) == 1  # evicted card, same number
    assert sorted(session.citations, key=int) == ["1", "4", "5"]


def test_citations_survive_a_persist_reload_cycle() -> None:
    ctx = prepare_context(ToolContext(), ["search"])
    session = ctx.get(SESSION_NAMESPACE, SessionState)
    for chunk in ["a", "b", "c"]:
        cite(session, chunk)
    reloaded = prepare_context(ToolContext.from_dump(ctx.dump_namespaces()), ["search"])
    again = reloaded.get(SESSION_NAMESPACE, SessionState)
    assert [cite(again, c) for c in ["c", "d", "a"]] == [3, 4, 1]


def test_bounded_search_and_qa_histories() -> None:
    searches = SearchState()
    hit = SearchHitSummary(citation=1, title="t", score=1.0)
    for n in range(5):
        searches.add_search(f"q{n}", [hit], limit=3)
    assert [r.query for r in sorted(searches.searches.values(), key=lambda r: r.seq)] == ["q2", "q3", "q4"]

    qa = QASessionState()
    for n in range(4):
        qa.add_entry({"question": f"q{n}", "answer": "a", "confidence": 0.5}, [0.1, 0.2], limit=2)
    assert [e.question for e in qa.qa_history] == ["q2", "q3"]
    assert set(qa.question_embeddings) == {e.id for e in qa.qa_history}


def test_qa_embeddings_never_reach_the_snapshot() -> None:
    ctx = prepare_context(ToolContext(), ["qa"])
    qa = ctx.get(QA_NAMESPACE, QASessionState)
    qa.add_entry({"question": "q", "answer": "a", "confidence": 1.0}, [0.5] * 8, limit=10)
    ctx.mark_changed(QA_NAMESPACE)
    snapshot = ctx.build_state_snapshot()
    assert "question_embeddings" not in snapshot
    assert "0.5" not in str(snapshot)
    assert snapshot["qa_history"][0]["question"] == "q"


def test_prepare_context_is_idempotent() -> None:
    ctx = ToolContext()
    prepare_context(ctx, ["search", "qa", "documents"])
    session = ctx.get(SESSION_NAMESPACE, SessionState)
    cite(session, "a")
    ctx.mark_changed(SESSION_NAMESPACE)
    before = (ctx.dump_namespaces(), ctx.build_state_snapshot(), dict(ctx.namespaces))
    prepare_context(ctx, ["search", "qa", "documents"])
    after = (ctx.dump_namespaces(), ctx.build_state_snapshot(), dict(ctx.namespaces))
    assert before == after
    assert ctx.get(SESSION_NAMESPACE) is session
    assert set(ctx.namespaces) == {SESSION_NAMESPACE, SEARCH_NAMESPACE, QA_NAMESPACE}
    with pytest.raises(ValueError, match="unknown feature"):
        prepare_context(ctx, ["telepathy"])


def test_snapshots_share_unchanged_items() -> None:
    ctx = prepare_context(ToolContext(), ["search"])
    session = ctx.get(SESSION_NAMESPACE, SessionState)
    cite(session, "a")
    ctx.mark_changed(SESSION_NAMESPACE)
    first = ctx.build_state_snapshot()
    cite(session, "b")
    ctx.mark_changed(SESSION_NAMESPACE)
    second = ctx.build_state_snapshot()
    assert second["citations"]["1"] is first["citations"]["1"]
    assert set(second["citations"]) == {"1", "2"}


def test_a_frozen_context_dumps_as_it_was_when_frozen() -> None:
    from rag_tools.state import SESSION_NAMESPACE, SessionState, ToolContext

    context = ToolContext()
    session = context.get_or_create(SESSION_NAMESPACE, SessionState)
    session.cite(chunk_id="c1", document_id="d", title="T", uri="t.md", text="one")
    context.mark_changed(SESSION_NAMESPACE)
    before = context.dump_namespaces()
    frozen = context.freeze()
    session.cite(chunk_id="c2", document_id="d", title="T", uri="t.md", text="two")  # changes in place
    session.document_filter.append("t.md")
    context.mark_changed(SESSION_NAMESPACE)
    assert ToolContext.dump_frozen(frozen) == before
    assert context.dump_namespaces() != before
    # the branch part leaves out client fields (the document filter) and excluded namespaces
    branch = context.branch_dump(ToolContext.dump_frozen(frozen), exclude={"other"})
    assert "document_filter" not in branch[SESSION_NAMESPACE] and branch[SESSION_NAMESPACE]["citations"]
