"""The delta engine: patches that apply exactly, and snapshots only when they are smaller."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag_tools.state import (
    SEARCH_NAMESPACE,
    SESSION_NAMESPACE,
    SearchHitSummary,
    SearchState,
    SessionState,
    StateTracker,
    ToolContext,
    encoded_size,
    make_patch,
    prepare_context,
)

keys = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6)
leaves = st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=8)
json_values = st.recursive(
    leaves,
    lambda children: st.lists(children, max_size=6) | st.dictionaries(keys, children, max_size=6),
    max_leaves=30,
)
states = st.dictionaries(keys, json_values, max_size=6)


@st.composite
def mutated(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """A state and a mutation of it: edits at random paths, appends, front removals, new keys."""
    a = draw(states)
    b = copy.deepcopy(a)
    for _ in range(draw(st.integers(0, 5))):
        target: Any = b
        while isinstance(target, dict | list) and target and draw(st.booleans()):
            target = (
                target[draw(st.sampled_from(list(target)))]
                if isinstance(target, dict)
                else target[draw(st.integers(0, len(target) - 1))]
            )
        if isinstance(target, dict):
            action = draw(st.sampled_from(["set", "delete"]))
            if action == "delete" and target:
                del target[draw(st.sampled_from(list(target)))]
            else:
                target[draw(keys)] = draw(json_values)
        elif isinstance(target, list):
            action = draw(st.sampled_from(["append", "pop_front", "set", "pop"]))
            if action == "append":
                target.extend(draw(st.lists(json_values, min_size=1, max_size=3)))
            elif action == "pop_front" and target:
                del target[: draw(st.integers(1, len(target)))]
            elif action == "set" and target:
                target[draw(st.integers(0, len(target) - 1))] = draw(json_values)
            elif target:
                target.pop()
    return a, b


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_patch_applies_exactly(pair: tuple[dict[str, Any], dict[str, Any]]) -> None:
    a, b = pair
    original = copy.deepcopy(a)
    ops = make_patch(a, b)
    assert jsonpatch.apply_patch(a, ops) == b
    assert a == original  # the engine never mutates its inputs


@settings(max_examples=200)
@given(states, states)
def test_patch_between_unrelated_states(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert jsonpatch.apply_patch(a, make_patch(a, b)) == b


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutated(), min_size=1, max_size=4))
def test_tracker_sends_snapshots_only_when_smaller(
    pairs: list[tuple[dict[str, Any], dict[str, Any]]],
) -> None:
    client = copy.deepcopy(pairs[0][0])
    tracker = StateTracker(copy.deepcopy(client))
    for _, new in pairs:
        patch_bytes = encoded_size(make_patch(client, new))
        update = tracker.update(new)
        if update.kind == "none":
            assert client == new
        elif update.kind == "delta":
            assert update.ops is not None
            assert patch_bytes <= encoded_size(new), "a delta was sent though the snapshot is smaller"
            client = jsonpatch.apply_patch(client, update.ops)
        else:
            assert encoded_size(new) < patch_bytes, "a snapshot was sent though the patch is not larger"
            client = copy.deepcopy(update.snapshot)
        assert client == new


def test_append_and_front_eviction_are_cheap_operations() -> None:
    old = {"history": [{"q": i} for i in range(5)]}
    new = {"history": [*old["history"][2:], {"q": 5}]}
    assert make_patch(old, new) == [
        {"op": "remove", "path": "/history/0"},
        {"op": "remove", "path": "/history/0"},
        {"op": "add", "path": "/history/-", "value": {"q": 5}},
    ]


def test_pointer_escaping() -> None:
    old: dict[str, Any] = {"a/b": 1, "c~d": {"x": 1}}
    new = {"a/b": 2, "c~d": {"x": 1, "y": 2}}
    ops = make_patch(old, new)
    assert {"op": "replace", "path": "/a~1b", "value": 2} in ops
    assert {"op": "add", "path": "/c~0d/y", "value": 2} in ops
    assert jsonpatch.apply_patch(old, ops) == new


def test_type_changes_are_replacements() -> None:
    assert make_patch({"a": 1}, {"a": "1"}) == [{"op": "replace", "path": "/a", "value": "1"}]
    assert make_patch({"a": [1]}, {"a": {"0": 1}}) == [{"op": "replace", "path": "/a", "value": {"0": 1}}]


def test_rag_state_changes_produce_small_deltas_against_one_baseline() -> None:
    ctx = prepare_context(ToolContext(), ["search"])
    session = ctx.get(SESSION_NAMESPACE, SessionState)
    searches = ctx.get(SEARCH_NAMESPACE, SearchState)
    for i in range(300):
        session.cite(chunk_id=f"c{i}", document_id="d", title="T", uri="u", text="passage " * 100)
    ctx.mark_changed(SESSION_NAMESPACE)
    client = ctx.build_state_snapshot()
    tracker = StateTracker(client)
    for step in range(3):  # three tool calls in one run
        hits = []
        for k in range(3):
            index = session.cite(chunk_id=f"new{step}-{k}", document_id="d", title="T", uri="u", text="new")
            hits.append(SearchHitSummary(citation=index, title="T", score=0.5))
        searches.add_search(f"query {step}", hits)
        ctx.mark_changed(SESSION_NAMESPACE)
        ctx.mark_changed(SEARCH_NAMESPACE)
        server = ctx.build_state_snapshot()
        update = tracker.update(server)
        assert update.kind == "delta"
        assert update.patch_bytes < 2000 < encoded_size(server)
        client = jsonpatch.apply_patch(client, update.ops)
        assert client == server
